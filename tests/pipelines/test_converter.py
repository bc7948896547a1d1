"""The service's Temporal data converter (service/converter.py) against Temporal's default,
on every dataclass that crosses Temporal (activities/types.py): the same payload bytes
out, the same objects (or the same refusal) in. Histories written by one must read
under the other: old histories replay under the new worker, and a default client (a
test, ``temporal workflow show``) reads what the service writes."""

from __future__ import annotations

import dataclasses
import inspect
import math
import types
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.converter import DataConverter

import activities.types as wire
from service.converter import DATA_CONVERTER
from service.relay import decode_input, encode_input

OLD = DataConverter.default.payload_converter
NEW = DATA_CONVERTER.payload_converter
CLASSES = [c for _, c in inspect.getmembers(wire, inspect.isclass)
           if dataclasses.is_dataclass(c) and c.__module__ == wire.__name__]

_scalars = (st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63 - 1)
            | st.floats(allow_nan=False) | st.text(max_size=8))
JSON = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=12)


def strategy(hint: Any) -> st.SearchStrategy[Any]:
    """Values of type ``hint`` as the service builds them (JSON-able, finite floats)."""
    if hint is Any:
        return JSON
    if hint is int:
        return st.integers(-(2 ** 63), 2 ** 63 - 1)
    if hint is float:
        return st.floats(allow_nan=False) | st.integers(-1000, 1000)
    if hint is str:
        return st.text(max_size=8)
    if hint is bool:
        return st.booleans()
    if hint is type(None):
        return st.none()
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy(a) for a in args))
    if origin is list:
        return st.lists(strategy(args[0]), max_size=6)
    if origin is dict:
        return st.dictionaries(st.text(max_size=6), strategy(args[1]), max_size=4)
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return st.builds(hint, **{f.name: strategy(hints[f.name]) for f in dataclasses.fields(hint) if f.init})
    raise AssertionError(f"no strategy for {hint!r}: add one (a new type crossing Temporal)")


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_and_same_objects(cls: type, data: st.DataObject) -> None:
    value = data.draw(strategy(cls))
    out = NEW.to_payloads([value])
    assert out == OLD.to_payloads([value])
    assert NEW.from_payloads(out, [cls]) == OLD.from_payloads(out, [cls]) == [value]
    # the dict form (an outbox row's input) decodes alike too
    as_dict = dataclasses.asdict(value)
    assert NEW.from_payloads(OLD.to_payloads([as_dict]), [cls]) == [value]


def test_covers_the_run_input_of_a_recorded_create() -> None:
    """A 500-record create's input with its recorded result: what the fast paths (lists
    of ints and strings, nested dataclasses) are for."""
    ids = list(range(1_000_000, 1_000_500))
    inp = wire.PipelineInput(
        table=wire.TableSnap(7, 3, "T", [wire.ColumnSnap(1, "A", "number"),
                                         wire.ColumnSnap(2, "B", "formula", formula="{A}+1", reads=["A"])]),
        record_ids=ids, mode="create", levels=[[2]], caller=wire.Caller(1, "vibe_mcp", "enterprise", {"7": [True] * 4}),
        time_budget_s=30.0, step_budget=10_000, dependants={"1": [2], "2": []},
        recorded=wire.PipelineResult("run-1", "error", {"1000001": wire.RecordOutcome("error", {"B": "boom"})},
                                     [str(i) for i in ids if i != 1_000_001]))
    encoded = encode_input(inp)
    assert encoded == dataclasses.asdict(inp)
    assert decode_input(encoded) == inp
    payload = NEW.to_payloads([encoded])
    assert payload == OLD.to_payloads([encoded]) == OLD.to_payloads([inp])
    assert NEW.from_payloads(payload, [wire.PipelineInput]) == [inp]


@pytest.mark.parametrize(("cls", "raw"), [
    (wire.TableSnap, {"id": 1, "workspace_id": 2, "name": "T", "columns": [{"id": "x", "name": "A", "type": "number"}]}),
    (wire.TableSnap, {"id": 1, "workspace_id": 2, "name": "T"}),  # a required field missing
    (wire.PipelineResult, {"run_id": "r", "status": "ok", "ok": [1, 2]}),  # ids must be text
    (wire.PipelineResult, ["r", "ok"]),
    (wire.PipelineInput, {"table": None, "record_ids": [], "mode": "create", "levels": [], "caller": None,
                          "time_budget_s": 1.0, "step_budget": 1}),
])
def test_refuses_what_the_default_refuses(cls: type, raw: Any) -> None:
    payload = OLD.to_payloads([raw])
    with pytest.raises(Exception) as old:
        OLD.from_payloads(payload, [cls])
    with pytest.raises(Exception) as new:
        NEW.from_payloads(payload, [cls])
    assert type(new.value) is type(old.value)


def test_converts_what_the_default_converts() -> None:
    """Values of a near type convert as the default converts them: a float or a boolean
    where an int is expected (JSON written by another SDK), a list of those."""
    raw = {"run_id": "r", "status": "ok", "records": {}, "ok": ["1"]}
    payload = OLD.to_payloads([{"table": {"id": 1.0, "workspace_id": True, "name": "T", "columns": []},
                                "record_ids": [1.0, 2, True], "mode": "create", "levels": [[3.0]],
                                "caller": {"token_id": 1, "token_type": "t", "plan": "p"},
                                "time_budget_s": 2, "step_budget": 5.0, "recorded": raw}])
    old, new = OLD.from_payloads(payload, [wire.PipelineInput]), NEW.from_payloads(payload, [wire.PipelineInput])
    assert new == old
    assert new[0].record_ids == [1, 2, 1] and all(type(i) is int for i in new[0].record_ids)
    assert new[0].levels == [[3]] and type(new[0].levels[0][0]) is int
    assert type(new[0].time_budget_s) is float and math.isclose(new[0].time_budget_s, 2.0)


def test_a_caller_recorded_before_its_later_fields_decodes_with_their_defaults() -> None:
    """Workflow inputs recorded before ``Caller`` had bucket grants and app-user fields
    (session 24) still decode, with the defaults, which grant less: no bucket, no app
    user (activities/records.py then checks the table grants alone, as before)."""
    recorded = {"token_id": 5, "token_type": "rest_api", "plan": "pro", "grants": {"7": [True, True, False, False]}}
    payload = OLD.to_payloads([recorded])
    decoded = NEW.from_payloads(payload, [wire.Caller])
    assert decoded == OLD.from_payloads(payload, [wire.Caller])
    assert decoded == [wire.Caller(5, "rest_api", "pro", {"7": [True, True, False, False]},
                                   buckets={}, app_user_id=None, users_table_id=None)]
