"""Property tests of stored references (storage/refs.py) for a fetch_records step's
filters: whatever a step's config holds, storing it either refuses it with a
ServiceError or keeps it in a form that reads back — never one whose decoding raises
(which failed every later load of the workspace's schema: each of its requests was a
500) — and the groups read back as the same conditions, templates included."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import refs
from storage.errors import ServiceError
from storage.query.parse import Filter, Group, Op, group_text, parse_group

SOURCE, TARGET = 1, 2
NAMES = refs.Names(
    columns={10: (SOURCE, "Who"), 11: (SOURCE, "Due Date"), 12: (SOURCE, 'we"ird'), 13: (SOURCE, "a}b"),
             20: (TARGET, "Name"), 21: (TARGET, "Age"), 22: (TARGET, "odd,name"), 23: (TARGET, 'q"t')},
    tables={SOURCE: "Source", TARGET: "Target"},
)
TEMPLATES = ["{{ Who }}", "{{ fields['Due Date'] }}", "{{ Who | upper }}", "x-{{ Who }}-y", "{{ record_id }}",
             "{{ fields['a}b'] }}", "{{ Who }}{{ fields['Due Date'] }}"]
LITERALS = st.text(alphabet=st.sampled_from(list('ab ,()"\\{}.*:')), max_size=8)
VALUES = st.one_of(st.sampled_from(TEMPLATES), LITERALS)
COLUMNS = st.sampled_from(["Name", "Age", "odd,name", 'q"t', "id"])


@st.composite
def groups(draw: Any, depth: int = 0) -> Group:
    items: list[Filter | Group] = []
    for _ in range(draw(st.integers(1, 3))):
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            items.append(draw(groups(depth + 1)))
        elif draw(st.booleans()):
            items.append(Filter(draw(COLUMNS), Op.EQ, draw(VALUES), draw(st.booleans())))
        else:
            items.append(Filter(draw(COLUMNS), Op.IN, tuple(draw(st.lists(VALUES, min_size=1, max_size=3))),
                                draw(st.booleans())))
    return Group(draw(st.sampled_from(["and", "or"])), tuple(items), draw(st.booleans()))


def _same_quotes(group: Group) -> Group:
    return refs.map_group_values(group, lambda v: re.sub(r'fields\["([^"\\]*)"\]', r"fields['\1']", v))


def _key(group: Group) -> str:
    return ("not." if group.negate else "") + group.kind


def _config(group: Group, listed: bool) -> dict[str, Any]:
    entry = {_key(group): group_text(group)}
    return {"table_id": TARGET, "limit": 5, "filters": [entry] if listed else entry}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), listed=st.booleans())
def test_a_stored_group_reads_back_as_written(group: Group, listed: bool) -> None:
    config = _config(group, listed)
    try:
        _, stored = refs.encode("fetch_records", None, config, table_id=SOURCE, names=NAMES)
    except ServiceError:
        return  # refused when written, with a clear error: nothing is stored
    _, shown, _ = refs.decode("fetch_records", None, stored, table_id=SOURCE, names=NAMES)
    filters = shown["filters"]
    entry = filters[0] if listed else filters
    ((key, text),) = entry.items()
    # a template's fields['…'] is written back as fields["…"] (the same template)
    assert _same_quotes(parse_group(key, text)) == parse_group(_key(group), group_text(group))
    # the names the templates read are the columns of the source table they name
    assert refs.config_names("fetch_records", shown) <= {"Who", "Due Date", "a}b"}


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(["{{", "}}", "{%", "%}", "\\", '"', '\\"', "'", "fields[", "]", "Who", "(",
                                      ")", ",", ".", "eq", "a", " ", "|", "@12", "__ref_10", "{", "}"]), max_size=14).map("".join),
       listed=st.booleans())
def test_any_stored_filter_text_decodes_without_raising(text: str, listed: bool) -> None:
    """Decoding stored metadata never raises, whatever text is stored (an older version's,
    or a bug's): a raise there fails the workspace's every request."""
    entry = {"or": text}
    config = {"table_id": TARGET, "filters": [entry] if listed else entry}
    refs.decode("fetch_records", None, config, table_id=SOURCE, names=NAMES)
    refs.decode("http_request", None, {"url": text, "body": {"k": text}}, table_id=SOURCE, names=NAMES)


PIECE = st.lists(st.sampled_from(["{{", "}}", "{%", "%}", "{#", "\\", '"', '\\"', "'", "`", "/*", "//", "\n",
                                  "fields[", "]", "Who", "{Who}", "{@10}", "@10", "__ref_10", "(", ")", ",", ".",
                                  "eq", "a", " ", "|", "{", "}", "item", "$"]), max_size=12).map("".join)
JSONISH = st.recursive(st.one_of(PIECE, st.integers(-3, 30), st.booleans(), st.none()),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(st.sampled_from(["or", "and", "Who", "@10", "k"]),
                                                               inner, max_size=3)),
                       max_leaves=8)
CONFIG_KEYS = st.sampled_from(list(refs.TEMPLATE_KEYS) + list(refs.NAME_KEYS) + ["table_id", "language", "step",
                                                                                  "formula", "limit"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["formula", "http_request", "action", "json_parser", "ai_agent", "create_record",
                             "update_record", "delete_record", "fetch_records", "loop", "delay"]),
       formula=st.one_of(st.none(), PIECE), language=st.sampled_from(["excel", "javascript"]),
       config=st.dictionaries(CONFIG_KEYS, JSONISH, max_size=5), step_type=st.sampled_from(["formula", "http_request",
                                                                                            "fetch_records"]))
def test_decoding_any_stored_column_never_raises(kind: str, formula: str | None, language: str,
                                                 config: dict[str, Any], step_type: str) -> None:
    """Every computed column is decoded on each load of its workspace's schema: whatever a
    column's stored formula and config hold, decoding answers (a raise there was a 500 on
    every request of the workspace)."""
    config = {**config, "language": language}
    if kind == "loop":
        config["step"] = {"type": step_type, "config": dict(config)}
    refs.decode(kind, formula, config, table_id=SOURCE, names=NAMES)
