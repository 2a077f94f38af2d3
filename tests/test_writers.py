"""One writer per checkpoint (issue 59, item 4): a second run on the same checkpoint is refused or waits, a killed
writer's lock dies with it, and files are rewritten whole through temporary files of their own, synced first."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import dspy
import pytest

from evaluation.loop import evaluate
from evaluation.metrics import exact_match
from optimizers import fitting
from runtime import files
from runtime.files import Busy, write_whole

EXAMPLES = [dspy.Example(id=f"q{i}", question=f"question {i}", answer="yes", answers=["yes"]).with_inputs("question")
            for i in range(3)]
ROOT = Path(__file__).resolve().parents[1]


class Held(dspy.Module):
    """Answers ``yes``; at ``question 1`` it says so (``asking``) and waits for ``go``."""

    def __init__(self):
        super().__init__()
        self.asking, self.go, self.calls = threading.Event(), threading.Event(), 0

    def forward(self, question):
        self.calls += 1
        if question == "question 1":
            self.asking.set()
            self.go.wait()  # the test sets it, however long the machine takes to get there
        return dspy.Prediction(answer="yes", passages=[])


def ids_on_disk(path: Path) -> list[str]:
    """The ids of the readable records in ``path``, in file order."""
    ids = []
    for line in path.read_bytes().splitlines():
        try:
            ids.append(json.loads(line)["id"])
        except ValueError:
            pass
    return ids


def start_writer(ckpt: Path) -> tuple[Held, threading.Thread]:
    """Writer A: has recorded q0 and is asking q1 when this returns."""
    program = Held()
    thread = threading.Thread(target=evaluate, args=(program, EXAMPLES, {"em": exact_match}),
                              kwargs={"checkpoint": ckpt})
    thread.start()
    while not program.asking.wait(0.05):
        assert thread.is_alive(), "the writer ended before asking q1"
    return program, thread


def test_a_second_run_on_a_checkpoint_is_refused_and_the_first_loses_nothing(tmp_path):
    """The repro: while A is mid-run, B resumes the same checkpoint, finds a line it cannot read (as A's line in
    flight looks to it) and rewrote the file by rename; A's later records went to the unlinked file: lost."""
    ckpt = tmp_path / "dev.jsonl"
    a, writer = start_writer(ckpt)
    with open(ckpt, "ab") as fh:
        fh.write(b'{"id": "q1", "quest\n')
    try:
        evaluate(Held(), EXAMPLES[:1], {"em": exact_match}, checkpoint=ckpt)
        refused = None
    except Busy as err:
        refused = str(err)
    finally:
        a.go.set()
        writer.join()
    assert ids_on_disk(ckpt) == ["q0", "q1", "q2"]  # before: ["q0"]
    assert refused == (f"{ckpt} is in use by another run (pid {os.getpid()}); let it finish, or pass "
                       "--wait-for-checkpoint to wait for it")


def test_a_second_run_told_to_wait_resumes_what_the_first_finished(tmp_path, capsys):
    ckpt = tmp_path / "dev.jsonl"
    a, writer = start_writer(ckpt)
    b, out = Held(), {}
    second = threading.Thread(target=lambda: out.update(
        records=evaluate(b, EXAMPLES, {"em": exact_match}, checkpoint=ckpt, wait=True)[0]))
    second.start()
    said = ""
    while "waiting" not in said:
        assert second.is_alive(), said
        time.sleep(0.05)
        said += capsys.readouterr().err
    assert f"waiting for another run (pid {os.getpid()}) to finish with {ckpt}" in said
    assert second.is_alive() and b.calls == 0  # waiting, not asking
    a.go.set()
    writer.join()
    second.join()
    assert b.calls == 0 and [r["id"] for r in out["records"]] == ["q0", "q1", "q2"]
    assert ids_on_disk(ckpt) == ["q0", "q1", "q2"]


