"""Language models: the embedded llama.cpp server, any OpenAI-compatible URL, or any DSPy/LiteLLM model string.

``make_lm("local:qwen-0.5b")`` starts (once per process) ``llama_cpp.server`` on 127.0.0.1 on a free port, waits
for ``/v1/models``, stops it at exit, and restarts it once if it dies mid-run. Anything else is handed to
``dspy.LM`` (``openai/gpt-4o-mini``, ``ollama_chat/llama3``, ``openai/<name>`` + ``api_base`` for vLLM, ...).
"""
from __future__ import annotations

import atexit
import contextvars
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dspy

from runtime import models
from runtime.paths import project_cache

LOCAL_PREFIX = "local:"
#: >0 while an evaluation retries an example: LM calls then bypass the cache and sample (temperature 0.7).
ATTEMPT: contextvars.ContextVar[int] = contextvars.ContextVar("lm_attempt", default=0)


class ServerError(RuntimeError):
    pass


def _die_with_parent() -> None:
    """Child-side hook: on Linux the server gets SIGTERM when its parent dies, even if atexit never runs."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One ``llama_cpp.server`` subprocess bound to 127.0.0.1."""

    def __init__(self, model: str, n_ctx: int = 8192, n_threads: int | None = None, startup_timeout: float = 300):
        self.model, self.spec = model, models.spec(model)
        self.n_ctx, self.n_threads = n_ctx, n_threads or os.cpu_count() or 1
        self.startup_timeout = startup_timeout
        self.port = _free_port()
        self.log_path = project_cache() / "logs" / f"llama-{model}.log"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def __deepcopy__(self, memo):
        return self  # a process handle: LM copies share the one server

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        path = models.verify(self.model) if models.model_path(self.model).exists() else models.fetch(self.model)
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", self.spec.alias,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads)]

    def start(self) -> "LlamaServer":
        cmd = self.command()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerError(f"llama.cpp server for {self.model} exited with code {self.proc.returncode}; "
                                  f"log {self.log_path}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.api_base}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise ServerError(f"llama.cpp server for {self.model} not ready after {self.startup_timeout:.0f}s; "
                          f"log {self.log_path}:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        """Restart a dead server on the same port, once per process; a second death is a hard error."""
        if self.restarts >= 1:
            raise ServerError(f"llama.cpp server for {self.model} died again after one restart; "
                              f"log {self.log_path}:\n{self.log_tail()}")
        self.restarts += 1
        print(f"warning: llama.cpp server for {self.model} died; restarting once", file=sys.stderr)
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


_SERVERS: dict[str, LlamaServer] = {}


def local_server(model: str) -> LlamaServer:
    """The process-wide server for ``model``, started on first use and stopped at interpreter exit."""
    if model not in _SERVERS:
        _SERVERS[model] = LlamaServer(model).start()
    return _SERVERS[model]


@atexit.register
def _stop_servers() -> None:
    for server in _SERVERS.values():
        server.stop()


class ProjectLM(dspy.LM):
    """``dspy.LM`` that samples past the cache on evaluation retries and revives a dead embedded server once."""

    server: LlamaServer | None = None

    def __call__(self, prompt=None, *, messages=None, **kwargs):
        if attempt := ATTEMPT.get():
            kwargs.setdefault("rollout_id", attempt)
            kwargs.setdefault("temperature", 0.7)
        try:
            return super().__call__(prompt, messages=messages, **kwargs)
        except Exception:
            if self.server is None or self.server.alive():
                raise
            self.server.restart()
            return super().__call__(prompt, messages=messages, **kwargs)


def _token_cap(max_tokens: int) -> dict:
    """LiteLLM sends OpenAI's ``max_completion_tokens``, which llama.cpp's server (and other OpenAI-compatible
    servers) ignore, so a looping model generated up to the context size; repeat the cap as ``max_tokens``."""
    return {"max_tokens": max_tokens}


def make_lm(name: str, api_base: str | None = None, temperature: float = 0.0, max_tokens: int = 512,
            cache: bool = True) -> ProjectLM:
    """Build an LM from ``local:<model>`` or a DSPy/LiteLLM model string (with optional OpenAI-compatible base)."""
    if name.startswith(LOCAL_PREFIX):
        key = name[len(LOCAL_PREFIX):]
        if key not in models.MODELS:
            raise ValueError(f"unknown local model '{name}'; choose one of: "
                             + ", ".join(LOCAL_PREFIX + k for k in models.MODELS))
        server = local_server(key)
        lm = ProjectLM(f"openai/{server.spec.alias}", api_base=server.api_base, api_key="local",
                       temperature=temperature, max_tokens=max_tokens, cache=cache, num_retries=1,
                       extra_body=_token_cap(max_tokens))
        lm.server = server
        return lm
    if "/" not in name:
        raise ValueError(f"unknown LM '{name}'; use local:qwen-0.5b, local:qwen-1.5b, or a DSPy/LiteLLM model "
                         "string such as openai/gpt-4o-mini (add --api-base URL for an OpenAI-compatible server)")
    extra = {"api_base": api_base, "api_key": os.environ.get("OPENAI_API_KEY", "local"),
             "extra_body": _token_cap(max_tokens)} if api_base else {}
    return ProjectLM(name, temperature=temperature, max_tokens=max_tokens, cache=cache, **extra)
