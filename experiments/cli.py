"""The command line of ``optimize.py``, ``evaluate.py`` and the scripts: flags derived from the declared settings, their
checks, exit codes, and the command that reproduces a run (the session a command opens: :mod:`experiments.sessions`)."""
from __future__ import annotations

import argparse
import os
import re
import errno
import shlex
import sqlite3
import sys
import threading
from collections.abc import Callable

import programs
from data import settings as data_settings
from evaluation import settings as evaluation_settings, tracking
from evaluation.loop import RunStopped
from evaluation.metrics import ANSWER_METRICS
from optimizers.compile import OPTIMIZERS
from programs import registry
from retrieval import settings as retrieval_settings
from runtime.files import Busy
from runtime.lm import ServerError
from runtime.settings import Setting, Settings

#: The settings a run's flags set, each declared once: the data's, the methods', the retriever's.
SETTINGS = (*data_settings.SETTINGS, *registry.SETTINGS, *retrieval_settings.SETTINGS)


class Parser(argparse.ArgumentParser):
    """Bad input is one line and exit 2, e.g. ``error: --k must be from 1 to 100 (got 0)`` (no usage block); the
    parsed flags are a plain :class:`~runtime.settings.Settings`."""

    def error(self, message):
        fail(re.sub(r"^argument (-[^:/ ]+)(/\S+)?: ", r"\1 ", message))

    def parse_known_args(self, args=None, namespace=None):
        parsed, extra = super().parse_known_args(args, argparse.Namespace() if namespace is None else namespace)
        return (Settings(**vars(parsed)) if namespace is None else parsed), extra


def flag_type(setting: Setting):
    """argparse type for ``setting``'s flag: its type, range and choices."""
    def parse(text: str):
        value = setting.kind(text)
        if problem := setting.problem(value):
            raise argparse.ArgumentTypeError(problem)
        return value
    parse.__name__ = setting.kind.__name__  # argparse's "invalid int value: 'x'"
    return parse


def at_least(low: float, kind: type = int):
    """argparse type: a (finite) number of ``kind`` >= ``low``."""
    return flag_type(Setting("", kind, low=low))


def add_flags(p: argparse.ArgumentParser, settings) -> None:
    """The flags of ``settings`` as declared: type, default, range or choices, help, shape; a method's own defaults
    are named in the help where the flag has none (``registry.defaults``)."""
    for s in settings:
        own = (f" (the method's own: {registry.defaults(s)})"
               if s.default is None and not s.none_ok and s in registry.SETTINGS else "")
        if s.kind is bool:
            p.add_argument(s.flag, action="store_true" if s.switch else argparse.BooleanOptionalAction,
                           default=s.default, help=s.help)
            continue
        shape = {"nargs": "+"} if s.many else {"nargs": "?", "const": s.const} if s.const is not None else {}
        if s.choices and s.check is None:
            p.add_argument(s.flag, default=s.default, choices=s.choices, help=s.help + own, **shape)
        else:
            p.add_argument(s.flag, type=flag_type(s), default=s.default, help=s.help + own,
                           metavar="|".join(s.choices) or None, **shape)


DATA_DIR = Setting("data_dir", str, None, "benchmark data folder (default: $RAG_DATA_DIR)")


def parser(description: str) -> argparse.ArgumentParser:
    p = Parser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    program = Setting("program", str, None, "registered program", choices=tuple(programs.names()))  # as registered now
    add_flags(p, (program, DATA_DIR, *SETTINGS, *evaluation_settings.SETTINGS))
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwound like Ctrl-C: the MLflow run ends KILLED, the checkpoint is closed, LM leases released."""


GRACE_SECONDS = 30


def on_sigterm(signum, frame):
    """Unwind like Ctrl-C. A library that catches ``BaseException`` around a request can swallow that (seen on
    real-LM runs that went on answering for minutes), so the first SIGTERM also starts a timer that ends the process
    after :data:`GRACE_SECONDS`, and a second SIGTERM ends it at once. Checkpoints are flushed per question and a
    dead process's LM lease dies with it, so a hard exit loses no finished work."""
    if on_sigterm.pending:
        os._exit(143)
    on_sigterm.pending = True
    timer = threading.Timer(GRACE_SECONDS, os._exit, (143,))
    timer.daemon = True  # a clean unwind exits at once
    timer.start()
    raise Terminated()


on_sigterm.pending = False


#: The exit code of a run that finished with questions left unanswered (retryable: transient errors).
INCOMPLETE = 6


