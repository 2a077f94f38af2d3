"""Keeps one shared LM server alive while any process holds a lease on it.

``python -m runtime.server_host LEASE_DIR -- CMD...`` runs ``CMD`` (the llama.cpp server) as its child and stops
it, then exits, as soon as no lease file in ``LEASE_DIR`` names a live process. A lease is ``<pid>-<token>.lease``
(written by ``runtime.lm.LlamaServer``). The host runs in its own session, so a Ctrl-C aimed at one user of the
server does not stop it for the others, and a user killed without cleanup (SIGKILL) releases its lease by dying.
If the child exits, the host exits with the child's code; the child gets SIGTERM if the host dies.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_SECONDS = 0.5


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_leases(lease_dir: Path) -> list[Path]:
    """Lease files whose process still runs; stale ones (their process died) are removed."""
    live = []
    for lease in lease_dir.glob("*.lease"):
        try:
            pid = int(lease.name.split("-", 1)[0])
        except ValueError:
            continue
        if pid_alive(pid):
            live.append(lease)
        else:
            lease.unlink(missing_ok=True)
    return live


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m runtime.server_host LEASE_DIR -- CMD...", file=sys.stderr)
        return 2
    lease_dir, cmd = Path(argv[0]), argv[2:]
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def stop(signum, _frame):
        _stop(child)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        code = child.poll()
        if code is not None:
            return code
        if not live_leases(lease_dir):
            _stop(child)
            return 0
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
