"""What made a table: the commit, each program's code (the answer code it imports, its registered settings), the data
fingerprints and the table's declared settings; and what of it differs from today's code (``check``).

A program's code hash is made as its checkpoints' key is (``experiments.code.answer_code``): the modules its class
imports, followed import by import through answer code, every first stage's, and the code every answer goes through
(LM calls, scoring): changing SEAL's module stales the tables that run SEAL and no other."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import programs
from experiments.code import answer_code, answer_files
from experiments.tables.declared import Table
from retrieval import first_stage
from runtime.paths import PROJECT_ROOT

#: The modules of every first stage: a table may run any of them (its retriever setting, ``hybrid``'s two).
FIRST_STAGES = tuple(sorted({stage.__module__ for stage in first_stage.stages().values()}))


def program_code(name: str, root: Path = PROJECT_ROOT) -> str:
    """A hash of program ``name``'s code: the settings it takes at their defaults, what its variant fixes, and the
    answer code of its class and of every first stage (:func:`experiments.code.answer_code`, the hash that keys its
    checkpoints, made of the first stage a run uses)."""
    spec = programs.spec(name)
    return hashlib.sha256(json.dumps([spec.fixed, {k: s.default for k, s in spec.settings.items()},
                                      answer_code((spec.cls.__module__, *FIRST_STAGES), root)],
                                     sort_keys=True, default=str).encode()).hexdigest()[:12]


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


def stale_since(table: Table, stamp: dict, now: dict, root: Path = PROJECT_ROOT) -> str:
    """The first commit that changed what a cell of ``stamp`` ran: per cell whose program's code differs from ``now``
    (:func:`current`; every cell, when the declaration differs), the first commit after the cell's own that changed a
    file of its program (or the declaration); the earliest of those. ``uncommitted changes`` when no commit did (the
    working tree differs)."""
    declared = {"experiments/tables/declared.py"} if stamp.get("settings") != now["settings"] else set()
    starts: dict[str, set] = {}  # a commit cells were made on -> the files whose later change stales them
    for key, cell in stamp.get("cells", {}).items():
        name = cell.get("program") or key.split("@")[0]
        changed = [p for p in ([name] if name in now["programs"] else table.programs)
                   if cell.get("code") != now["programs"][p]]
        files = {f.relative_to(root).as_posix() for p in changed
                 for f in answer_files((programs.spec(p).cls.__module__, *FIRST_STAGES), root)}
        files |= ({"programs/registry.py"} if changed else set()) | declared
        if files:
            starts.setdefault(cell.get("commit", "").removesuffix("-dirty"), set()).update(files)
    if root != PROJECT_ROOT:
        return "uncommitted changes"
    found = []
    for made, files in starts.items():
        log = git("log", "--reverse", "--format=%h", f"{made}..HEAD", "--", *sorted(files)) if made else ""
        if log is None:
            return f"after {made[:12]} (a commit this checkout does not have)"
        if log:
            found.append(log.split("\n")[0])
    # the earliest: the one most commits have followed
    return max(found, key=lambda c: int(git("rev-list", "--count", f"{c}..HEAD") or 0), default="uncommitted changes")


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
