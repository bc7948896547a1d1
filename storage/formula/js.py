"""JavaScript formulas (``config.language = "javascript"``), run in V8 in worker processes.

The source is either an expression (``fields.Price * 2``) or a function body with
``return`` statements. It sees ``fields`` (the record, as JSON) and ``now`` (a Date of the
injected time; ``Date.now()`` and ``new Date()`` read it too). ``{Column}`` placeholders
are accepted as shorthand for ``fields["Column"]`` when written outside strings and
comments and the braces hold no JavaScript punctuation (best effort: ``{a: 1}`` or
``{ x }`` stay JavaScript). References are extracted statically from placeholders,
``fields["Col"]``/``fields['Col']`` and ``fields.Col``; a computed key such as
``fields[name]`` is invisible to the dependency graph.

Limits: each evaluation may run ``TIMEOUT_MS`` (50 ms) and allocate ``MEMORY_LIMIT``
bytes of V8 heap; past either it ends with ``#TIMEOUT!`` / ``#MEMORY!``. V8 runs in child
processes (see :mod:`.js_worker`) because a hostile script can abort V8 outright (a fatal
out-of-memory) or wedge it with an endless microtask chain; in a child, that costs one
process, which is replaced. Bare V8 has no file, network or process APIs, and no Python
callable is ever exposed to it. A worker runs at the scheduling policy of the thread that
calls it (set before each request when it differs: the evaluation sandbox's child moves
itself, and so its workers, to ``SCHED_IDLE`` when a batch runs long).

Measured on the 2-core dev box: spawning a worker ≈ 160 ms (once per pool slot, and in
the background after a worker is replaced), a formula's hardened context ≈ 20 ms (once
per formula per worker), an evaluation ≈ 0.4–0.7 ms round trip.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..childpool import ChildPool, PoolClosed
from ..errors import InvalidFormula, Unavailable
from .errors import ERROR, MEMORY, TIMEOUT, VALUE, FormulaError
from .values import MAX_TEXT

TIMEOUT_MS = 50
MEMORY_LIMIT = 32 * 1024 * 1024
MAX_SOURCE = 20_000
POOL_SIZE = max(1, min(4, os.cpu_count() or 1))
CONTEXTS_PER_WORKER = 64
# How long the parent waits beyond the script limits before declaring a worker wedged:
# covers creating a context for a new formula and the post-run idle check.
GRACE_S = 1.0
START_TIMEOUT_S = 20.0

_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js_worker.py")
PLACEHOLDER = re.compile(r"\{([^{}\s:;,()'\"`=\[\]+*/<>!?|&^%~.\n\\-][^{}:;,()'\"`=\[\]\n\\]*?)\}")
FIELD_ACCESS = re.compile(
    r"\bfields\s*(?:\[\s*(\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*')\s*\]|\.\s*([A-Za-z_$][\w$]*))"
)
# Comments and string/template literals, inside which {braces} are left alone.
SKIP = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|`(?:[^`\\]|\\.)*`", re.DOTALL
)


# The scanner pieces above are shared with ``storage/refs.py``, which rewrites column
# references to ids and back with exactly the rules used here to find them.


def js_string(literal: str) -> str:
    """Decode a JavaScript string literal (JSON escapes; best effort for the rest)."""
    body = literal[1:-1]
    if literal[0] == "'":
        body = body.replace("\\'", "'").replace('"', '\\"')
    try:
        return str(json.loads(f'"{body}"'))
    except ValueError:
        return body


def _rewrite(source: str) -> tuple[str, frozenset[str]]:
    """Replace ``{Column}`` placeholders outside strings/comments; collect references."""
    names: set[str] = set()
    out: list[str] = []
    last = 0
    for skip in SKIP.finditer(source):
        out.append(_replace_placeholders(source[last:skip.start()], names))
        out.append(skip.group(0))
        last = skip.end()
    out.append(_replace_placeholders(source[last:], names))
    code = "".join(out)
    for m in FIELD_ACCESS.finditer(code):
        names.add(js_string(m.group(1)) if m.group(1) else m.group(2))
    return code, frozenset(names)


KEYWORD = re.compile(
    r"(?:return|throw|break|continue|var|let|const|if|for|while|do|switch|try|new|delete|typeof|void"
    r"|yield|await|function|class)\b"
)
BLOCK_BEFORE = re.compile(r"(?:\)|=>|\belse|\bdo|\btry|\bfinally)\s*$")


def _replace_placeholders(chunk: str, names: set[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1)
        # Braces after ")", "=>", else/do/try/finally open a block; keywords start statements.
        if name != name.strip() or KEYWORD.match(name) or BLOCK_BEFORE.search(chunk, 0, m.start()):
            return m.group(0)
        names.add(name)
        return f"fields[{json.dumps(name)}]"

    return PLACEHOLDER.sub(repl, chunk)


class _Worker:
    """One child process speaking JSON lines."""

    def __init__(self) -> None:
        # The child needs no secrets: pass only what locating libraries and locale need.
        keep = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "TMPDIR")
        env = {k: v for k, v in os.environ.items() if k in keep}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", _WORKER, str(TIMEOUT_MS), str(MEMORY_LIMIT), str(CONTEXTS_PER_WORKER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True,
        )
        self._buf = b""
        self.policy = _policy(self.proc.pid)
        ready = self._read_line(time.monotonic() + START_TIMEOUT_S)
        if ready is None:
            self.kill()
            raise FormulaError(ERROR, "JavaScript engine failed to start")

    def _read_line(self, deadline: float) -> bytes | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def request(self, payload: dict[str, Any], budget_s: float) -> dict[str, Any] | None:
        """Send one request; ``None`` when the worker died or missed the deadline."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(payload).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        line = self._read_line(time.monotonic() + budget_s)
        return json.loads(line) if line else None

    def follow(self, policy: int | None) -> bool:
        """Run at the caller's scheduling ``policy`` (the sandbox child moves itself to
        ``SCHED_IDLE`` past a batch's demotion threshold, ``activities.sandbox_jobs``);
        False when the worker cannot (returning from ``SCHED_IDLE`` needs privilege)."""
        if policy is None or policy == self.policy:
            return True
        for tid in _threads(self.proc.pid):  # V8 runs the script on its own threads, not the main one
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(0))
            except ProcessLookupError:
                if tid == self.proc.pid:
                    return False  # the worker itself is gone
            except OSError:
                return False
        self.policy = policy
        return True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


