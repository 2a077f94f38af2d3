"""Language models: the embedded llama.cpp server, any OpenAI-compatible URL, or any DSPy/LiteLLM model string.

``make_lm("local:qwen-0.5b")`` uses one ``llama_cpp.server`` per machine and model on 127.0.0.1 (started as
``runtime.llama_serve``: its token logprobs selected, not sorted, over the vocabulary): the first
process starts it (under ``runtime.server_host``), later ones find it through a port file and attach, every user
holds a lease file, and the server stops when the last lease is gone (a killed user's lease dies with it). The
port file names the host by pid and start time, so a pid since reused by another process is never attached to
nor signalled. All of
this lives in ``$RAG_SERVER_DIR`` (default ``$RAG_CACHE_DIR/servers``), guarded by a file lock. A server that dies
mid-run is restarted with exponential backoff, at most ``RAG_SERVER_RESTARTS`` (default 3) times per
``RAG_SERVER_RESTART_WINDOW`` seconds (default 600); past that the run stops with the server's log tail.
``RAG_SHARED_SERVER=0`` gives the process a private server instead. Anything else is handed to ``dspy.LM``
(``openai/gpt-4o-mini``, ``ollama_chat/llama3``, ``openai/<name>`` + ``api_base`` for vLLM, ...).
"""
from __future__ import annotations

import atexit
import contextvars
import fcntl
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from contextlib import contextmanager
from pathlib import Path

import dspy
import mlflow
from dspy.utils.exceptions import (AdapterParseError, ContextWindowExceededError, LMAuthError, LMBillingError,
                                   LMRateLimitError, LMServerError, LMTimeoutError, LMTransportError)
from mlflow.entities import SpanType
from mlflow.tracing.constant import SpanAttributeKey, TokenUsageKey
from pydantic import ValidationError

from runtime import models, spent
from runtime.paths import server_dir
from runtime.server_host import is_process, live_leases, pid_alive, start_time

LOCAL_PREFIX = "local:"
#: Ports tried in a row for a new server before giving up, when each is found answering for another process.
PORT_ATTEMPTS = 3
#: After a failed call, a server that looks up is checked again this much later (its host notices a death within
#: ``server_host.POLL_SECONDS``).
RECHECK_SECONDS = 0.6
#: >0 while an evaluation retries an example, or a judge its verdict, after an unreadable reply: LM calls then bypass
#: the cache and sample (temperature 0.7). Transient errors are retried greedily (it stays as it was).
ATTEMPT: contextvars.ContextVar[int] = contextvars.ContextVar("lm_attempt", default=0)
#: Whom an LM call answers, ``{"predictor": <its name in the program>, "role": <writer|planner|critic|judge>}``, set
#: by a tracer around each predictor's call (``evaluation.tracking``): the call's trace span carries it.
CALLER: contextvars.ContextVar[dict | None] = contextvars.ContextVar("lm_caller", default=None)
#: The request got no model answer (DSPy wraps LiteLLM's and OpenAI's exceptions into these): connection, timeout,
#: billing, rate limit or a server-side error. Asking again later can succeed. (A refused key is no such error:
#: :class:`EndpointRefused`.)
ENDPOINT_ERRORS = (LMTransportError, LMTimeoutError, LMBillingError, LMRateLimitError, LMServerError)
#: Transient infrastructure errors: an LM endpoint error, or a connection refused, reset or timed out elsewhere (a
#: retriever's service, a vector store: ``retrieval.milvus.StoreUnavailable`` is a ``ConnectionError``). The question
#: got no answer; asking it again later can succeed.
TRANSIENT_ERRORS = (*ENDPOINT_ERRORS, ConnectionError, TimeoutError)
#: The model answered, but its reply could not be read into the signature's fields (DSPy's adapters raise
#: ``AdapterParseError``; a pydantic output type, ``ValidationError``): a sampled retry may read.
UNREADABLE_ERRORS = (AdapterParseError, ValidationError)


