"""The code behind an answer, as a hash: what keys a checkpoint (a changed prompt, parser or metric starts new records)
and stamps a rendered table (``experiments.tables.stamp``), one function for both.

A run's answer code is the project modules its objects are made of (the program's modules, the retriever's first
stage, reranker and corpora), followed import by import through answer code (:data:`ANSWER_CODE`), plus the path
every answer takes (the answer code outside :data:`PER_OBJECT`: the LM client, role binding, caps, the embedder code),
the scoring modules and ``evaluation.loop.record``. Editing SEAL's module therefore starts new SEAL records and leaves
``rag``'s resumable, and editing the on-disk index's code leaves runs that use none: a table measured in parts survives
edits to code it does not run."""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
from itertools import islice
from pathlib import Path

from evaluation import loop
from runtime.paths import PROJECT_ROOT

#: The code that writes and scores answers: a change to any of it that a program reaches starts new checkpoints.
ANSWER_CODE = ("programs", "decoding", "retrieval", "signatures", "evaluation/metrics.py", "evaluation/official.py",
               "evaluation/task_metrics.py", "evaluation/xlingual.py", "runtime/caps.py", "runtime/embedders.py",
               "runtime/language.py", "runtime/lm.py", "runtime/llama_serve.py", "runtime/roles.py")
#: Files under ANSWER_CODE that build datasets and answer nothing (the XRAG construction pipeline's signatures).
NOT_ANSWER_CODE = ("signatures/construct.py",)
#: Answer code a run reaches only through the objects it is made of and their imports; the rest of ANSWER_CODE is on
#: every answer's path.
PER_OBJECT = ("programs", "signatures", "decoding", "retrieval")
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
    """The answer code on every answer's path: :data:`ANSWER_CODE` outside :data:`PER_OBJECT`."""
    files = (p for entry in ANSWER_CODE if not is_answer_code(entry, PER_OBJECT)
             for p in ((root / entry).rglob("*.py") if (root / entry).is_dir() else [root / entry]))
    return sorted(p for p in files if p.exists() and is_answer_code(p.relative_to(root).as_posix()))


def answer_files(modules: tuple[str, ...], root: Path) -> list[Path]:
    """The files of the code that answers and scores through ``modules``: their :func:`closure` with the scoring
    modules, and :func:`common_files`."""
    return sorted({*closure((*sorted(modules), *SCORING), root), *common_files(root)})


@functools.lru_cache(maxsize=64)
def answer_code(modules: tuple[str, ...], root: Path | None = None) -> str:
    """A hash of :func:`answer_files` of ``modules`` (:func:`object_modules` of a run) and ``evaluation.loop.record``;
    ``root``: the project's (:data:`PROJECT_ROOT` as it is when called)."""
    root = root or PROJECT_ROOT
    digest = hashlib.sha256(inspect.getsource(loop.record).encode())
    for path in answer_files(modules, root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def object_modules(*objects, depth: int = 4) -> tuple[str, ...]:
    """The project modules of ``objects``' classes and of what they hold (attributes, the first items of lists and
    dicts), ``depth`` levels down: a program's predictors and inner programs, a retriever's first stage (a hybrid's
    two), its reranker and corpora (an on-disk index)."""
    found, seen = set(), set()

    def visit(obj, left: int) -> None:
        if left < 0 or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
            return
        seen.add(id(obj))
        if isinstance(obj, (dict, list, tuple, set, frozenset)):
            for item in islice(obj.values() if isinstance(obj, dict) else obj, 8):  # a corpus's passages: one class
                visit(item, left)
            return
        module = type(obj).__module__
        if module_file(module, PROJECT_ROOT) is None:
            return  # not project code (dspy, numpy, faiss): nothing of ours inside that the key needs
        found.add(module)
        for value in getattr(obj, "__dict__", {}).values():
            visit(value, left - 1)

    for obj in objects:
        visit(obj, depth)
    return tuple(sorted(found))
