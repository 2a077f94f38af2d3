"""The embedded llama.cpp server is shared: a second process attaches to the running one and completes on it."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.lm import LlamaServer, _running

pytestmark = pytest.mark.real_lm

ROOT = Path(__file__).resolve().parent.parent


def test_a_second_process_uses_the_running_server():
    ours = LlamaServer("qwen-0.5b").start()
    try:
        code = ("from runtime.lm import make_lm; lm = make_lm('local:qwen-0.5b', max_tokens=8, cache=False); "
                "print(lm.server.pid, lm.server.proc is None); print(lm('Say hello.')[0])")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env=os.environ.copy())
        assert out.returncode == 0, out.stderr
        pid, attached = out.stdout.splitlines()[0].split()
        assert int(pid) == ours.pid and attached == "True"  # no second server was started
        assert out.stdout.splitlines()[1].strip()
        assert ours.alive()  # the other user's exit left the server to us
    finally:
        ours.stop()
    assert not _running(ours.pid)
