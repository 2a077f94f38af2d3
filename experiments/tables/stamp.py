"""What made a table: the commit, each program's code (the answer code it imports, its registered settings), the data
fingerprints and the table's declared settings; and what of it differs from today's code (``check``).

A program's code hash covers the modules its class imports, followed import by import, that are answer code
(``experiments.sessions.ANSWER_CODE``), and the scoring code every answer goes through: changing SEAL's module stales
the tables that run SEAL and no other."""
from __future__ import annotations

import ast
import hashlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import programs
from evaluation import loop
from experiments.sessions import ANSWER_CODE, NOT_ANSWER_CODE
from experiments.tables.declared import Table
from runtime.paths import PROJECT_ROOT

#: The modules that score every answer: part of every program's code.
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


def is_answer_code(path: Path, root: Path) -> bool:
    rel = path.relative_to(root).as_posix()
    return rel not in NOT_ANSWER_CODE and any(rel == e or rel.startswith(e + "/") for e in ANSWER_CODE)


def closure(modules: list[str], root: Path) -> list[Path]:
    """The answer-code files of ``modules`` and of everything they import, followed through answer code only."""
    seen, todo, files = set(), list(modules), set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_file(module, root)
        if path is None or not is_answer_code(path, root):
            continue
        files.add(path)
        todo.extend(imported(path, module, root))
    return sorted(files)


def program_code(name: str, root: Path = PROJECT_ROOT) -> str:
    """A hash of program ``name``'s code: the files :func:`closure` finds from its class's module and the scoring
    modules, the settings it takes at their defaults, what its variant fixes, and the code that turns a
    prediction into a record (``evaluation.loop.record``)."""
    spec = programs.spec(name)
    digest = hashlib.sha256(json.dumps([spec.fixed, {k: s.default for k, s in spec.settings.items()}],
                                       sort_keys=True, default=str).encode())
    digest.update(inspect.getsource(loop.record).encode())
    for path in closure([spec.cls.__module__, *SCORING], root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def current(table: Table, root: Path = PROJECT_ROOT) -> dict:
    """The stamp ``table`` would have if it were run now, data aside: its settings and its programs' code."""
    return {"settings": table.settings_hash(), "programs": {p: program_code(p, root) for p in table.programs}}


def differences(table: Table, stamp: dict, now: dict, data: dict | None = None) -> list[str]:
    """What of ``stamp`` (the rendered table's) differs from ``now`` (:func:`current`) and from today's ``data``
    fingerprints (dataset -> fingerprint; a dataset missing there is not compared): one phrase each."""
    out = []
    if stamp.get("settings") != now["settings"]:
        out.append("its declaration")
    ran = stamp.get("programs", {})
    out += [f"{p}'s code" for p in table.programs if p in ran and ran[p] != now["programs"][p]]
    out += [f"{d} data" for d, fp in (data or {}).items() if d in stamp.get("data", {}) and stamp["data"][d] != fp]
    return out


def git(*args: str) -> str | None:
    """git's output in the project, None when it fails (no git, an unknown commit)."""
    try:
        return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
                              ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def stale_since(table: Table, stamp: dict, root: Path = PROJECT_ROOT) -> str:
    """The first commit after the one ``stamp`` was made at that changed a file of its programs or its declaration
    (``uncommitted changes`` when none did: the working tree differs)."""
    made = stamp.get("commit", "").removesuffix("-dirty")
    files = {p.relative_to(root).as_posix() for name in table.programs
             for p in closure([programs.spec(name).cls.__module__, *SCORING], root)}
    files |= {"experiments/tables/declared.py", "programs/registry.py"}
    if made and root == PROJECT_ROOT:
        log = git("log", "--reverse", "--format=%h", f"{made}..HEAD", "--", *sorted(files))
        if log is None:
            return f"after {made[:12]} (a commit this checkout does not have)"
        if log:
            return log.split("\n")[0]
    return "uncommitted changes"


def data_fingerprints(datasets: list[str], settings: dict) -> dict:
    """Today's fingerprint of each of ``datasets`` with the table's corpus settings; a dataset whose files are not
    here is left out (said on stderr)."""
    from data import corpora

    out = {}
    for name in datasets:
        try:
            bundle = corpora.load(name, None, settings.get("corpus"), settings.get("leave_question_out", True),
                                  settings.get("max_docs"))
        except (FileNotFoundError, ValueError, KeyError) as err:
            print(f"note: {name} data not checked ({str(err).splitlines()[0][:120]})", file=sys.stderr)
            continue
        out[name] = bundle.fingerprint[:12]
    return out
