"""Child process that runs JavaScript formulas in V8 (mini-racer); see :mod:`.js`.

Run as a script (``python -I js_worker.py TIMEOUT_MS MEMORY_BYTES MAX_CONTEXTS``), it
reads one JSON request per line on stdin and answers one JSON line on stdout. It imports
nothing from the service: V8 runs here, in its own process, because a script can drive
V8 into a fatal out-of-memory abort or an endless microtask loop that no in-process limit
stops; here that only costs this process, which the parent replaces.

Each formula gets its own V8 context (LRU-cached), whose globals are hardened (deeply
frozen) after the formula is defined, so one record's evaluation cannot leave state for
the next. ``Date.now()`` and ``new Date()`` read the injected time; timers,
WebAssembly, SharedArrayBuffer and Atomics are removed. No Python function is ever
exposed to JavaScript.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import OrderedDict
from typing import Any

from py_mini_racer import JSEvalException, JSOOMException, JSTimeoutException, MiniRacer

LOCKDOWN = r"""
(function () {
  "use strict";
  const userFn = globalThis.__wds_user;
  delete globalThis.__wds_user;
  const RealDate = Date;
  let nowMs = 0;
  const WDate = function Date(...args) {
    if (!new.target) return new RealDate(nowMs).toString();
    return Reflect.construct(RealDate, args.length ? args : [nowMs], new.target);
  };
  WDate.prototype = RealDate.prototype;
  WDate.now = function now() { return nowMs; };
  WDate.parse = RealDate.parse;
  WDate.UTC = RealDate.UTC;
  Object.defineProperty(RealDate.prototype, "constructor", { value: WDate });
  globalThis.Date = WDate;
  if (globalThis.Temporal) { delete globalThis.Temporal.Now; }
  for (const name of ["setTimeout", "clearTimeout", "__timer_manager", "WebAssembly",
                      "SharedArrayBuffer", "Atomics", "FinalizationRegistry", "WeakRef"]) {
    // var-declared globals (the timer shims) cannot be deleted; blank them instead.
    try { delete globalThis[name]; } catch (e) {}
    if (name in globalThis) { globalThis[name] = undefined; }
  }
  const noop = function () {};
  globalThis.console = { log: noop, info: noop, warn: noop, error: noop, debug: noop };
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const run = function (now, fieldsJson) {
    nowMs = now;
    const result = userFn(parse(fieldsJson), new WDate(now));
    if (result !== null && (typeof result === "object" || typeof result === "function")
        && typeof result.then === "function") {
      throw new TypeError("formulas must return a value, not a Promise");
    }
    const out = stringify(result === undefined ? null : result);
    return out === undefined ? "null" : out;
  };
  Object.defineProperty(globalThis, "__wds_run", { value: run });
  const roots = [globalThis, userFn, run,
    Object.getPrototypeOf(function* () {}), Object.getPrototypeOf(async function () {}),
    Object.getPrototypeOf(async function* () {}), Object.getPrototypeOf([][Symbol.iterator]()),
    Object.getPrototypeOf(new Map()[Symbol.iterator]()), Object.getPrototypeOf(new Set()[Symbol.iterator]()),
    Object.getPrototypeOf(""[Symbol.iterator]()), Object.getPrototypeOf(/a/[Symbol.matchAll]("")),
    Object.getPrototypeOf(Int8Array)];
  const seen = new Set();
  const stack = roots.slice();
  while (stack.length) {
    const o = stack.pop();
    if (o === null || (typeof o !== "object" && typeof o !== "function") || seen.has(o)) continue;
    seen.add(o);
    try { Object.freeze(o); } catch (e) {}
    for (const key of Reflect.ownKeys(o)) {
      const d = Object.getOwnPropertyDescriptor(o, key);
      if (!d) continue;
      if ("value" in d) stack.push(d.value); else { stack.push(d.get); stack.push(d.set); }
    }
    stack.push(Object.getPrototypeOf(o));
  }
})();
"""


_ERROR_LINE = re.compile(r"\b([A-Za-z]*Error\b:? .*)")


def _message(exc: BaseException) -> str:
    # mini-racer prefixes "<anonymous>:1: " and appends a source excerpt; keep the gist.
    for line in str(exc).splitlines():
        m = _ERROR_LINE.search(line)
        if m:
            return m.group(1)[:300]
    return type(exc).__name__


class Runner:
    """Owns the V8 contexts of this worker process."""

    def __init__(self, timeout_ms: int, memory: int, max_contexts: int) -> None:
        self.timeout = timeout_ms / 1000
        self.memory = memory
        self.max_contexts = max_contexts
        self.contexts: OrderedDict[str, MiniRacer] = OrderedDict()
        self.checker = MiniRacer()
        self.checker.set_hard_memory_limit(memory)

    def check(self, body: str) -> dict[str, Any]:
        """Syntax-check a function body without running it (Function() parses the body alone)."""
        try:
            self.checker.eval(f"void new Function('fields', 'now', {json.dumps(body)})", timeout_sec=1.0)
        except JSEvalException as exc:
            return {"error": "syntax", "message": _message(exc)}
        return {"ok": True}

    def _context(self, key: str, body: str) -> MiniRacer:
        mr = self.contexts.get(key)
        if mr is not None:
            self.contexts.move_to_end(key)
            return mr
        mr = MiniRacer()
        mr.set_hard_memory_limit(self.memory)
        define = f"globalThis.__wds_user = new Function('fields', 'now', {json.dumps(body)});"
        mr.eval(define, timeout_sec=1.0)
        mr.eval(LOCKDOWN, timeout_sec=2.0)
        self.contexts[key] = mr
        while len(self.contexts) > self.max_contexts:
            _, old = self.contexts.popitem(last=False)
            old.close()
        return mr

    def _drop(self, key: str, mr: MiniRacer) -> None:
        if self.contexts.get(key) is mr:
            del self.contexts[key]
        mr.close()

    def _over_memory(self, mr: MiniRacer) -> bool:
        try:
            used = int(mr.heap_stats().get("used_heap_size", 0))
            return mr.was_hard_memory_limit_reached() or used > self.memory
        except Exception:  # noqa: BLE001 - a broken isolate after termination: assume memory
            return True

    def evaluate(self, key: str, body: str, now_ms: float, fields_json: str) -> dict[str, Any]:
        """Run one formula for one record; ``fatal`` asks the parent to replace this process."""
        mr = self._context(key, body)
        try:
            call = f"__wds_run({float(now_ms)!r}, {json.dumps(fields_json)})"
            out = mr.eval(call, timeout_sec=self.timeout)
        except JSTimeoutException:
            if self._over_memory(mr):
                # Both limits tripped together; the allocation is the real cause.
                return {"error": "#MEMORY!", "message": "script exceeded the memory limit", "fatal": True}
            # V8 terminated the script: the isolate is dropped (never reused), the process
            # stays — starting a new one costs several times the script's own time budget,
            # which a formula that always times out would otherwise make every value pay
            self._drop(key, mr)
            return {"error": "#TIMEOUT!", "message": "script ran longer than the time limit"}
        except JSOOMException:
            return {"error": "#MEMORY!", "message": "script exceeded the memory limit", "fatal": True}
        except JSEvalException as exc:
            if mr.was_hard_memory_limit_reached():
                return {"error": "#MEMORY!", "message": "script exceeded the memory limit", "fatal": True}
            return {"error": "#ERROR!", "message": _message(exc)}
        # Promise jobs left behind run after eval returns; a runaway chain would wedge the
        # isolate, so make sure it is idle before answering.
        try:
            mr.eval("0", timeout_sec=self.timeout)
        except JSTimeoutException:
            return {"error": "#TIMEOUT!", "message": "script left work running", "fatal": True}
        return {"ok": True, "json": out}


def main() -> None:
    timeout_ms, memory, max_contexts = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    runner = Runner(timeout_ms, memory, max_contexts)
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        fatal = False
        try:
            req = json.loads(line)
            if req.get("op") == "check":
                reply = runner.check(req["body"])
            else:
                reply = runner.evaluate(req["key"], req["body"], req["now"], req["fields"])
                fatal = bool(reply.get("fatal"))
        except Exception as exc:  # noqa: BLE001 - report, never die silently mid-request
            reply = {"error": "#ERROR!", "message": f"{type(exc).__name__}: {str(exc)[:200]}", "fatal": True}
            fatal = True
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if fatal:
            # A terminated or memory-starved isolate is not trusted with the next request.
            os._exit(0)


if __name__ == "__main__":
    main()
