"""JavaScript formulas: results, syntax errors, time and memory limits, isolation."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from storage.errors import InvalidFormula
from storage.formula import FormulaError, compile_formula
from storage.formula.js import TIMEOUT_MS

NOW = datetime(2024, 3, 15, 12, 0, tzinfo=UTC)


def run(source: str, fields: dict[str, Any] | None = None) -> Any:
    return compile_formula(source, language="javascript").evaluate(fields or {}, now=NOW)


HAPPY = [
    ('fields["Price"] * fields.Qty', {"Price": 2.5, "Qty": 4}, 10),
    ("{Price} * 2", {"Price": 21}, 42),
    ("{Unit Price} + 1", {"Unit Price": 1}, 2),
    ("const total = fields.a + fields.b;\nreturn total > 2 ? 'big' : 'small';", {"a": 1, "b": 2}, "big"),
    ("fields.tags.map(t => t.toUpperCase())", {"tags": ["a", "b"]}, ["A", "B"]),
    ("({n: fields.n, ok: true})", {"n": 1}, {"n": 1, "ok": True}),
    ("fields.missing", {}, None),
    ("fields.x === null", {"x": None}, True),
    ("now.toISOString()", {}, "2024-03-15T12:00:00.000Z"),
    ("Date.now()", {}, 1710504000000),
    ("new Date().getUTCFullYear()", {}, 2024),
    ("new Date('2020-01-02').getUTCDate()", {}, 2),
    ("'{Price}'", {"Price": 1}, "{Price}"),
    ("if (fields.a) { return 'yes' } else { return 'no' }", {"a": 1}, "yes"),
    ("[1, 2, 3].reduce((a, b) => a + b, 0);", {}, 6),
    ("function f(n) { return n < 2 ? n : f(n - 1) + f(n - 2) }\nreturn f(15)", {}, 610),
    ("undefined", {}, None),
    ("NaN", {}, None),
]


@pytest.mark.parametrize(("source", "fields", "expected"), HAPPY)
def test_javascript_formula_returns_json_value(source: str, fields: dict[str, Any], expected: Any) -> None:
    assert run(source, fields) == expected


def test_javascript_references_are_extracted_statically() -> None:
    formula = compile_formula(
        "{Price} * fields['Qty'] + fields.Tax + fields[\"Ship To\"] // {Not a ref}", language="javascript"
    )
    assert formula.references == frozenset({"Price", "Qty", "Tax", "Ship To"})


@pytest.mark.parametrize("source", ["function(", "return )", "const = 1", "{Price} *", "   "])
def test_javascript_syntax_error_is_invalid_formula(source: str) -> None:
    with pytest.raises(InvalidFormula) as info:
        compile_formula(source, language="javascript")
    assert info.value.code == "INVALID_FORMULA"


def test_compiling_javascript_does_not_run_it() -> None:
    # A body that would loop forever compiles instantly: Function() only parses it.
    started = time.monotonic()
    compile_formula("while (true) {}", language="javascript")
    assert time.monotonic() - started < 5


def test_thrown_exception_is_error_value() -> None:
    with pytest.raises(FormulaError) as info:
        run("throw new Error('boom')")
    assert info.value.code == "#ERROR!"
    with pytest.raises(FormulaError) as info:
        run("fields.nope.deeper")
    assert info.value.code == "#ERROR!"


def test_infinite_loop_times_out_within_the_limit() -> None:
    formula = compile_formula("while (true) {}", language="javascript")
    started = time.monotonic()
    with pytest.raises(FormulaError) as info:
        formula.evaluate({}, now=NOW)
    elapsed = time.monotonic() - started
    assert info.value.code == "#TIMEOUT!"
    assert TIMEOUT_MS <= 50
    assert elapsed < 1.0
    # The engine recovers for the next formula.
    assert run("1 + 1") == 2


def test_a_timeout_drops_the_isolate_but_keeps_the_worker_process() -> None:
    """A formula that always times out must not make every value pay for a new process:
    its isolate is thrown away, the worker stays, and the next run starts from a fresh
    isolate (the same formula times out again, a counter in its globals starts over)."""
    from storage.formula import js

    assert run("1") == 1  # a warm worker
    workers = set(js._pool._children._all)  # noqa: SLF001 - which processes are alive
    looping = compile_formula("if (fields.loop) { while (true) {} } return 7", language="javascript")
    for _ in range(3):
        with pytest.raises(FormulaError) as info:
            looping.evaluate({"loop": True}, now=NOW)
        assert info.value.code == "#TIMEOUT!"
        assert looping.evaluate({"loop": False}, now=NOW) == 7
    assert set(js._pool._children._all) == workers  # noqa: SLF001
    assert all(w.alive() for w in workers)


def test_runaway_promise_chain_times_out() -> None:
    with pytest.raises(FormulaError) as info:
        run("Promise.resolve().then(function f() { return Promise.resolve().then(f) }); 1")
    assert info.value.code == "#TIMEOUT!"
    assert run("2 + 2") == 4


def test_returning_a_promise_is_an_error() -> None:
    with pytest.raises(FormulaError) as info:
        run("(async () => 1)()")
    assert info.value.code == "#ERROR!"


def test_huge_allocation_hits_the_memory_limit() -> None:
    # One 64 MB flat string (twice the limit), then spin: whichever limit stops the script,
    # the heap holds more than the budget, so the verdict is #MEMORY! even on a busy machine.
    with pytest.raises(FormulaError) as info:
        run("const s = 'x'.repeat(2 ** 26); s.charCodeAt(5); for (;;) {}")
    assert info.value.code == "#MEMORY!"
    assert run("3") == 3


def test_allocation_that_would_abort_v8_is_contained() -> None:
    # Fills 8 GB: V8 aborts the whole process on this; only a worker process dies.
    with pytest.raises(FormulaError) as info:
        run("new Array(1e9).fill(0).length")
    assert info.value.code in ("#MEMORY!", "#TIMEOUT!")
    assert run("'alive'") == "alive"


def test_oversized_strings_fail_cleanly() -> None:
    with pytest.raises(FormulaError) as info:
        run("'x'.repeat(2 ** 30)")
    assert info.value.code == "#ERROR!"


ESCAPES = [
    "typeof require",
    "typeof process",
    "typeof fetch",
    "typeof XMLHttpRequest",
    "typeof WebAssembly",
    "typeof SharedArrayBuffer",
    "typeof Atomics",
    "typeof setTimeout",
    "typeof Deno",
    "typeof Bun",
    "typeof __wds_user",
    "typeof Temporal === 'undefined' || typeof Temporal.Now",
]


@pytest.mark.parametrize("expr", ESCAPES)
def test_no_host_apis_are_reachable(expr: str) -> None:
    assert run(expr) in ("undefined", True)


def test_only_ecmascript_globals_exist() -> None:
    names = run("Object.getOwnPropertyNames(globalThis)")
    markers = ("py", "python", "file", "net", "http", "import")
    suspicious = [n for n in names if any(k in n.lower() for k in markers)]
    assert suspicious == []


def test_dynamic_import_cannot_load_modules() -> None:
    with pytest.raises(FormulaError):
        run("import('fs')")


def test_state_does_not_leak_between_records() -> None:
    source = (
        "globalThis.count = (globalThis.count || 0) + 1; Object.prototype.polluted = 1;"
        " return [globalThis.count, ({}).polluted ?? null]"
    )
    formula = compile_formula(source, language="javascript")
    first = formula.evaluate({}, now=NOW)
    second = formula.evaluate({}, now=NOW)
    # Globals and prototypes are frozen: the writes are ignored, every record sees the same world.
    assert first == second == [None, None]


def test_record_values_are_passed_as_json() -> None:
    fields = {
        "text": 'quote " and \u2028 line sep', "n": 1.5, "flag": True, "list": [1, "a", None], "none": None,
    }
    assert run("fields", fields) == fields