def disk_full(err: BaseException | None) -> BaseException | None:
    """The error in ``err``'s chain (causes, contexts, a database driver's ``orig``) that says the disk is full:
    ENOSPC/EDQUOT, or SQLite's SQLITE_FULL ("database or disk is full": an sqlite MLflow store, which passes on only
    the driver error's text, or an sqlite cache); None when there is none."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return err
        if getattr(err, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "database or disk is full" in str(err):
            return err
        err = err.__cause__ or err.__context__ or getattr(err, "orig", None)
    return None


def interruptible(main):
    """Wrap an entry point: on Ctrl-C / SIGTERM print how to resume and exit 130 / 143 without a traceback; a run
    that cannot go on (:class:`RunStopped`: an endpoint that keeps failing, exit 3; an error on a question that
    asking again cannot fix, exit 4) is one line, and so are an embedded LM server gone for good
    (``runtime.lm.ServerError``, exit 5: the line names its log, whose tail says why), an endpoint that refuses the
    key (``runtime.lm.EndpointRefused``, exit 4), a full disk (:func:`disk_full`: the checkpoint's, an sqlite
    store's; exit 74, EX_IOERR; what was written stays) and a checkpoint another run is writing
    (``runtime.files.Busy``, exit 75: EX_TEMPFAIL, try again later). A run that finished with questions left
    unanswered (``tracking.incomplete_runs``: its MLflow run ended FAILED, tagged ``incomplete``) says so in one line
    and exits :data:`INCOMPLETE`."""
    def run(argv=None):
        try:
            with tracking.incomplete_runs() as left:
                result = main(argv)
        except (RunStopped, Busy, ServerError) as err:
            print(f"error: {str(err).splitlines()[0].removesuffix(':')}", file=sys.stderr)
            raise SystemExit(75 if isinstance(err, Busy) else err.code) from None
        except Exception as err:
            if not (full := disk_full(err)):
                raise
            where = f" writing {full.filename}" if getattr(full, "filename", None) else ""
            print(f"error: no space left on the device{where}: free some and run the same command again; finished "
                  "questions are in the checkpoint", file=sys.stderr)
            raise SystemExit(74) from None  # EX_IOERR
        except KeyboardInterrupt as err:
            print("\ninterrupted: finished questions are in the checkpoint; run the same command again to resume",
                  file=sys.stderr)
            raise SystemExit(143 if isinstance(err, Terminated) else 130) from None
        if left:
            print(f"incomplete: {'; '.join(left)}; the unanswered questions have no score: run the same command "
                  "again to ask them", file=sys.stderr)
            raise SystemExit(INCOMPLETE)
        return result
    return run


def given_flags(p: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The ``args`` names the command line ``argv`` sets, as opposed to those left at their defaults."""
    unset = object()  # (every destination preset, so a required flag needs no value to read the defaults)
    args = p.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys((a.dest for a in p._actions), unset)))
    return {key for key, value in vars(args).items() if value is not unset}


#: The runs of the two commands: what evaluate.py runs (a program, a compiled program, a suite, a suite on Ray) and
#: optimize.py's compile with each optimizer.
PROGRAM, COMPILED, SUITE, RAY = ("evaluate.py --program", "evaluate.py --compiled", "evaluate.py --suite",
                                 "evaluate.py --suite --ray")
COMPILE = {name: f"optimize.py --optimizer {name}" for name in OPTIMIZERS}
EVALUATE = (PROGRAM, COMPILED, SUITE, RAY)

#: The runs each flag applies to, for the flags that do not apply to every run of the command whose parser has them
#: (the rest do). A flag given for any other run is refused (:func:`check_applies`): it would change nothing, or
#: the run would log a setting it did not run with (``--no-retrieval`` on a compiled program rebuilds its retriever).
APPLIES: dict[str, tuple[str, ...]] = {
    "program": (PROGRAM, *COMPILE.values()),
    "compiled": (COMPILED,),
    "no_retrieval": (PROGRAM, SUITE, RAY, *COMPILE.values()),
    "error_profile": (PROGRAM, COMPILED),
    "datasets": (SUITE, RAY),
    "methods": (SUITE, RAY),
    "arms": (SUITE, RAY),
    "ray": (RAY,),
    "ray_cpus": (RAY,),
    "teacher": (COMPILE["bootstrap"],),
    "demos": (COMPILE["bootstrap"], COMPILE["random_search"], COMPILE["mipro"]),  # GEPA writes instructions only
    "candidates": (COMPILE["random_search"], COMPILE["mipro"]),
    "budget": (COMPILE["mipro"], COMPILE["gepa"]),
}


#: The flags that mean something only beside another (what it is said as, and whether ``args`` has it): given
#: without it, they would change nothing, so they are refused (:func:`check_needs`).
NEEDS: dict[str, tuple[str, Callable[[Settings], bool]]] = {
    "judge_lms": ("--judge", lambda a: a.judge),
    "judge_lm": ("--judge or --error-profile", lambda a: a.judge or getattr(a, "error_profile", False)),
    "mc_calibration": ("--mc-scoring pride", lambda a: a.mc_scoring == "pride"),
    "rerank_depth": ("--rerank", lambda a: a.rerank != "none"),
    "fuse_depth": ("--retriever hybrid", lambda a: a.retriever.startswith("hybrid")),
    "rrf_k": ("--retriever hybrid", lambda a: a.retriever.startswith("hybrid")),
    "search_depth": ("--search-rerank", lambda a: a.search_rerank not in (None, "none")),
    "max_docs": ("--corpus jsonl:DIR or wikipedia:LANGS", lambda a: str(a.corpus).startswith(("jsonl:", "wikipedia:"))),
}


