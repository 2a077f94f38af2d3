"""The embedded-server machinery (``runtime.lm.LlamaServer``: host, leases, restarts) around ``fault_server.py``
instead of llama.cpp, so faults hit the code path of a real run; used by ``test_faults.py`` and
``scripts/chaos_run.py``."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from evaluation.loop import TIMINGS
from runtime.lm import LlamaServer, RestartBudget

FAULT_SERVER = Path(__file__).with_name("fault_server.py")


class FaultHost(LlamaServer):
    """A shared 'llama.cpp server' that is ``fault_server.py`` with ``flags``, logging its requests to ``log``."""

    def __init__(self, log: Path, *flags, restarts: int = 3, max_seconds: float = 3600):
        """``max_seconds``: a backstop only (the host stops the server once its last user is gone), far past any
        run on a busy machine: a server that quit on a clock would be a death the run did not plan."""
        super().__init__("qwen-0.5b", budget=RestartBudget(restarts, 600, backoff=0.05))
        self.request_log, self.flags, self.max_seconds = log, [str(f) for f in flags], max_seconds

    def command(self):
        return [sys.executable, str(FAULT_SERVER), "--port", str(self.port), "--alias", self.spec.alias,
                "--log", str(self.request_log),
                "--max-seconds", str(self.max_seconds), *self.flags]

    def requests(self) -> list[dict]:
        return [json.loads(line) for line in self.request_log.read_text().splitlines()]


#: Record fields that depend on how the answer was reached (calls, timing, retries), not on the answer.
VOLATILE = {"lm_calls", "lm_calls_by", "judge_lm_calls", "oracle_calls", "searches", "prompt_tokens",
            "prompt_tokens_computed", "completion_tokens", *TIMINGS, "tries", "error"}


def comparable(record: dict) -> dict:
    """``record`` without :data:`VOLATILE` fields: what two runs of the same question must agree on."""
    return {k: v for k, v in record.items() if k not in VOLATILE}
