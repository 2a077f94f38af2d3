"""Keeps one shared LM server alive while any process holds a lease on it.

``python -m runtime.server_host LEASE_DIR -- CMD...`` runs ``CMD`` (the llama.cpp server) as its child and stops
it, then exits, as soon as no lease file in ``LEASE_DIR`` names a live process. A lease is ``<pid>-<token>.lease``
holding the process's start time (written by ``runtime.lm.LlamaServer``), so a pid reused by another process after
its owner died does not keep the lease alive. The host runs in its own session, so a Ctrl-C aimed at one user of the
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
    """Whether ``pid`` runs and this user may signal it (a pid of another user's process is not one of ours)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot on Linux, else ``ps``'s start date), or None if it does not run:
    with the pid it names one process, whereas a pid alone is reused once its process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]  # field 22, counted after the parenthesised command name
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
    except (OSError, ValueError, IndexError):
        return None
    try:  # no /proc (macOS, BSD)
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True).stdout
    except OSError:
        return None
    return out.strip() or None


def is_process(pid: int, started: str | None) -> bool:
    """Whether ``pid`` runs, may be signalled by us, and is the process that started at ``started``."""
    return started is not None and pid_alive(pid) and start_time(pid) == started


def live_leases(lease_dir: Path) -> list[Path]:
    """Lease files whose process still runs; stale ones (their process died, or its pid now names another
    process) are removed."""
    live = []
    for lease in lease_dir.glob("*.lease"):
        try:
            pid = int(lease.name.split("-", 1)[0])
            started = lease.read_text().strip() or None
        except (ValueError, OSError):
            continue
        if pid_alive(pid) if started is None else is_process(pid, started):
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