def evaluate_run(args: Settings) -> str:
    """What evaluate.py's ``args`` run (:data:`EVALUATE`)."""
    return (RAY if args.ray else SUITE) if args.suite else COMPILED if args.compiled else PROGRAM


def check_applies(given: set[str], run: str) -> None:
    """Refuse in one line a flag of ``given`` (:func:`given_flags`) that :data:`APPLIES` says ``run`` does not take."""
    for name, runs in APPLIES.items():
        if name in given and run not in runs:
            fail(f"--{name.replace('_', '-')} does not apply to {run} (only to {said(runs)}): leave it out")


def check_needs(given: set[str], args: Settings) -> None:
    """Refuse in one line a flag of ``given`` that :data:`NEEDS` says means nothing without another ``args`` lacks."""
    for name, (other, holds) in NEEDS.items():
        if name in given and not holds(args):
            flag = f"--{name.replace('_', '-')}"
            fail(f"{flag} needs {other}: give {other.split(' or ')[0]} too, or leave {flag} out")


def said(runs: tuple[str, ...]) -> str:
    """``runs`` as a user names them: ``optimize.py`` for every optimizer's compile, ``evaluate.py --suite`` for a
    suite with or without ``--ray``."""
    every = set(COMPILE.values()) <= set(runs)
    return ", ".join([r for r in runs if not (r == RAY and SUITE in runs or every and r in COMPILE.values())]
                     + ["optimize.py"] * every)


def as_compiled(args: Settings, artifact: dict, given: set[str]) -> Settings:
    """``args`` as the compiled ``artifact`` was built with (its program, its config with the method's defaults where
    it holds none, its retrieval data and split -- the questions its compile asked; its dataset unless ``--dataset``
    names another), so a run builds, keys and logs the program as compiled. A setting the command line (``given``)
    sets otherwise is one line: leave the flag out, or recompile with it."""
    name = artifact["program"]
    settings = {**artifact["data"], **programs.accepted_config(name, dict.fromkeys(programs.spec(name).compiled)),
                **artifact["config"]}
    compiled_on = settings.pop("dataset", None)
    for key, value in settings.items():
        if key in given and getattr(args, key) != value:
            flag = f"--{key.replace('_', '-')}"
            fail(f"{flag} {getattr(args, key)} conflicts with {artifact['source']}, compiled with {key} {value}: "
                 f"leave {flag} out to run the compiled program, or recompile it with {flag} {getattr(args, key)}")
    if missing := [s.flag for s in data_settings.SPLIT if s.name not in artifact["data"]]:  # compiled before kept
        print(f"note: {artifact['source']} records no split; evaluating the one {'/'.join(missing)} give (the "
              "dataset's sizes where left out), which may not be its compile's", file=sys.stderr)
    return args.replace(**settings, program=name, dataset=args.dataset or compiled_on)


def evaluate_command(run_id: str, args: Settings) -> str:
    """The command that evaluates a program compiled by this run on its test questions: the artifact holds the rest,
    but its paths and servers are used only when the flags name them (``Setting.external``)."""
    named = [s.name for s in SETTINGS if s.points_outside(getattr(args, s.name))]
    return f"python evaluate.py --compiled {run_id} --split test {flags(args, named)}".rstrip()


def flags(args: Settings, keys) -> str:
    """``args``' values of ``keys`` as the command-line flags that set them (to print a command that reproduces a
    run); unset ones left out."""
    out = []
    for key in keys:
        value, flag = getattr(args, key, None), key.replace("_", "-")
        if isinstance(value, bool):
            out.append(f"--{flag}" if value else f"--no-{flag}")
        elif value is not None:
            out.append(f"--{flag} {shlex.quote(str(value))}")
    return " ".join(out)


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_args(args: Settings, names: list[str]) -> None:
    """Before anything starts: each program in ``names`` takes the settings the flags give it, with its method's own
    limits (e.g. coral needs ``--loops`` >= 1); else one line naming the flag. (Each flag's own type and range is
    checked as it is parsed: :func:`flag_type`; ``--oracle`` against the data: :func:`check_oracle`.)"""
    for name in names:
        program = programs.spec(name)
        for key in program.compiled:
            if problem := program.problem(key, getattr(args, key), name):
                fail(f"{program.settings[key].flag} {problem}")


def compile_metric(task: str, name: str | None, judge=None):
    """The compile metric ``--metric`` names (default: f1, accuracy for multiple choice); ``judge`` is the session's
    LLM judge, which ``--judge`` configures."""
    name = name or ("accuracy" if task == "mcq" else "f1")
    if name != "judge":
        return name, ANSWER_METRICS[name]
    if task == "mcq" or judge is None:
        fail("--metric judge needs --judge (and a short-answer dataset: multiple choice is scored by accuracy)")
    return name, judge

