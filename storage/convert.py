"""SQL that converts a column's stored values when its type changes (issue 21 item 5).

Pure SQL building: nothing here touches a connection. ``storage/meta.py`` runs what these
functions build inside the schema change's transaction:

1. :func:`helper_functions` — ``CREATE OR REPLACE FUNCTION pg_temp.wds_*`` statements. An
   ``ALTER … TYPE … USING`` expression may not hold a subquery; the few conversions that
   need one (a list element by element, a record lookup) call these session-temporary
   SQL functions instead. They vanish with the session; each conversion recreates them.
2. :func:`label_query` — for a change *to* a select type: the distinct labels the values
   become, in order of first appearance, so missing options can be created first.
3. :func:`plan` — the ``USING`` expression (old storage → new storage, ``NULL`` where a
   value does not convert) and the predicate saying an old value is blank (a blank value
   that converts to ``NULL`` is no loss). A row loses its value when
   ``old IS NOT NULL AND NOT blank AND using IS NULL``: that is counted with one SELECT
   before the ``ALTER`` (see :func:`loss_query`).

The rules, pair by pair, are in ``docs/type-conversions.md``; :func:`parse_number_text` is
the Python reference of the text → number rule (the property test holds SQL to it).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum

from psycopg import sql

from storage.schema import ColumnMeta, ColumnType, Option

T = ColumnType
MAX_FILES = 100  # as storage.values: a file cell holds at most 100 files

# --------------------------------------------------------------------------- text → number
# Trimmed of ASCII whitespace: an optional sign, an optional currency sign ($ € £ ¥) before
# the digits or after them (not both), digits with optional well-formed thousands commas
# ("1,234,567"), an optional fraction, an optional exponent ("1e3"). Anything else
# ("12%", "1,2", "abc", "0x10", "inf") does not convert; neither does a number outside
# double precision's range (overflow, or underflow to zero).
_WS = " \t\n\r\f\v"
_CURRENCY = "$€£¥"
NUMBER_RE = (
    r"^([+-]?)[" + _CURRENCY + r"]?"
    r"((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+)"
    r"([eE][+-]?[0-9]+)?"
    r"(?:[ ]?[" + _CURRENCY + r"])?$"
)
_BOTH_CURRENCIES_RE = r"^[+-]?[" + _CURRENCY + r"].*[" + _CURRENCY + r"]$"


def parse_number_text(text: str) -> float | None:
    """The reference text → number rule (what the SQL of :func:`to_number` computes).

    >>> [parse_number_text(s) for s in ("12", " 3.5 ", "-4", "1,234.5", "1e3", "$12", "12 €")]
    [12.0, 3.5, -4.0, 1234.5, 1000.0, 12.0, 12.0]
    >>> [parse_number_text(s) for s in ("abc", "12%", "1,2", "", "$12€", "1e999")]
    [None, None, None, None, None, None]
    """
    t = text.strip(_WS)
    m = re.fullmatch(NUMBER_RE[1:-1], t)
    if m is None or re.fullmatch(_BOTH_CURRENCIES_RE[1:-1], t, flags=re.DOTALL):
        return None
    literal = m.group(1) + m.group(2).replace(",", "") + (m.group(3) or "")
    value = float(literal)
    if math.isinf(value) or (value == 0 and Decimal(literal) != 0):
        return None  # PostgreSQL refuses what overflows or underflows to zero
    return value


# --------------------------------------------------------------------------- text → date
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_CLOCK = r"[0-9]{1,2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?"
_ZONE = r"(?:[zZ]|[+-][0-9]{2}(?::?[0-9]{2})?)"
_AMPM = r"(?: ?[aApP][mM])?"
# (pattern, replacement giving text PostgreSQL reads unambiguously, whether UTC is added)
DATE_FORMATS: tuple[tuple[str, str, bool], ...] = (
    # ISO-8601: 2024-03-05, 2024-03-05 14:30, 2024-03-05T14:30:00.5Z, …+02:00
    (r"^([0-9]{4}-[0-9]{1,2}-[0-9]{1,2})$", r"\1", True),
    (r"^([0-9]{4}-[0-9]{1,2}-[0-9]{1,2})[Tt ](" + _CLOCK + r")$", r"\1 \2", True),
    (r"^([0-9]{4}-[0-9]{1,2}-[0-9]{1,2})[Tt ](" + _CLOCK + r") ?(" + _ZONE + r")$", r"\1 \2\3", False),
    # 2024/03/05 [14:30]
    (r"^([0-9]{4})/([0-9]{1,2})/([0-9]{1,2})((?: " + _CLOCK + _AMPM + r")?)$", r"\1-\2-\3\4", True),
    # US, month first: 03/05/2024 [2:30 PM] is 5 March
    (r"^([0-9]{1,2})/([0-9]{1,2})/([0-9]{4})((?: " + _CLOCK + _AMPM + r")?)$", r"\3-\1-\2\4", True),
    # dotted, day first: 05.03.2024 [14:30] is 5 March
    (r"^([0-9]{1,2})\.([0-9]{1,2})\.([0-9]{4})((?: " + _CLOCK + r")?)$", r"\3-\2-\1\4", True),
    # 5 March 2024, 5th Mar 2024 [14:30]
    (r"^([0-9]{1,2})(?:st|nd|rd|th)? (" + _MONTH + r")\.?,? ([0-9]{4})(?:,? (" + _CLOCK + _AMPM + r"))?$",
     r"\1 \2 \3 \4", True),
    # March 5, 2024, Mar 5th 2024 [2:30 pm]
    (r"^(" + _MONTH + r")\.? ([0-9]{1,2})(?:st|nd|rd|th)?,? ([0-9]{4})(?:,? (" + _CLOCK + _AMPM + r"))?$",
     r"\2 \1 \3 \4", True),
)

# --------------------------------------------------------------------------- text → checkbox
TRUE_WORDS = ("true", "yes", "y", "1", "on", "checked")
FALSE_WORDS = ("false", "no", "n", "0", "off", "unchecked")

_URL_RE = r"^https?://[^\s]+$"


def _lit(value: object) -> sql.Composable:
    return sql.Literal(value)


def helper_functions(file_base_url: str = "") -> list[sql.Composable]:
    """Statements creating the session-temporary helper functions every plan may call."""
    date_cases = sql.SQL(" ").join(
        sql.SQL("WHEN s ~* {p} THEN regexp_replace(s, {p}, {r}, 'i') || {z}").format(
            p=_lit(p), r=_lit(r), z=_lit(" +00" if utc else "")
        )
        for p, r, utc in DATE_FORMATS
    )
    ws = _lit(_WS)
    fns = [
        # text → number (see parse_number_text). One SQL expression, so PostgreSQL inlines it
        # into the ALTER: once the pattern matched, dropping commas, currency signs and the
        # space before a trailing one leaves a literal float8 reads.
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_to_number(t text) RETURNS double precision"
            " LANGUAGE sql STABLE AS $f$ SELECT CASE WHEN btrim(t, {ws}) ~ {re} AND btrim(t, {ws}) !~ {both}"
            " AND pg_input_is_valid(translate(btrim(t, {ws}), {drop}, ''), 'double precision')"
            " THEN translate(btrim(t, {ws}), {drop}, '')::double precision END $f$"
        ).format(re=_lit(NUMBER_RE), both=_lit(_BOTH_CURRENCIES_RE), ws=ws, drop=_lit(", " + _CURRENCY)),
        # text → date: the first format that matches, rewritten as text PostgreSQL reads
        # whatever its DateStyle, then read if it names a real instant
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_to_date(t text) RETURNS timestamptz"
            " LANGUAGE plpgsql STABLE AS $f$ DECLARE s text := regexp_replace(btrim(t, {ws}), '\s+', ' ', 'g');"
            " d text; BEGIN d := CASE {cases} END;"
            " RETURN CASE WHEN d IS NOT NULL AND pg_input_is_valid(d, 'timestamptz') THEN d::timestamptz END; END $f$"
        ).format(cases=date_cases, ws=ws),
        # text → checkbox
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_to_checkbox(t text) RETURNS boolean"
            " LANGUAGE sql IMMUTABLE AS $f$ SELECT CASE WHEN lower(btrim(t, {ws})) = ANY({yes}) THEN true"
            " WHEN lower(btrim(t, {ws})) = ANY({no}) THEN false END $f$"
        ).format(ws=ws, yes=_lit(list(TRUE_WORDS)), no=_lit(list(FALSE_WORDS))),
        # text → file: URLs separated by commas or whitespace, every one an http(s) URL
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_to_files(t text) RETURNS jsonb"
            " LANGUAGE sql IMMUTABLE AS $f$ SELECT CASE WHEN count(*) = 0 OR count(*) > {max}"
            " OR bool_or(p !~* {url}) THEN NULL ELSE jsonb_agg(jsonb_build_object('url', p) ORDER BY n) END"
            " FROM regexp_split_to_table(btrim(t, {ws}), '[\\s,]+') WITH ORDINALITY AS x(p, n) WHERE p <> '' $f$"
        ).format(ws=ws, url=_lit(_URL_RE), max=_lit(MAX_FILES)),
        # text → labels of a multi select: comma-separated, trimmed, blanks dropped, deduplicated
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_split(t text) RETURNS text[]"
            " LANGUAGE sql IMMUTABLE AS $f$ SELECT array_agg(l ORDER BY n) FROM (SELECT l, min(n) AS n"
            " FROM (SELECT btrim(p, {ws}) AS l, n FROM unnest(string_to_array(t, ',')) WITH ORDINALITY AS x(p, n)) y"
            " WHERE l <> '' GROUP BY l) z $f$"
        ).format(ws=ws),
        # labels → option ids through a {label or id: id} map; NULL when none remains
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_map(a text[], m jsonb) RETURNS text[]"
            " LANGUAGE sql IMMUTABLE AS $f$ SELECT array_agg(i ORDER BY n) FROM (SELECT m ->> l AS i, min(n) AS n"
            " FROM unnest(a) WITH ORDINALITY AS x(l, n) WHERE m ? l GROUP BY 1) y $f$"
        ),
        # option ids → labels joined with ", " (an id no longer an option shows as itself)
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_labels(a text[], m jsonb) RETURNS text"
            " LANGUAGE sql IMMUTABLE AS $f$ SELECT NULLIF(string_agg(coalesce(m ->> i, i), ', ' ORDER BY n), '')"
            " FROM unnest(a) WITH ORDINALITY AS x(i, n) $f$"
        ),
        # a computed column's JSON as text: strings as themselves, lists joined with ", "
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_json_text(v jsonb) RETURNS text"
            " LANGUAGE sql IMMUTABLE AS $f$ SELECT CASE jsonb_typeof(v) WHEN 'null' THEN NULL"
            " WHEN 'string' THEN v #>> '{}'"
            " WHEN 'array' THEN (SELECT NULLIF(string_agg(CASE jsonb_typeof(e) WHEN 'string' THEN e #>> '{}'"
            " ELSE e::text END, ', ' ORDER BY n), '') FROM jsonb_array_elements(v) WITH ORDINALITY AS x(e, n)"
            " WHERE jsonb_typeof(e) <> 'null')"
            " ELSE v::text END $f$"
        ),
        # percent-encoding as Python's urllib.parse.quote (safe: letters, digits, _.-~ and `safe`)
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_quote(s text, safe text) RETURNS text"
            " LANGUAGE sql IMMUTABLE AS $f$ SELECT string_agg(CASE WHEN c ~ '^[A-Za-z0-9_.~-]$'"
            " OR strpos(safe, c) > 0 THEN c"
            " ELSE regexp_replace(upper(encode(convert_to(c, 'UTF8'), 'hex')), '(..)', '%\\1', 'g') END, ''"
            " ORDER BY n) FROM regexp_split_to_table(s, '') WITH ORDINALITY AS x(c, n) $f$"
        ),
        # file references → their URLs joined with ", " (as storage.values.file_url, unsigned)
        sql.SQL(
            "CREATE OR REPLACE FUNCTION pg_temp.wds_file_text(v jsonb) RETURNS text"
            " LANGUAGE sql IMMUTABLE AS $f$ SELECT NULLIF(string_agg(CASE"
            " WHEN e ? 'url' THEN e ->> 'url'"
            " WHEN e ? 'bucket_id' AND e ? 'path' THEN {base} || '/storage/v1/object/'"
            " || CASE WHEN coalesce(e ->> 'public', 'false') = 'true' THEN 'public/' ELSE '' END"
            " || (e ->> 'bucket_id') || '/' || pg_temp.wds_quote(e ->> 'path', '/')"
            " WHEN e ? 'bucket' AND e ? 'path' THEN {base} || '/storage/v1/object/'"
            " || pg_temp.wds_quote(e ->> 'bucket', '') || '/' || pg_temp.wds_quote(e ->> 'path', '/')"
            " END, ', ' ORDER BY n), '')"
            " FROM jsonb_array_elements(CASE jsonb_typeof(v) WHEN 'array' THEN v ELSE '[]' END)"
            " WITH ORDINALITY AS x(e, n) $f$"
        ).format(base=_lit(file_base_url.rstrip("/"))),
    ]
    return fns


def relation_function(target: sql.Composable, label: sql.Composable | None) -> sql.Composable:
    """``pg_temp.wds_to_record(text)``: the id of a record of ``target`` the text names —
    its id (digits), else the one record whose text label column equals it."""
    by_label = (
        sql.SQL(" ELSE (SELECT min(id) FROM {t} WHERE {l} = s HAVING count(*) = 1)").format(t=target, l=label)
        if label is not None
        else sql.SQL("")
    )
    return sql.SQL(
        "CREATE OR REPLACE FUNCTION pg_temp.wds_to_record(t text) RETURNS bigint"
        " LANGUAGE sql STABLE AS $f$ SELECT CASE WHEN s ~ '^[0-9]{{1,18}}$'"
        " AND EXISTS (SELECT 1 FROM {t} WHERE id = s::bigint) THEN s::bigint{by_label} END"
        " FROM (SELECT btrim(t, {ws}) AS s) a $f$"
    ).format(t=target, by_label=by_label, ws=_lit(_WS))


# --------------------------------------------------------------------------- the matrix


class Route(Enum):
    """How a value of one type becomes a value of another."""

    DIRECT = "direct"  # a dedicated expression (e.g. checkbox → number is 1/0)
    TEXT = "text"  # through the value's text form, then the text rule of the new type
    NONE = "none"  # nothing converts: every non-blank value is a loss


def route(old: ColumnType, new: ColumnType) -> Route:
    """The conversion route of a type change (the table of docs/type-conversions.md)."""
    if new.computed:
        return Route.NONE
    if old is new:
        return Route.DIRECT
    if new is T.TEXT or old is T.TEXT or old.computed:
        return Route.TEXT
    direct = {
        (T.NUMBER, T.DATE), (T.DATE, T.NUMBER), (T.NUMBER, T.CHECKBOX), (T.CHECKBOX, T.NUMBER),
        (T.RELATION, T.NUMBER), (T.SINGLE_SELECT, T.MULTI_SELECT), (T.MULTI_SELECT, T.SINGLE_SELECT),
    }
    if (old, new) in direct:
        return Route.DIRECT
    none = {
        (T.DATE, T.CHECKBOX), (T.DATE, T.RELATION), (T.DATE, T.FILE),
        (T.CHECKBOX, T.DATE), (T.CHECKBOX, T.RELATION), (T.CHECKBOX, T.FILE),
        (T.RELATION, T.DATE), (T.RELATION, T.CHECKBOX), (T.RELATION, T.FILE),
        (T.NUMBER, T.FILE), (T.FILE, T.NUMBER), (T.FILE, T.DATE), (T.FILE, T.CHECKBOX), (T.FILE, T.RELATION),
        (T.FILE, T.SINGLE_SELECT), (T.FILE, T.MULTI_SELECT),
    }
    return Route.NONE if (old, new) in none else Route.TEXT


def _option_map(options: tuple[Option, ...], *, to_label: bool) -> str:
    if to_label:
        return json.dumps({o.id: o.label for o in options})
    mapping = {o.label: o.id for o in options}
    mapping.update({o.id: o.id for o in options})  # ids win over labels, as when writing
    return json.dumps(mapping)


def text_form(old: ColumnMeta, v: sql.Composable) -> sql.Composable:
    """The text a stored value of ``old`` reads as (also its value after a change to text)."""
    t = old.type
    if old.computed:
        return sql.SQL("pg_temp.wds_json_text({})").format(v)
    if t is T.TEXT:
        return v
    if t is T.NUMBER:  # integral numbers without ".0", as text cells show written numbers
        return sql.SQL(
            "CASE WHEN {v} = trunc({v}) AND abs({v}) < 9007199254740992 THEN {v}::bigint::text ELSE {v}::text END"
        ).format(v=v)
    if t is T.DATE:  # ISO-8601 in UTC; an instant at midnight UTC reads as its date
        return sql.SQL(
            "CASE WHEN {v} = date_trunc('day', {v}, 'UTC') THEN to_char({v} AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
            " ELSE (to_jsonb({v} AT TIME ZONE 'UTC') #>> '{{}}') || '+00:00' END"
        ).format(v=v)
    if t is T.CHECKBOX:
        return sql.SQL("CASE {v} WHEN true THEN 'true' WHEN false THEN 'false' END").format(v=v)
    if t is T.SINGLE_SELECT:
        return sql.SQL("coalesce({m}::jsonb ->> {v}, {v})").format(m=_lit(_option_map(old.options, to_label=True)), v=v)
    if t is T.MULTI_SELECT:
        return sql.SQL("pg_temp.wds_labels({v}, {m}::jsonb)").format(m=_lit(_option_map(old.options, to_label=True)), v=v)
    if t is T.RELATION:
        return sql.SQL("{}::text").format(v)
    if t is T.FILE:
        return sql.SQL("pg_temp.wds_file_text({})").format(v)
    raise AssertionError(t)


def blank(old: ColumnMeta, v: sql.Composable) -> sql.Composable:
    """Whether a non-NULL stored value is empty: its conversion to NULL loses nothing."""
    if old.computed:
        return sql.SQL("btrim(coalesce(pg_temp.wds_json_text({}), ''), {}) = ''").format(v, _lit(_WS))
    if old.type is T.TEXT:
        return sql.SQL("btrim({}, {}) = ''").format(v, _lit(_WS))
    if old.type is T.MULTI_SELECT:
        return sql.SQL("cardinality({}) = 0").format(v)
    if old.type is T.FILE:
        return sql.SQL("pg_temp.wds_file_text({}) IS NULL").format(v)
    return sql.SQL("false")


def label_query(old: ColumnMeta, new: ColumnMeta, target: sql.Composable) -> sql.Composable | None:
    """For a change to a select type through text: the labels the values become, each once,
    in order of first appearance (``label``); ``None`` when no option is to be found."""
    if new.type not in (T.SINGLE_SELECT, T.MULTI_SELECT) or route(old.type, new.type) is not Route.TEXT:
        return None
    v = sql.Identifier(old.physical)
    tf = text_form(old, v)
    if new.type is T.SINGLE_SELECT:
        labels = sql.SQL("ARRAY[btrim({}, {})]").format(tf, _lit(_WS))
    else:
        labels = sql.SQL("pg_temp.wds_split({})").format(tf)
    # first appearance: the lowest record id, then the place in that record's value (two
    # labels first seen in one record keep their order there, not an arbitrary one)
    return sql.SQL(
        "SELECT label FROM (SELECT label, min(ARRAY[r.id, u.n::bigint]) AS first FROM {t} r,"
        " unnest({labels}) WITH ORDINALITY AS u(label, n)"
        " WHERE {v} IS NOT NULL AND label <> '' GROUP BY label) x ORDER BY first"
    ).format(t=target, labels=labels, v=v)


@dataclass(frozen=True)
class Plan:
    """How the values of one column convert: ``using`` (an expression over the old physical
    column giving the new storage type, NULL where a value does not convert) and ``blank``."""

    route: Route
    using: sql.Composable
    blank: sql.Composable
    needs_record_function: bool = False


def plan(old: ColumnMeta, new: ColumnMeta) -> Plan:
    """The conversion of ``old``'s values into ``new``'s type (``new`` with every option its
    values need: see :func:`label_query`)."""
    v = sql.Identifier(old.physical)
    r = route(old.type, new.type)
    b = blank(old, v)
    pg_new = sql.SQL(_pg_type(new.type))
    if r is Route.NONE:
        return Plan(r, sql.SQL("NULL::{}").format(pg_new), b)
    if r is Route.DIRECT:
        return Plan(r, _direct(old, new, v), b)
    tf = text_form(old, v)
    t = new.type
    if t is T.TEXT:
        using: sql.Composable = sql.SQL("NULLIF({}, '')").format(tf) if old.type is not T.TEXT else tf
    elif t is T.NUMBER:
        using = sql.SQL("pg_temp.wds_to_number({})").format(tf)
    elif t is T.DATE:
        using = sql.SQL("pg_temp.wds_to_date({})").format(tf)
    elif t is T.CHECKBOX:
        using = sql.SQL("pg_temp.wds_to_checkbox({})").format(tf)
    elif t is T.SINGLE_SELECT:
        using = sql.SQL("({}::jsonb ->> btrim({}, {}))").format(
            _lit(_option_map(new.options, to_label=False)), tf, _lit(_WS))
    elif t is T.MULTI_SELECT:
        using = sql.SQL("pg_temp.wds_map(pg_temp.wds_split({}), {}::jsonb)").format(
            tf, _lit(_option_map(new.options, to_label=False)))
    elif t is T.RELATION:
        return Plan(r, sql.SQL("pg_temp.wds_to_record({})").format(tf), b, needs_record_function=True)
    elif t is T.FILE:
        using = sql.SQL("pg_temp.wds_to_files({})").format(tf)
    else:  # pragma: no cover - every data type is handled above
        raise AssertionError(t)
    return Plan(r, using, b)


def _pg_type(t: ColumnType) -> str:
    from storage.schema import COMPUTED_PG_TYPE, PG_TYPES

    return COMPUTED_PG_TYPE if t.computed else PG_TYPES[t]


def _direct(old: ColumnMeta, new: ColumnMeta, v: sql.Composable) -> sql.Composable:
    pair = (old.type, new.type)
    ids = _lit([o.id for o in new.options])
    if pair == (T.NUMBER, T.DATE):  # Unix epoch seconds, within timestamptz's range
        return sql.SQL("CASE WHEN {v} BETWEEN -210866803200 AND 9224318015999 THEN to_timestamp({v}) END").format(v=v)
    if pair == (T.DATE, T.NUMBER):
        return sql.SQL("extract(epoch FROM {})::double precision").format(v)
    if pair == (T.NUMBER, T.CHECKBOX):
        return sql.SQL("CASE {} WHEN 1 THEN true WHEN 0 THEN false END").format(v)
    if pair == (T.CHECKBOX, T.NUMBER):
        return sql.SQL("CASE {} WHEN true THEN 1 WHEN false THEN 0 END::double precision").format(v)
    if pair == (T.RELATION, T.NUMBER):
        return sql.SQL("{}::double precision").format(v)
    if pair == (T.SINGLE_SELECT, T.MULTI_SELECT):
        return sql.SQL("CASE WHEN {v} = ANY({ids}::text[]) THEN ARRAY[{v}] END").format(v=v, ids=ids)
    if pair == (T.MULTI_SELECT, T.SINGLE_SELECT):
        return sql.SQL("CASE WHEN cardinality({v}) = 1 AND {v}[1] = ANY({ids}::text[]) THEN {v}[1] END").format(
            v=v, ids=ids)
    if old.type is new.type:
        if old.type is T.RELATION:  # another related table: its ids name other records
            return sql.SQL("NULL::bigint")
        return v
    raise AssertionError(pair)  # pragma: no cover


def loss_query(target: sql.Composable, old: ColumnMeta, p: Plan) -> sql.Composable:
    """One scan: how many non-NULL values convert (``converted``) and how many are lost."""
    v = sql.Identifier(old.physical)
    return sql.SQL(
        "SELECT count(*) FILTER (WHERE c IS NOT NULL) AS converted,"
        " count(*) FILTER (WHERE c IS NULL AND NOT b) AS lost"
        " FROM (SELECT {using} AS c, {blank} AS b FROM {t} WHERE {v} IS NOT NULL) x"
    ).format(using=p.using, blank=p.blank, t=target, v=v)


def lost_ids_query(target: sql.Composable, old: ColumnMeta, p: Plan, limit: int = 10) -> sql.Composable:
    """The first ``limit`` record ids whose value would be lost."""
    v = sql.Identifier(old.physical)
    return sql.SQL(
        "SELECT id FROM {t} WHERE {v} IS NOT NULL AND NOT ({blank}) AND ({using}) IS NULL ORDER BY id LIMIT {n}"
    ).format(t=target, v=v, blank=p.blank, using=p.using, n=_lit(limit))
