"""The Temporal data converter every process of the service connects with: Temporal's
default, with two costs of its JSON converter taken out. The JSON on the wire is the same
byte for byte, so histories written by either converter replay under the other, and a
client on Temporal's default (a test, ``temporal workflow show``) reads every payload.

* **Encoding a dataclass** (a workflow's result, an activity's input): the default
  encoder calls :func:`dataclasses.asdict`, which deep-copies every list first (a
  500-record run's ``PipelineResult`` took ~0.29 ms). :class:`_Encoder` hands the encoder
  the dataclass's fields as they are; nested dataclasses come back to it in turn. The
  output is the same: ``asdict`` produces exactly the dicts, lists and values the encoder
  then writes.
* **Decoding into a dataclass** (a workflow's input, an activity's result): the default
  calls :func:`typing.get_type_hints` for every dataclass it builds, each time, and
  converts a ``list[int]`` element by element (a 500-record ``PipelineInput`` took
  ~0.47 ms). :class:`_Decoder` is a type converter, the hook Temporal offers for this,
  that keeps each dataclass's hints once and takes a ``list[int]`` / ``list[str]`` /
  ``list[list[int]]`` whose elements already have exactly that type as it is. Everything
  else is left to Temporal's ``value_to_type``, field by field, so a value converts or
  fails as before (``tests/pipelines/test_converter.py`` compares the two on every
  dataclass that crosses Temporal).

A recorded create's run pays both on the worker, in the API process, beside the requests
(docs/decisions.md, "Temporal's converter without its copies").
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from temporalio.converter import (
    AdvancedJSONEncoder,
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
    value_to_type,
)

# list hints whose elements are taken as they are when each has exactly this type:
# value_to_type would give back equal values (int(v), str(v)) one call per element
_SCALAR_LISTS: dict[Any, type] = {list[int]: int, list[str]: str}


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """``(name, hint, init)`` of each field of dataclass ``cls`` (its hints resolved once)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.init) for f in dataclasses.fields(cls))


@functools.cache
def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


class _Encoder(AdvancedJSONEncoder):
    """Temporal's encoder, writing a dataclass from its fields without ``asdict``'s copy."""

    def default(self, o: Any) -> Any:
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return {name: getattr(o, name) for name in _names(type(o))}
        return super().default(o)


class _Decoder(JSONTypeConverter):
    """``value_to_type`` for dataclasses with their hints kept, and for lists of scalars
    that need no conversion; :attr:`JSONTypeConverter.Unhandled` for everything else."""

    def to_typed_value(self, hint: type, value: Any) -> Any:
        scalar = _SCALAR_LISTS.get(hint)
        if scalar is not None:
            if type(value) is list and set(map(type, value)) <= {scalar}:  # each exactly ``scalar``
                return list(value)
            return JSONTypeConverter.Unhandled
        if hint == list[list[int]]:
            if type(value) is list and all(type(v) is list and set(map(type, v)) <= {int} for v in value):
                return [list(v) for v in value]
            return JSONTypeConverter.Unhandled
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            return JSONTypeConverter.Unhandled
        # value_to_type's dataclass branch, with the hints resolved once per class
        if not isinstance(value, dict):
            raise TypeError(f"Cannot convert to dataclass {hint}, value is {type(value)} not dict")
        init_values: dict[str, Any] = {}
        later: dict[str, Any] = {}
        for name, field_hint, init in _fields(hint):
            field_value = value.get(name, dataclasses.MISSING)
            if field_value is dataclasses.MISSING:
                continue  # the dataclass raises for a missing required field
            try:
                converted = value_to_type(field_hint, field_value, TYPE_CONVERTERS)
            except Exception as err:
                raise TypeError(f"Failed converting field {name} on dataclass {hint}") from err
            (init_values if init else later)[name] = converted
        obj = hint(**init_values)
        for name, field_value in later.items():
            object.__setattr__(obj, name, field_value)
        return obj


TYPE_CONVERTERS: list[JSONTypeConverter] = [_Decoder()]


class PayloadConverter(CompositePayloadConverter):
    """Temporal's default payload converters, its JSON one with :class:`_Encoder` and
    :class:`_Decoder`."""

    def __init__(self) -> None:
        super().__init__(*(
            JSONPlainPayloadConverter(encoder=_Encoder, custom_type_converters=TYPE_CONVERTERS)
            if isinstance(c, JSONPlainPayloadConverter) else c
            for c in DefaultPayloadConverter.default_encoding_payload_converters
        ))


DATA_CONVERTER = dataclasses.replace(DataConverter.default, payload_converter_class=PayloadConverter)