def _threads(pid: int) -> list[int]:
    """Every thread of process ``pid`` (a scheduling policy is a thread's, not a
    process's: ``sched_setscheduler(pid)`` moves only the main thread); ``[pid]`` where
    ``/proc`` does not list them."""
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return [pid]


def _policy(pid: int) -> int | None:
    """The scheduling policy of ``pid`` (0: the calling thread), None off Linux."""
    try:
        return os.sched_getscheduler(pid)
    except (OSError, AttributeError):
        return None


class _Pool:
    """At most ``size`` workers, each used by one thread at a time."""

    def __init__(self, size: int) -> None:
        self._slots = threading.BoundedSemaphore(size)
        self._children: ChildPool[_Worker] = ChildPool(_Worker, "js-worker")

    def run(self, payload: dict[str, Any], budget_s: float) -> dict[str, Any]:
        with self._slots:
            try:
                worker = self._children.take()
            except PoolClosed:
                return {"error": ERROR, "message": "the JavaScript engine is shutting down"}
            if not worker.follow(_policy(0)):
                self._children.discard(worker)  # left at SCHED_IDLE: a fresh one starts at ours
                try:
                    worker = self._children.take()
                except PoolClosed:
                    return {"error": ERROR, "message": "the JavaScript engine is shutting down"}
            reply = worker.request(payload, budget_s)
            if reply is not None and not reply.get("fatal") and worker.alive():
                self._children.give_back(worker)
            else:
                died = not worker.alive()
                self._children.discard(worker)
                # the next caller need not wait for a new worker to boot
                self._children.start_in_background()
                if reply is None:
                    # A worker that vanished mid-run was killed by V8's fatal OOM handler.
                    code = MEMORY if died else TIMEOUT
                    reply = {"error": code, "message": "script exceeded the engine's limits"}
            return reply

    def close(self) -> None:
        self._children.close()


_pool = _Pool(POOL_SIZE)
atexit.register(lambda: _pool.close())


def _forget_parent_workers() -> None:
    # A forked child (e.g. a server worker) must not share the parent's pipes.
    global _pool
    _pool = _Pool(POOL_SIZE)


os.register_at_fork(after_in_child=_forget_parent_workers)


@dataclass(frozen=True)
class JSFormula:
    """A syntax-checked JavaScript formula."""

    source: str
    body: str
    references: frozenset[str]

    @property
    def key(self) -> str:
        return hashlib.sha256(self.body.encode()).hexdigest()

    def evaluate(self, fields: Mapping[str, Any], *, now: datetime) -> Any:
        """Run the formula for one record (see :meth:`CompiledFormula.evaluate`)."""
        try:
            fields_json = json.dumps(dict(fields or {}), default=str, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise FormulaError(VALUE, f"record is not JSON-serialisable: {exc}") from None
        aware = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
        payload = {"op": "eval", "key": self.key, "body": self.body,
                   "now": aware.timestamp() * 1000, "fields": fields_json}
        reply = _pool.run(payload, 2 * TIMEOUT_MS / 1000 + GRACE_S)
        if "error" in reply:
            raise FormulaError(str(reply["error"]), str(reply.get("message", "")))
        text = reply.get("json", "null")
        if len(text) > MAX_TEXT:
            raise FormulaError(VALUE, f"result larger than {MAX_TEXT} characters")
        return json.loads(text)


def compile_js(source: str) -> JSFormula:
    """Syntax-check a JavaScript formula in V8 without running it.

    Raises:
        InvalidFormula: Empty, too long, or not valid JavaScript.
    """
    if not source.strip():
        raise InvalidFormula("formula is empty")
    if len(source) > MAX_SOURCE:
        raise InvalidFormula(f"formula longer than {MAX_SOURCE} characters")
    code, references = _rewrite(source)
    expression = code.strip().rstrip(";").rstrip()
    candidates = [f"return (\n{expression}\n);", code]
    if re.search(r"\breturn\b", code):
        candidates.reverse()
    errors = []
    for body in candidates:
        try:
            reply = _pool.run({"op": "check", "body": body}, START_TIMEOUT_S)
        except FormulaError as exc:
            raise Unavailable(f"JavaScript engine unavailable: {exc.message}") from None
        if reply.get("ok"):
            return JSFormula(source, body, references)
        errors.append(str(reply.get("message", "syntax error")))
    raise InvalidFormula(f"JavaScript syntax error: {errors[0]}")