def describe(err: BaseException) -> str:
    """``Class: message`` on one line, at most 300 characters of message (what records and one-line errors show)."""
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


class ServerError(RuntimeError):
    """The LM server cannot serve this run: it stops with this one line (exit :attr:`code`), asking nothing more."""

    code = 5


class EndpointRefused(ServerError):
    """The endpoint refused the request's key or its permission (HTTP 401/403): the run's configuration, which asking
    again cannot change."""

    code = 4


def refused(err: LMAuthError, lm: dspy.LM) -> EndpointRefused:
    """``err`` as the one line that names the endpoint and the fix."""
    if api_base := lm.kwargs.get("api_base"):
        where, fix = api_base, "set RAG_API_KEY to the key it expects, or check --api-base"
    else:
        where, fix = lm.model.split("/")[0], "set its key's variable (LiteLLM's, e.g. OPENAI_API_KEY), or check --lm"
    return EndpointRefused(f"{where} refused the request for {lm.model} ({describe(err)}): {fix}; nothing was "
                           "recorded for the question it asked")


class ContextOverflow(ValueError):
    """The prompt, with the answer's token budget, does not fit the model's context window: asking again cannot help,
    so an evaluation stops."""


def context_overflow(err: Exception, model: str) -> ContextOverflow:
    """``err`` (DSPy's ``ContextWindowExceededError``) as one line naming the token budget and the fix."""
    text = " ".join(str(err).split())
    found = re.search(r"maximum context length is (\d+) tokens.*?requested (\d+) tokens"
                      r"(?: \((\d+) in the messages, (\d+) in the completion\))?", text)
    if found:
        window, asked, prompt, answer = found.groups()
        budget = f"{asked} tokens" + (f" ({prompt} prompt + {answer} answer)" if prompt else "") + f" > {window}"
    else:
        budget = text[:200]
    return ContextOverflow(f"the prompt does not fit {model}'s context window: {budget}; lower --k, --max-chars or "
                           "--loops, or serve the model with a longer context")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_number(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    try:
        return float(value) if value else default
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number; unset it or give e.g. {name}={default:g}") from None


class RestartBudget:
    """At most ``limit`` restarts in any ``window`` seconds; the n-th restart in a window waits ``backoff * 2**(n-1)``
    seconds (capped at 30) first."""

    def __init__(self, limit: int, window: float, backoff: float = 1.0):
        self.limit, self.window, self.backoff = limit, window, backoff
        self.times: deque[float] = deque()

    @classmethod
    def from_env(cls) -> "RestartBudget":
        return cls(int(env_number("RAG_SERVER_RESTARTS", 3)), env_number("RAG_SERVER_RESTART_WINDOW", 600),
                   env_number("RAG_SERVER_RESTART_BACKOFF", 1.0))

    def spend(self) -> float | None:
        """The delay before the next restart, or None when the budget of this window is spent."""
        now = time.monotonic()
        while self.times and now - self.times[0] > self.window:
            self.times.popleft()
        if len(self.times) >= self.limit:
            return None
        self.times.append(now)
        return min(30.0, self.backoff * 2 ** (len(self.times) - 1))


def _reachable(port: int | None) -> bool:
    if port is None:
        return False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _serves(port: int, alias: str) -> bool | None:
    """Who answers ``GET /v1/models`` on 127.0.0.1:``port``: True when the reply lists model ``alias``, False when
    something else answers (any other reply), None when nothing answers yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as resp:
            listed = json.loads(resp.read()).get("data")
        return any(isinstance(m, dict) and m.get("id") == alias for m in listed)
    except urllib.error.HTTPError as err:  # an HTTP error status: a reply, but not our server's -- unless it says it
        return None if err.code == 503 else False  # is still loading its model (llama.cpp's llama-server does)
    except OSError:  # refused, reset, timed out: nothing serves there (yet)
        return None
    except (ValueError, AttributeError, TypeError, http.client.HTTPException):  # not JSON, not a model list, not HTTP
        return False


def _running(pid: int | None) -> bool:
    """Whether ``pid`` runs; reaps it first if it is a dead child of this process (a zombie still 'exists')."""
    if pid is None:
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return pid_alive(pid)


def _ours(pid: int | None, started: str | None) -> bool:
    """Whether ``pid`` runs and is the process that started at ``started`` (None: unknown, so not provably ours)."""
    return _running(pid) and is_process(pid, started)


class LlamaServer:
    """The machine's ``llama_cpp.server`` for one model, shared through ``home`` (lock, ``server.json`` with the
    host's pid, its start time and the port, ``leases/``, ``server.log``); bound to 127.0.0.1."""

    def __init__(self, model: str, n_ctx: int = 8192, n_threads: int | None = None, startup_timeout: float = 300,
                 shared: bool | None = None, budget: RestartBudget | None = None):
        self.model, self.spec = model, models.spec(model)
        self.n_ctx, self.n_threads = n_ctx, n_threads or os.cpu_count() or 1
        self.startup_timeout = startup_timeout
        self.shared = os.environ.get("RAG_SHARED_SERVER", "1") != "0" if shared is None else shared
        self.home = server_dir() / (f"{model}-ctx{n_ctx}" if self.shared else f"{model}-private-{uuid.uuid4().hex[:8]}")
        self.log_path = self.home / "server.log"
        self.budget = budget or RestartBudget.from_env()
        self.port: int | None = None
        self.pid: int | None = None  # the server host's pid (started by this process or another one)
        self.pid_start: str | None = None  # and its start time (``server_host.start_time``): its identity
        self.proc: subprocess.Popen | None = None  # the host, when this process started it
        self.lease: Path | None = None
        self.generation = 0  # bumped by every restart, so concurrent callers restart once
        self.restarts = 0
        self._guard = threading.Lock()

    def __deepcopy__(self, memo):
        return self  # a process handle: LM copies share the one server

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        path = models.verify(self.model) if models.model_path(self.model).exists() else models.fetch(self.model)
        return [sys.executable, "-m", "runtime.llama_serve", "--model", str(path), "--model_alias", self.spec.alias,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads), *prompt_cache()]

    @contextmanager
    def _locked(self):
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _record(self) -> dict | None:
        try:
            rec = json.loads((self.home / "server.json").read_text())
            return rec if isinstance(rec, dict) and {"pid", "port"} <= rec.keys() else None
        except (OSError, ValueError):
            return None

    def start(self) -> "LlamaServer":
        """Attach to the running server for this model, or start it; either way take a lease on it."""
        with self._locked():
            if self.lease is None:
                self.lease = self.home / "leases" / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.lease"
                self.lease.parent.mkdir(exist_ok=True)
                self.lease.write_text(start_time(os.getpid()) or "")
            try:
                self._attach_or_launch()
            except BaseException:
                self.lease.unlink(missing_ok=True)
                self.lease = None
                raise
        return self

    def _attach_or_launch(self) -> None:
        rec = self._record()
        # a record without a start time, or whose pid now names another process, is stale: never attach or signal
        ours = bool(rec) and _ours(rec["pid"], rec.get("pid_start"))
        if ours and rec["pid"] != self.pid and _reachable(rec["port"]):
            self.port, self.pid, self.pid_start = rec["port"], rec["pid"], rec["pid_start"]
            return
        if ours:  # a host that no longer answers: replace it
            self._terminate(rec["pid"], rec["pid_start"])
        for _ in range(50):  # a dying server may hold the port for a moment
            if not _reachable(self.port):
                break
            time.sleep(0.1)
        else:
            self.port = None
        taken = []
        while not self._launch():  # another process answers on the port: ours must not be taken for it
            taken.append(self.port)
            self._terminate(self.pid, self.pid_start)
            if len(taken) == PORT_ATTEMPTS:
                raise ServerError(f"llama.cpp server for {self.model}: ports {', '.join(map(str, taken))} on "
                                  "127.0.0.1 were each taken by another process before ours could serve on them; "
                                  "stop whatever keeps taking free ports and run again")
            print(f"warning: port {self.port} answers for another process; starting the llama.cpp server for "
                  f"{self.model} on another port", file=sys.stderr)
            self.port = None
        tmp = self.home / f"server.json.{os.getpid()}"
        tmp.write_text(json.dumps({"pid": self.pid, "pid_start": self.pid_start, "port": self.port,
                                   "model": self.model, "started": time.time()}))
        tmp.replace(self.home / "server.json")

    def _launch(self) -> bool:
        """Start the host and its server on ``self.port`` (a free one if None); True once it is ready (see
        :meth:`_wait_ready`), False if another process answers on the port."""
        self.port = self.port or _free_port()
        host = [sys.executable, str(Path(__file__).with_name("server_host.py")), str(self.home / "leases"), "--"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(host + self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=server_env())
        self.pid, self.pid_start = self.proc.pid, start_time(self.proc.pid)
        return self._wait_ready()

    def _wait_ready(self) -> bool:
        """Wait until the server is ours and ready: our host runs and the port lists our model alias (the one
        :meth:`command` serves). False when another process has the port: it answers without our alias (llama.cpp
        binds only once the model is loaded, so until then any answer is someone else's), or our server exited
        while something listens there. A server that exits otherwise, or is not ready in time, is a ServerError."""
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.alive():
                if _reachable(self.port):
                    return False
                raise ServerError(f"llama.cpp server for {self.model} exited with code {self.proc.returncode}; "
                                  f"log {self.log_path}:\n{self.log_tail()}")
            served = _serves(self.port, self.spec.alias)
            if served is None:
                time.sleep(0.5)
            elif not served or self.alive():  # (served, but our host just died: the next look says why)
                return served
        self._terminate(self.pid, self.pid_start)
        raise ServerError(f"llama.cpp server for {self.model} not ready after {self.startup_timeout:.0f}s; "
                          f"log {self.log_path}:\n{self.log_tail()}")

    def alive(self) -> bool:
        if self.proc is not None and self.proc.pid == self.pid:
            return self.proc.poll() is None  # reaps our own dead host
        return _ours(self.pid, self.pid_start)

    def recover(self, generation: int) -> bool:
        """After a failed call made at ``generation``: False if the server is up (the error is the caller's to
        handle), else True once it is back (restarted here, by another thread, or by another process)."""
        with self._guard:
            if self.generation != generation:
                return True
            if self.alive() and _reachable(self.port):
                time.sleep(RECHECK_SECONDS)  # a server that is exiting may still accept connections for a moment
                if self.alive() and _reachable(self.port):
                    return False
            self.restart()
            return True

    def restart(self) -> None:
        """Bring a dead server back (on the same port) within the restart budget, else stop with its log tail."""
        delay = self.budget.spend()
        if delay is None:
            raise ServerError(f"llama.cpp server for {self.model} is down again after {self.budget.limit} restarts "
                              f"within {self.budget.window:.0f}s (RAG_SERVER_RESTARTS, RAG_SERVER_RESTART_WINDOW); "
                              f"log {self.log_path}:\n{self.log_tail()}")
        self.restarts += 1
        print(f"warning: llama.cpp server for {self.model} is down; restart {len(self.budget.times)} of "
              f"{self.budget.limit} in {self.budget.window:.0f}s, after {delay:g}s", file=sys.stderr)
        time.sleep(delay)
        with self._locked():
            self._attach_or_launch()
        self.generation += 1

    def _terminate(self, pid: int | None, started: str | None) -> None:
        """Stop the host ``pid`` that started at ``started``; a pid now naming another process is left alone."""
        if self.proc is not None and self.proc.pid == pid:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            return
        if not _ours(pid, started):
            return
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not _ours(pid, started):
                return
            time.sleep(0.1)

    def stop(self) -> None:
        """Give up this process's lease; the last user stops the server."""
        if self.lease is None:
            return
        with self._locked():
            self.lease.unlink(missing_ok=True)
            self.lease = None
            if live_leases(self.home / "leases"):
                return  # other processes still use it
            rec = self._record()
            self._terminate(self.pid, self.pid_start)
            if rec and rec["pid"] == self.pid and rec.get("pid_start") == self.pid_start:
                (self.home / "server.json").unlink(missing_ok=True)
        if not self.shared:
            shutil.rmtree(self.home, ignore_errors=True)  # a private server's folder has no later user

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


_SERVERS: dict[str, LlamaServer] = {}


def local_server(model: str) -> LlamaServer:
    """The process's handle on the machine's server for ``model``, taken on first use, released at exit."""
    if model not in _SERVERS:
        _SERVERS[model] = LlamaServer(model).start()
    return _SERVERS[model]


@atexit.register
def _stop_servers() -> None:
    for server in _SERVERS.values():
        server.stop()


class ProjectLM(dspy.LM):
    """``dspy.LM`` that samples past the cache on evaluation retries and brings a dead embedded server back."""

    server: LlamaServer | None = None

    def __call__(self, prompt=None, *, messages=None, **kwargs):
        if attempt := ATTEMPT.get():
            kwargs.setdefault("rollout_id", attempt)
            kwargs.setdefault("temperature", 0.7)
        if "max_tokens" in kwargs and "extra_body" in self.kwargs:  # a per-call cap (a predictor's config)
            kwargs["extra_body"] = {**self.kwargs["extra_body"], **kwargs.get("extra_body", {}),
                                    **_token_cap(kwargs["max_tokens"])}
        while True:
            generation = self.server.generation if self.server else 0
            if self.server:
                self.kwargs["api_base"] = self.server.api_base  # a restart elsewhere may have moved the port
            try:
                return super().__call__(prompt, messages=messages, **kwargs)
            except ContextWindowExceededError as err:  # asking again cannot help
                raise context_overflow(err, self.model) from None
            except LMAuthError as err:  # nor with a key the endpoint refuses
                raise refused(err, self) from None
            except Exception:
                if self.server is None or not self.server.recover(generation):
                    raise

    def update_history(self, entry):
        """Record the call (DSPy's history), inside a trace mark its span (:func:`mark_span`), and add the time its
        server reports to the process's (``runtime.spent``)."""
        super().update_history(entry)
        mark_span(entry)
        spent.add_lm(entry.get("usage"))


#: MLflow's span types of an LM call (DSPy's autologging picks one by the LM's ``model_type``).
LM_SPANS = (SpanType.CHAT_MODEL, SpanType.LLM)


def mark_span(entry: dict) -> None:
    """Put on the LM call's active trace span (DSPy's autologging opens it around the call; none outside a trace)
    whom it answered (:data:`CALLER`), its tokens as the reply reports them (a cached reply: its first call's) as
    ``prompt_tokens`` / ``completion_tokens`` and as MLflow's token usage (which the UI sums per trace), and its
    ``seconds`` so far (the reply read, not yet parsed)."""
    span = mlflow.get_current_active_span()
    if span is None or span.span_type not in LM_SPANS:
        return
    usage = entry.get("usage") or {}
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    span.set_attributes({**(CALLER.get() or {}), "prompt_tokens": prompt, "completion_tokens": completion,
                         "seconds": round((time.time_ns() - span.start_time_ns) / 1e9, 4),
                         SpanAttributeKey.CHAT_USAGE: {TokenUsageKey.INPUT_TOKENS: prompt,
                                                       TokenUsageKey.OUTPUT_TOKENS: completion,
                                                       TokenUsageKey.TOTAL_TOKENS: prompt + completion}})


def server_env() -> dict[str, str]:
    """This process's environment without the variables llama_cpp.server would read as its own settings: it reads
    every setting name (cache, port, model, n_ctx, ...) from the environment, case-insensitively, so a ``CACHE``
    or ``PORT`` meant for something else changed or crashed the server. The command line sets what we need."""
    try:
        from llama_cpp.server.settings import ModelSettings, ServerSettings
    except ImportError:  # no llama.cpp here: nothing would read them
        return dict(os.environ)
    names = {n.lower() for n in (*ModelSettings.model_fields, *ServerSettings.model_fields)}
    return {k: v for k, v in os.environ.items() if k.lower() not in names}


def engine() -> str:
    """The embedded server's engine as it was built: llama-cpp-python's version and the instruction sets its
    llama.cpp uses (``llama_print_system_info``), e.g. ``llama-cpp-python-0.3.36[AVX,AVX2,...,AVX512,...]``. Other
    kernels can decide a near-tie otherwise (docs/results/infrastructure.md), so checkpoints are keyed by it."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    sets = [name.split(":")[-1].strip() for name, _, on in (part.partition("=") for part in info.split("|"))
            if on.strip() == "1"]
    return f"llama-cpp-python-{llama_cpp.__version__}[{','.join(sets)}]"


def prompt_cache_mb() -> int:
    """Megabytes of the embedded server's prompt cache (``RAG_PROMPT_CACHE_MB``, default 1024; 0: off)."""
    return max(0, int(env_number("RAG_PROMPT_CACHE_MB", 1024)))


def prompt_cache() -> list[str]:
    """The server's prompt cache flags: KV states of recent prompts (:func:`prompt_cache_mb`), each request resuming
    from the longest prefix it shares with any of them (docs/cli.md)."""
    size = prompt_cache_mb()
    return ["--cache", "true", "--cache_type", "ram", "--cache_size", str(size * 2**20)] if size else []


def _token_cap(max_tokens: int) -> dict:
    """LiteLLM sends OpenAI's ``max_completion_tokens``, which llama.cpp's server (and other OpenAI-compatible
    servers) ignore, so a looping model generated up to the context size; repeat the cap as ``max_tokens``."""
    return {"max_tokens": max_tokens}


def make_lm(name: str, api_base: str | None = None, temperature: float = 0.0, max_tokens: int = 512,
            cache: bool = True, timeout: float | None = None) -> ProjectLM:
    """Build an LM from ``local:<model>`` or a DSPy/LiteLLM model string (with optional OpenAI-compatible base);
    ``timeout`` (seconds) bounds each request. An ``api_base`` gets the key in ``RAG_API_KEY`` (none: a placeholder),
    never another variable's: a provider's key (``OPENAI_API_KEY``) goes only to that provider, via LiteLLM."""
    extra = {"timeout": timeout} if timeout else {}
    if name.startswith(LOCAL_PREFIX):
        key = name[len(LOCAL_PREFIX):]
        if key not in models.MODELS:
            raise ValueError(f"unknown local model '{name}'; choose one of: "
                             + ", ".join(LOCAL_PREFIX + k for k in models.MODELS))
        server = local_server(key)
        lm = ProjectLM(f"openai/{server.spec.alias}", api_base=server.api_base, api_key="local",
                       temperature=temperature, max_tokens=max_tokens, cache=cache, num_retries=1,
                       extra_body=_token_cap(max_tokens), **extra)
        lm.server = server
        return lm
    if "/" not in name:
        raise ValueError(f"unknown LM '{name}'; use local:qwen-0.5b, local:qwen-1.5b, or a DSPy/LiteLLM model "
                         "string such as openai/gpt-4o-mini (add --api-base URL for an OpenAI-compatible server)")
    if api_base:  # a key only where the user named one for this endpoint: never a provider's key (OPENAI_API_KEY)
        extra |= {"api_base": api_base, "api_key": os.environ.get("RAG_API_KEY") or "local",
                  "extra_body": _token_cap(max_tokens)}
    return ProjectLM(name, temperature=temperature, max_tokens=max_tokens, cache=cache, **extra)
