"""The code behind an answer, as a hash: what keys a checkpoint (a changed prompt, parser or metric starts new records)
and stamps a rendered table (``experiments.tables.stamp``), one function for both.

A program's answer code is the project modules its classes live in, followed import by import through answer code
(:data:`ANSWER_CODE`), plus the path every answer takes whatever the program (the answer code outside ``programs/``
and ``signatures/``: LM calls, decoding, retrieval, metrics) and ``evaluation.loop.record``. Editing SEAL's module
therefore starts new SEAL records and leaves ``rag``'s resumable: a table measured in parts survives edits to the
programs it does not run."""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
from pathlib import Path

from evaluation import loop
from runtime.paths import PROJECT_ROOT

#: The code that writes and scores answers: a change to any of it that a program reaches starts new checkpoints.
ANSWER_CODE = ("programs", "decoding", "retrieval", "signatures", "evaluation/metrics.py", "evaluation/official.py",
               "evaluation/task_metrics.py", "evaluation/xlingual.py", "runtime/caps.py", "runtime/embedders.py",
               "runtime/language.py", "runtime/lm.py", "runtime/llama_serve.py", "runtime/roles.py")
#: Files under ANSWER_CODE that build datasets and answer nothing (the XRAG construction pipeline's signatures).
NOT_ANSWER_CODE = ("signatures/construct.py",)
#: Answer code a program reaches only by its imports; the rest of ANSWER_CODE is on every answer's path.
PER_PROGRAM = ("programs", "signatures")
#: The modules that score every answer.
SCORING = ("evaluation.task_metrics",)


def module_file(module: str, root: Path) -> Path | None:
    """The source file of project module ``module`` under ``root`` (None: not a project module)."""
    base = root.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.exists()), None)


def imported(path: Path, module: str, root: Path) -> set[str]:
    """The project modules ``path`` (module ``module``) imports: ``import a.b``, ``from a import b`` (module ``a.b``
    when it is one, else ``a``), relative imports resolved."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = ".".join(p for p in (package if node.level else "", node.module or "") if p)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if module_file(sub, root) else base)
    return {m for m in found if module_file(m, root)}


def is_answer_code(rel: str, entries: tuple[str, ...] = ANSWER_CODE) -> bool:
    """Whether the project file ``rel`` (a posix path) is under one of ``entries`` and answers something."""
    return rel not in NOT_ANSWER_CODE and any(rel == e or rel.startswith(e + "/") for e in entries)


def closure(modules: list[str] | tuple[str, ...], root: Path = PROJECT_ROOT) -> list[Path]:
    """The answer-code files of ``modules`` and of everything they import, followed through answer code only."""
    seen, todo, files = set(), list(modules), set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_file(module, root)
        if path is None or not is_answer_code(path.relative_to(root).as_posix()):
            continue
        files.add(path)
        todo.extend(imported(path, module, root))
    return sorted(files)


def common_files(root: Path = PROJECT_ROOT) -> list[Path]:
    """The answer code on every answer's path: :data:`ANSWER_CODE` outside :data:`PER_PROGRAM`."""
    files = (p for entry in ANSWER_CODE if not is_answer_code(entry, PER_PROGRAM)
             for p in ((root / entry).rglob("*.py") if (root / entry).is_dir() else [root / entry]))
    return sorted(p for p in files if p.exists() and is_answer_code(p.relative_to(root).as_posix()))


@functools.lru_cache(maxsize=64)
def answer_code(modules: tuple[str, ...], root: Path | None = None) -> str:
    """A hash of the code that answers and scores through ``modules`` (a program's classes' modules): their
    :func:`closure` with the scoring modules, :func:`common_files` and ``evaluation.loop.record``; ``root``: the
    project's (:data:`PROJECT_ROOT` as it is when called)."""
    root = root or PROJECT_ROOT
    digest = hashlib.sha256(inspect.getsource(loop.record).encode())
    for path in sorted({*closure((*sorted(modules), *SCORING), root), *common_files(root)}):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def program_modules(program) -> tuple[str, ...]:
    """The modules of ``program``'s classes and of every module inside it (a wrapper's inner program too)."""
    return tuple(sorted({type(program).__module__, *(type(m).__module__ for _, m in program.named_sub_modules())}))