WRITER = """
import sys, time, dspy
from pathlib import Path
from evaluation.loop import evaluate

ckpt = Path(sys.argv[1])

class MidLine(dspy.Module):
    def forward(self, question):
        if question == "question 1":  # killed while its record is half written
            with open(ckpt, "ab") as fh:
                fh.write(b'{"id": "q1", "question": "quest')
            print("mid-line", flush=True)
            time.sleep(3600)  # until the test kills it
        return dspy.Prediction(answer="yes", passages=[])

examples = [dspy.Example(id=f"q{i}", question=f"question {i}", answer="yes").with_inputs("question") for i in range(3)]
evaluate(MidLine(), examples, {}, checkpoint=ckpt)
"""


def test_a_writer_in_another_process_holds_the_checkpoint_until_it_is_killed_mid_line(tmp_path):
    ckpt = tmp_path / "dev.jsonl"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(ckpt)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert writer.stdout.readline().strip() == "mid-line"
        with pytest.raises(Busy, match=f"in use by another run \\(pid {writer.pid}\\)"):
            evaluate(Held(), EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    program = Held()
    program.go.set()
    with pytest.warns(RuntimeWarning, match="skipped 1 unreadable line"):
        records, _ = evaluate(program, EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    assert program.calls == 2 and ids_on_disk(ckpt) == ["q0", "q1", "q2"]  # the lock died with its holder
    assert ckpt.read_bytes().endswith(b"\n") and not list(tmp_path.glob("*.tmp"))


def test_a_file_is_synced_before_it_is_renamed_over_the_old_one_and_its_folder_after(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append("replace") or real_replace(a, b))
    write_whole(tmp_path / "x.json", "{}")
    assert calls == ["fsync", "replace", "fsync"] and (tmp_path / "x.json").read_text() == "{}"


def test_concurrent_whole_writes_each_use_a_temporary_file_of_their_own(tmp_path):
    """A fixed ``<name>.tmp`` was shared: one writer renamed another's half-written text, the other's rename failed."""
    target, errors = tmp_path / "x.json", []

    def write(n):
        try:
            for _ in range(30):
                write_whole(target, json.dumps({"writer": n, "text": "x" * 200_000}))
        except OSError as err:
            errors.append(err)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and json.loads(target.read_text())["writer"] in range(4)
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_compile_ledgers_of_concurrent_interrupted_runs_add_up(tmp_path):
    """Each interrupted run adds its seconds and tokens to the ledger under its lock: none is lost or half read."""
    ledger, cost = tmp_path / "compile.json", SimpleNamespace(lm_calls=1, prompt_tokens=10, completion_tokens=1)
    errors = []

    def run():
        try:
            for _ in range(25):
                fitting.carried(ledger, 1.0, cost, finished=False)
        except ValueError as err:
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and json.loads(ledger.read_text()) == {"seconds": 100.0, "lm_calls": 1, "prompt_tokens": 1000,
                                                              "completion_tokens": 100, "finished": False}


def test_a_lock_names_its_holder_and_is_free_again_after_the_block(tmp_path):
    path = tmp_path / "f.jsonl"
    with files.locked(path):
        assert (tmp_path / "f.jsonl.lock").read_text() == str(os.getpid())
        with pytest.raises(Busy, match="let it finish first"):
            with files.locked(path):
                pass
    with files.locked(path):
        pass


def test_a_checkpoint_in_use_stops_an_entry_point_with_one_line_and_exit_75(capsys):
    from experiments.cli import interruptible, parser

    @interruptible
    def main(argv=None):
        raise Busy("dev.jsonl is in use by another run (pid 7); let it finish")

    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 75 and capsys.readouterr().err == ("error: dev.jsonl is in use by another run (pid 7); "
                                                                 "let it finish\n")
    assert parser("x").parse_args(["--wait-for-checkpoint"]).wait_for_checkpoint


def test_an_lm_server_gone_for_good_stops_an_entry_point_with_one_line_and_exit_5(capsys):
    from experiments.cli import interruptible
    from runtime.lm import ServerError

    @interruptible
    def main(argv=None):
        raise ServerError("llama.cpp server for qwen is down again after 3 restarts in 600s; log /s/server.log:\n"
                          "line 1 of its tail\nline 2")

    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 5
    assert capsys.readouterr().err == ("error: llama.cpp server for qwen is down again after 3 restarts in 600s; "
                                       "log /s/server.log\n")
