"""Regenerate the generated parts of docs/ from the code, so that they stay true.

    .venv/bin/python scripts/gen_docs.py          # rewrite the generated sections
    .venv/bin/python scripts/gen_docs.py --check  # exit 1 when a page is stale or incomplete

Generated sections sit between ``<!-- BEGIN GENERATED: name -->`` and
``<!-- END GENERATED: name -->`` markers; everything outside them is hand-written and
kept as it is.

- ``docs/errors.md`` / ``codes``: every error ``code`` the service can answer with, found by
  scanning ``api/``, ``storage/``, ``activities/`` and ``workflows/`` with :mod:`ast`
  (``code="..."`` keywords, ``code = "..."`` class attributes of :class:`ServiceError`
  subclasses, ``{"code": "..."}`` literals, ``error_response(status, msg, "CODE")``, the
  ``PLAN_LIMIT_<KIND>`` kinds of :data:`storage.quotas.LIMIT_FIELDS`). The HTTP status
  comes from the class raised (or ``status=``); "when" and the extra body keys come from
  :data:`CODE_NOTES` below — a code found in the source without a note is printed and
  fails ``--check`` (and ``tests/test_docs.py``).
- ``docs/formulas.md`` / ``operators``, ``functions``, ``error-values``: the function
  catalogue (:data:`storage.formula.FUNCTIONS`), each with an example from
  :data:`FUNCTION_EXAMPLES` whose result is computed here by the real evaluator.
- ``docs/api.md`` / ``endpoints``, ``plans``: every operation of ``/openapi.json`` (built
  in-process with :func:`api.app.create_app`; no database is contacted) and the plan
  figures of :mod:`storage.plans`.

Run it from the repository root with the project's Python (it imports ``api`` and
``storage``).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOCS = ROOT / "docs"
SCANNED = ("api", "storage", "activities", "workflows")
CODE_RE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|^[A-Z]{4,}$")
# functions taking the code as a positional argument: name → index
POSITIONAL_CODE = {"error_response": (2, None), "_refuse": (2, "RateLimited")}
# classes whose code is computed at run time (rendered from their own source below)
DYNAMIC_CODE_CLASSES = {"PlanLimit"}
PLACEHOLDER = "**undocumented**"
# The realtime socket sends its errors as {"type": "error", code, error} messages, which carry
# no HTTP status; the ServiceError it builds there has the default 400, which is not seen.
HTTP_OVERRIDES = {"UNAUTHORIZED": "401"}

# --------------------------------------------------------------------------- error codes
# code → (when it happens, extra body keys). Hand-written; the generator says which codes
# found in the source have no entry. Entries for codes not (yet) in the source are kept
# but not rendered, so a branch that adds one of them finds its description waiting.
CODE_NOTES: dict[str, tuple[str, str]] = {
    # 400: the request is wrong
    "VALIDATION_ERROR": ("The request is malformed: a body that is not JSON or misses a field, a wrong type, an unknown body key, an invalid config (a key its kind does not take, a delay without `seconds`). Also the fallback of every `ServiceError` that names no code. In MCP tool results and batch rows it marks the one item that is wrong.", ""),
    "INVALID_VALUE": ("A field value does not fit its column type (a number column given text, a date that does not parse, a relation to a missing record, a value PostgreSQL cannot store such as `\\u0000`), or a malformed filter value.", ""),
    "INVALID_OPTION": ("A `single_select`/`multi_select` value that is not one of the column's options (by id or label).", ""),
    "REQUIRED_FIELD": ("A required column is missing on create or cleared on update.", ""),
    "READ_ONLY_COLUMN": ("A write sets a computed column (formula, json_parser, http_request, …); the server writes those.", ""),
    "UNKNOWN_COLUMN": ("A filter, order, select, view, formula, template or config names a column the table does not have. `column` names it when known.", "column"),
    "UNKNOWN_OPERATOR": ("A filter operator outside `eq neq gt gte lt lte like ilike in cs is` (optionally `not.`).", ""),
    "TOO_MANY_VALUES": ("More than 200 values in an `in`/`cs` filter or an SQL `IN (...)` list.", ""),
    "TOO_MANY_CONDITIONS": ("More than 200 filter conditions in one query's filters, those inside `or`/`and` groups included: a REST list's query string, MCP `list_records` `filters`, a view's `config.filters`, run-actions, schedules and write-by-filter `filters`, a realtime subscription's `filter`. Refused before any condition is read ([query.md](query.md#errors-400-unless-said)).", ""),
    "RESULT_TOO_LARGE": ("An answer past its byte cap, 16 MiB of JSON, refused inside PostgreSQL before it is built (`max_bytes` is the cap). A page of records (REST list, MCP `list_records`, views, semantic search): `fit` is how many of its first records fit; ask again with that `limit` or fewer fields ([query.md](query.md#paging)). `POST /sql` or the MCP `sql_query` tool (`WDS_SQL_MAX_ANSWER_BYTES`): refused at the row that passes it; select fewer or shorter columns or fewer rows, and page with `LIMIT`/`OFFSET` ([sql.md](sql.md#the-answers-size)).", "max_bytes, fit"),
    "LIMIT_TOO_LARGE": ("`limit` above the page maximum (1,000 on REST, SQL and MCP; semantic search has its own maximum).", ""),
    "BATCH_TOO_LARGE": ("A batch of more than 500 rows, or an MCP bulk update matching more records than it may change (500), or matching records holding more than 64 MiB that its computed columns or embeddings would read back at once.", ""),
    "INVALID_SQL": ("`POST /sql`: not a single read-only `SELECT`, a syntax error, an unknown table or column, a construct outside the supported subset.", ""),
    "INVALID_RESULT_TYPE": ("A computed column's `config.result_type` is not one of `number`, `text`, `date`, `boolean`, `json`, or is given to a data column ([formulas.md](formulas.md#result-types)).", ""),
    "INVALID_FORMULA": ("A formula (Excel-like or JavaScript) or template that does not parse, calls an unknown function, has a wrong argument count, or is too long/deep.", ""),
    "CIRCULAR_REFERENCE": ("Computed columns would depend on each other in a cycle. `path` lists the column names around the cycle.", "path"),
    "WEAK_PASSWORD": ("App-user sign-up: a password too short, too long, too common, or equal to the e-mail address.", ""),
    "CHANNEL_TYPE_MISMATCH": ("Agent webhook: the channel token belongs to another channel type than `?type=`.", ""),
    # 401
    "UNAUTHORIZED": ("No bearer token, an unknown or revoked token, a wrong admin key, an unknown chat channel token (realtime: sent as an `error` message before the socket closes).", ""),
    "INVALID_CREDENTIALS": ("App-user sign-in with a wrong e-mail or password.", ""),
    "WEBHOOK_SECRET_INVALID": ("A Telegram webhook update without the channel's registered `X-Telegram-Bot-Api-Secret-Token` (none registered, none sent, or another); nothing is processed.", ""),
    "TOKEN_EXPIRED": ("An app-user access token past its expiry; refresh the session with `POST /functions/v1/auth/token`.", ""),
    # 402
    "PLAN_LIMIT_API_REQUESTS": ("The workspace used its plan's API requests for this month.", "upgrade"),
    "PLAN_LIMIT_AUTOMATION_RUNS": ("The month's automation runs (pipeline runs) are used up; the write is refused before anything runs, a scheduled firing is skipped.", "upgrade"),
    "PLAN_LIMIT_TABLES": ("One more table does not fit the plan.", "upgrade"),
    "PLAN_LIMIT_STORAGE": ("An upload would exceed the plan's storage.", "upgrade"),
    "PLAN_LIMIT_BUILDS": ("The month's builds (publishing views/forms) are used up.", "upgrade"),
    "PLAN_LIMIT_AI_CREDITS": ("The month's AI credits are used up (agent chat, `ai_agent` steps); unless the plan may auto-recharge and the workspace turned it on.", "upgrade"),
    # 403
    "FORBIDDEN": ("The token has no permission for this action on this table (read, create, update, delete), or the endpoint needs the builder token (realtime: an `error` message for the one table).", ""),
    "WRONG_PROTOCOL": ("A `user_mcp` token used on REST, SQL, storage or realtime: it works on the MCP server only.", ""),
    "PLAN_READ_ONLY": ("The workspace is read-only (set by the operator, e.g. an unpaid plan): every write is refused, reads work.", "upgrade"),
    "INVALID_SIGNATURE": ("A signed storage URL whose signature is wrong or expired.", ""),
    # 404
    "NOT_FOUND": ("No such table, column, record, view, run, schedule, agent, channel, bucket, object, share id or endpoint — or it belongs to another workspace.", ""),
    "UNKNOWN_TOOL": ("A tool name the caller does not have: an agent's tool call in chat (in its tool result), or the MCP catalogue lookup (MCP clients see the JSON-RPC error `-32602`).", ""),
    # 405, 408, 409, 413, 415
    "METHOD_NOT_ALLOWED": ("The path exists but not with this HTTP method.", ""),
    "SQL_TIMEOUT": ("`POST /sql` ran past the plan's SQL timeout (5–30 s).", ""),
    "CONFLICT": ("A name already taken (table, column, bucket, credential, profile, app-user e-mail), an object path that exists (without `x-upsert`; of concurrent uploads of a new path exactly one wins), a non-empty bucket deleted without `force`, an `Idempotency-Key` reused with a different request or still running, or a request whose transaction the database ended in favour of a concurrent one (a deadlock or a serialization failure, SQLSTATE class 40: `Retry-After: 1`, nothing was written by it; retry).", ""),
    "SCHEMA_CHANGED": ("A schema change (a column or table deleted, a column converted) committed while the request ran, after it had read the table's shape: its statement named what was no longer there and wrote nothing. Retry the request; it runs against the new shape. Every door answers it alike (REST, SQL, MCP tools).", ""),
    "COLUMN_IN_USE": ("Deleting a column (or a table) that other things use — computed columns, views, relation labels, semantic search, schedules, record steps of other tables. `dependents` lists `[{kind, id, name, table_id}]` (`kind`: `column`, `view`, `semantic_search`, `schedule`); repeat with `?force=true` to delete anyway.", "dependents"),
    "SIGNUP_FIELD_NOT_ALLOWED": ("App-user sign-up sent a profile field the workspace does not mark as self-service (`signup_fields`, none by default; role and permission columns never).", ""),
    "REQUEST_TIMEOUT": ("The client stopped sending its request head or body for longer than allowed (`WDS_BODY_TIMEOUT_S`, 30 s; the head 10 s).", ""),
    "REPEATED_PARAMETER": ("A single-valued query parameter (`limit`, `offset`, `select`, `expand`, `view`, `count`, `order`/`sort`, a write's `run_pipeline`) given twice; `order` and `sort` together count as a repeat.", ""),
    "UNKNOWN_PARAMETER": ("A parameter a door cannot honour: anything but `select`/`expand` on GET by id, `run_pipeline` on a read, anything but `run_pipeline` on a record create or update (and any parameter on a record delete or a batch), unknown keys in a realtime subscription, an argument an MCP tool does not take.", ""),
    "PAYLOAD_TOO_LARGE": ("A body, upload, chat message, SQL text or search query larger than allowed.", ""),
    "UNSUPPORTED_MEDIA_TYPE": ("A body in a media type the endpoint does not take: REST and SQL take `application/json` (or another `+json` type) only, so a `text/plain`, XML or form body is refused before anything runs (an empty body is let through). Also the framework's own 415, in the `{error, code}` shape.", ""),
    "CHAT_SESSION_INVALID": ("Agent web chat: a `session_id` sent without the `session_key` issued with it (or with a wrong one, or an id the server never issued). The same answer whether or not the session exists; omit `session_id` to start a new session.", ""),
    # 429
    "PLAN_RATE_LIMIT_API": ("The workspace's requests per minute (by plan) are used up; `Retry-After` says when to retry.", "upgrade"),
    "TOKEN_RATE_LIMIT": ("One token made more than 3,000 requests in 60 seconds (every plan); `Retry-After` says when to retry.", ""),
    "AUTH_RATE_LIMIT": ("Too many failed app-user sign-ins recently; `Retry-After` says when to retry.", ""),
    "CHAT_RATE_LIMIT": ("Agent chat: more messages per minute than one session (default 30) or one channel (default 300) may send; `Retry-After` says when to retry.", ""),
    # 500, 501, 503
    "INTERNAL": ("An unexpected failure on our side (logged with its traceback; no detail is returned). Also used in MCP tool results and chat `error` events.", ""),
    "CREDENTIAL_UNREADABLE": ("A stored credential cannot be decrypted: it was sealed under another `WDS_SECRET_KEY`. Operator action needed.", ""),
    "NOT_IMPLEMENTED": ("Agent webhook `type=slack` or `type=whatsapp`: not implemented yet.", ""),
    "UNAVAILABLE": ("A service we depend on is not reachable: PostgreSQL, Temporal (pipelines, schedules, runs), the object store, the embeddings or AI provider, the JavaScript engine. Retry shortly. `/healthz` answers it with `problems`.", ""),
    "NOT_CONFIGURED": ("A feature needs server configuration that is missing: `WDS_SECRET_KEY` (credentials, app users, signed URLs), an AI or embeddings provider, a messaging credential, the SDK files; 400 for semantic search on a table without `semantic_search` columns.", ""),
    "AI_PROVIDER_ERROR": ("The AI provider failed or answered something that is not a chat completion (an HTTP"
                          " 200 without choices or that is not JSON included). Agent chat: 503 when nothing was"
                          " answered yet, else an `error` event; a turn with no reply and no tool call stores"
                          " nothing.", ""),
    "CHANNEL_DELIVERY_FAILED": ("Telegram could not be reached or refused the reply.", ""),
    # in-band (inside a 200 body or a message)
    "EVENTS_PURGED": ("Realtime: `since` is older than the retained change events; reload the table, then subscribe again.", "purged_through, table_id"),
    "REPLAY_TRUNCATED": ("Realtime: too many events to replay at once; subscribe again with `since=last_seq`.", "last_seq, table_id"),
    "SUBSCRIPTION_ENDED": ("Realtime: the subscription's filter no longer applies to its table (a column it names"
                           " was deleted, or converted to a type its operator or value does not fit); the"
                           " subscription is gone, the socket stays open: subscribe again with a filter that fits.",
                           "table_id"),
    "TOOL_ROUNDS_EXCEEDED": ("Agent chat: the model kept calling tools past the round limit; the answer stops with an `error` event.", ""),
    # on other branches at the time of writing: rendered once the code uses them
    "LOSSY_CHANGE": ("Changing a column's type, or removing select options, would lose values of some records; `count` and `record_ids` say which; send `allow_loss: true` to change it anyway.", "count, record_ids"),
    "CREDENTIAL_HOSTS_REQUIRED": ("Creating a credential without `hosts`, or with `[]`: a credential is sent only to the hosts it is bound to, so it must name them (docs/security.md). Nothing is stored.", ""),
    "INVALID_HOST_PATTERN": ("A credential's `hosts` is not a list of host patterns, has more than 50, or holds a malformed one (a URL, a path, a bad port, a misplaced wildcard). Nothing is stored.", ""),
    "CREDENTIAL_HOST_MISMATCH": ("A step would send a credential to a URL host outside the credential's `hosts` (checked at column creation for literal URLs, at run time for templated ones and redirects).", ""),
    "DATABASE_LIMIT_EXCEEDED": ("A statement hit one of PostgreSQL's fixed limits (SQLSTATE class 54: a value or list too large to store or compare, too many arguments, a statement too complex). Retrying it unchanged fails the same way; nothing was written by the failed statement.", ""),
    "QUERY_TIMEOUT": ("A statement ran past the database's statement timeout (every request has one).", ""),
    "OFFSET_TOO_DEEP": ("`offset` deeper than 10,000 with an order on anything but `id`: page by cursor (`after=<next>`), narrow the rows, or order by id.", ""),
    "INVALID_CURSOR": ("`after` is not a `next` cursor of this list: garbage, changed, made for another table, order or filter, given with `offset`, or on an order on a multi_select, JSON or file column (page those with `offset`).", ""),
    "WORKSPACE_BUSY": ("The workspace has too many requests or statements running at once in this API process and this one waited too long for its turn; nothing changed, `Retry-After` says when to retry.", ""),
}

# --------------------------------------------------------------------------- formulas
# A sample record and clock for the examples; each result is computed by the evaluator.
SAMPLE_FIELDS: dict[str, Any] = {
    "Name": "Ada Lovelace", "Email": "ada@example.com", "Price": 2.5, "Qty": 4, "Status": "done",
    "Start": "2026-01-05T09:30:00+00:00", "Due": "2026-01-20T00:00:00+00:00",
    "Tags": ["red", "blue", "red"], "Notes": "", "Amount": "$1,234.50",
}
SAMPLE_NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
FUNCTION_EXAMPLES: dict[str, str] = {
    # text
    "CONCAT": 'CONCAT({Name}, " <", {Email}, ">")',
    "CONCATENATE": 'CONCATENATE("#", {Qty})',
    "ENCODE_URL_COMPONENT": 'ENCODE_URL_COMPONENT("a b&c")',
    "FIND": 'FIND("Love", {Name})',
    "LEFT": 'LEFT({Name}, 3)',
    "LEN": 'LEN({Name})',
    "LOWER": 'LOWER({Name})',
    "LPAD": 'LPAD({Qty}, 3, "0")',
    "MID": 'MID({Name}, 5, 4)',
    "REPLACE": 'REPLACE({Name}, 1, 3, "Eva")',
    "REPT": 'REPT("ab", 3)',
    "RIGHT": 'RIGHT({Name}, 8)',
    "RPAD": 'RPAD("x", 3, ".")',
    "SEARCH": 'SEARCH("love", {Name})',
    "SPLIT": 'SPLIT({Email}, "@")',
    "SUBSTITUTE": 'SUBSTITUTE("a-b-c", "-", "+")',
    "T": 'T({Qty})',
    "TRIM": 'TRIM("  padded  ")',
    "UPPER": 'UPPER({Status})',
    # regex
    "REGEX_EXTRACT": 'REGEX_EXTRACT({Email}, "[a-z]+\\\\.[a-z]+$")',
    "REGEX_MATCH": 'REGEX_MATCH({Email}, "@example\\\\.com$")',
    "REGEX_REPLACE": 'REGEX_REPLACE({Name}, "(\\\\w+) (\\\\w+)", "$2, $1")',
    # numeric
    "ABS": 'ABS(-3)',
    "AVERAGE": 'AVERAGE(1, 2, 6)',
    "CEILING": 'CEILING({Price})',
    "COUNT": 'COUNT(1, "a", {Qty})',
    "COUNTA": 'COUNTA({Name}, {Notes}, 0)',
    "COUNTALL": 'COUNTALL({Name}, {Notes}, 0)',
    "EVEN": 'EVEN(3)',
    "EXP": 'ROUND(EXP(1), 4)',
    "FLOOR": 'FLOOR(7, 5)',
    "INT": 'INT(-2.5)',
    "LN": 'ROUND(LN(10), 4)',
    "LOG": 'LOG(8, 2)',
    "LOG10": 'LOG10(1000)',
    "MAX": 'MAX(3, {Qty}, 1)',
    "MIN": 'MIN(3, {Qty}, 1)',
    "MOD": 'MOD(-7, 3)',
    "ODD": 'ODD(2)',
    "POWER": 'POWER(2, 10)',
    "ROUND": 'ROUND(2.345, 2)',
    "ROUNDDOWN": 'ROUNDDOWN(2.99, 1)',
    "ROUNDUP": 'ROUNDUP(2.01, 1)',
    "SIGN": 'SIGN(-4)',
    "SQRT": 'SQRT(16)',
    "SUM": 'SUM({Price}, {Qty}, 1)',
    "VALUE": 'VALUE({Amount})',
    # logical
    "AND": 'AND({Qty} > 1, {Status} = "done")',
    "BLANK": 'IF({Qty} > 10, "big", BLANK())',
    "ERROR": 'IF({Qty} < 0, ERROR("negative"), {Qty})',
    "FALSE": 'FALSE()',
    "IF": 'IF({Status} = "done", {Price} * {Qty}, 0)',
    "IFERROR": 'IFERROR(1 / 0, "n/a")',
    "ISBLANK": 'ISBLANK({Notes})',
    "ISERROR": 'ISERROR(1 / 0)',
    "NOT": 'NOT({Qty} > 10)',
    "OR": 'OR({Status} = "todo", {Qty} > 3)',
    "SWITCH": 'SWITCH({Status}, "todo", 0, "done", 100, 50)',
    "TRUE": 'TRUE()',
    "XOR": 'XOR(TRUE, TRUE, TRUE)',
    # date
    "DATEADD": 'DATEADD({Due}, 2, "weeks")',
    "DATEDIFF": 'DATEDIFF({Due}, {Start}, "days")',
    "DATESTR": 'DATESTR({Start})',
    "DATETIME_DIFF": 'DATETIME_DIFF({Due}, {Start}, "hours")',
    "DATETIME_FORMAT": 'DATETIME_FORMAT({Due}, "LL")',
    "DATETIME_PARSE": 'DATETIME_PARSE("20/01/2026", "DD/MM/YYYY")',
    "DAY": 'DAY({Due})',
    "FROMNOW": 'FROMNOW({Due})',
    "HOUR": 'HOUR({Start})',
    "IS_AFTER": 'IS_AFTER({Due}, {Start})',
    "IS_BEFORE": 'IS_BEFORE({Due}, NOW())',
    "IS_SAME": 'IS_SAME({Start}, {Due}, "month")',
    "MINUTE": 'MINUTE({Start})',
    "MONTH": 'MONTH({Due})',
    "NOW": 'NOW()',
    "SECOND": 'SECOND({Start})',
    "SET_TIMEZONE": 'SET_TIMEZONE({Start}, "Europe/Paris")',
    "TIMESTR": 'TIMESTR({Start})',
    "TODAY": 'TODAY()',
    "TONOW": 'TONOW({Start})',
    "WEEKDAY": 'WEEKDAY({Due})',
    "WEEKNUM": 'WEEKNUM({Due})',
    "WORKDAY": 'WORKDAY({Start}, 5)',
    "WORKDAY_DIFF": 'WORKDAY_DIFF({Start}, {Due})',
    "YEAR": 'YEAR({Due})',
    # array
    "ARRAYCOMPACT": 'ARRAYCOMPACT(SPLIT("a,,b", ","))',
    "ARRAYFLATTEN": 'ARRAYFLATTEN({Tags})',
    "ARRAYJOIN": 'ARRAYJOIN({Tags}, " | ")',
    "ARRAYSLICE": 'ARRAYSLICE({Tags}, 2)',
    "ARRAYUNIQUE": 'ARRAYUNIQUE({Tags})',
}
# the operator table of docs/formulas.md: (what, example)
OPERATOR_EXAMPLES: list[tuple[str, str]] = [
    ("`^` power, left-associative like every operator", "2 ^ 3 ^ 2"),
    ("unary `-` binds tighter than `^`", "-2 ^ 2"),
    ("`*` `/` `%` multiply, divide, remainder", "7 % 3 * 2"),
    ("`+` `-` add, subtract", "{Price} * {Qty} - 1"),
    ("`&` joins text", '{Name} & " (" & {Status} & ")"'),
    ("`&` joins a list as `a, b`", '"tags: " & {Tags}'),
    ("`=` `!=` `<>` `<` `>` `<=` `>=` compare", '{Qty} >= 4'),
    ("text comparison is case-sensitive", '"done" = "DONE"'),
    ("dates compare as instants", "{Due} > {Start}"),
    ("division by zero is an error value", "1 / 0"),
    ("a blank field in arithmetic counts as 0", "{Notes} + 1"),
    ("`TRUE`/`FALSE` without parentheses", "IF(TRUE, \"yes\", \"no\")"),
    ("strings take `\"…\"` or `'…'` with JavaScript escapes", "'it\\'s' & \"\\t|\""),
]


@dataclass
class CodeUse:
    code: str
    statuses: set[int] = field(default_factory=set)
    in_band: bool = False  # seen in a {"code": ...} literal: a body field, not an HTTP error
    extras: set[str] = field(default_factory=set)
    in_band_extras: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)


def _py_files() -> Iterator[Path]:
    for top in SCANNED:
        yield from sorted((ROOT / top).rglob("*.py"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _error_classes() -> dict[str, type]:
    """Every ServiceError subclass of our packages, by class name (imports the modules)."""
    from storage.errors import ServiceError

    for path in _py_files():
        name = _module_name(path)
        if name.startswith(("storage.migrations",)) or name.endswith("__main__"):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # a module with optional dependencies: its classes are scanned by ast
            continue
    out: dict[str, type] = {}
    todo = [ServiceError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return out


def _const_str(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE_RE.match(node.value):
        return node.value
    return None


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _dict_keys(node: ast.AST | None) -> set[str]:
    if isinstance(node, ast.IfExp):
        return _dict_keys(node.body) | _dict_keys(node.orelse)
    if isinstance(node, ast.Dict):
        return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return set()


def scan_codes() -> dict[str, CodeUse]:
    """Every error code used in the source, with the HTTP statuses it is answered with."""
    from storage import quotas

    classes = _error_classes()
    uses: dict[str, CodeUse] = {}

    def use(code: str, path: Path) -> CodeUse:
        u = uses.setdefault(code, CodeUse(code))
        u.files.add(str(path.relative_to(ROOT)))
        return u

    for cls in classes.values():
        code = cls.__dict__.get("code")
        if isinstance(code, str):
            u = uses.setdefault(code, CodeUse(code))
            u.statuses.add(int(cls.status))
            u.files.add(cls.__module__.replace(".", "/") + ".py")

    for path in _py_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        # module constants that hold a code (``HOSTS_REQUIRED = "CREDENTIAL_HOSTS_REQUIRED"``,
        # then ``code=HOSTS_REQUIRED``)
        named = {t.id: _const_str(stmt.value) for stmt in tree.body if isinstance(stmt, ast.Assign)
                 for t in stmt.targets if isinstance(t, ast.Name) and _const_str(stmt.value)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                kw = {k.arg: k.value for k in node.keywords if k.arg}
                name = _callee(node)
                code = _const_str(kw.get("code"))
                if code is None and isinstance(kw.get("code"), ast.Name):
                    code = named.get(kw["code"].id)  # type: ignore[union-attr]
                cls = classes.get(name)
                if name in POSITIONAL_CODE:
                    index, cls_name = POSITIONAL_CODE[name]
                    if code is None and len(node.args) > index:
                        code = _const_str(node.args[index])
                    cls = classes.get(cls_name or "")
                if name in DYNAMIC_CODE_CLASSES:
                    continue
                if code is None and cls is not None and "code" not in kw:
                    code = getattr(cls, "code", None)
                if code is None:
                    continue
                u = use(code, path)
                status = kw.get("status")
                if isinstance(status, ast.Constant) and isinstance(status.value, int):
                    u.statuses.add(status.value)
                elif name == "error_response" and node.args and isinstance(node.args[0], ast.Constant):
                    u.statuses.add(int(node.args[0].value))
                elif cls is not None:
                    u.statuses.add(int(cls.status))
                u.extras |= _dict_keys(kw.get("extra"))
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value == "code" and _const_str(v):
                        u = use(_const_str(v), path)  # type: ignore[arg-type]
                        u.in_band = True
                        u.in_band_extras |= _dict_keys(node) - {"error", "code", "type", "status", "problems"}
            elif isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "code" for t in stmt.targets)
                            and _const_str(stmt.value) and node.name not in classes):
                        use(_const_str(stmt.value), path)  # type: ignore[arg-type]
    # api/errors.py: HTTP statuses mapped to codes
    from api import errors as api_errors

    for status, code in api_errors._HTTP_CODES.items():  # framework errors: only codes not seen yet
        if code not in uses:
            uses[code] = CodeUse(code, statuses={status}, files={"api/errors.py"})
        elif code in {c for c, u in uses.items() if not u.statuses}:
            uses[code].statuses.add(status)
    for kind in quotas.LIMIT_FIELDS:
        u = uses.setdefault(f"PLAN_LIMIT_{kind.upper()}", CodeUse(f"PLAN_LIMIT_{kind.upper()}"))
        u.statuses.add(402)
        u.extras.add("upgrade")
    return uses


def render_codes(uses: dict[str, CodeUse]) -> tuple[str, list[str]]:
    """The code table and the codes that have no note."""
    missing = sorted(c for c in uses if c not in CODE_NOTES)
    rows = ["| Code | HTTP | When | Extra body keys |", "|---|---|---|---|"]
    order = sorted(uses.values(), key=lambda u: (min(u.statuses) if u.statuses else 999, u.code))
    for u in order:
        when, extra = CODE_NOTES.get(u.code, (PLACEHOLDER, ""))
        found = u.extras | (u.in_band_extras if not u.statuses else set())
        extras = sorted(set(filter(None, (e.strip("` ") for e in extra.split(",")))) | found)
        http = HTTP_OVERRIDES.get(u.code) or ", ".join(str(s) for s in sorted(u.statuses)) or "—"
        if u.in_band and not u.statuses:
            http = "in body"
        rows.append(f"| `{u.code}` | {http} | {when} | {', '.join(f'`{e}`' for e in extras)} |")
    return "\n".join(rows), missing


# --------------------------------------------------------------------------- formulas


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def evaluate_example(source: str) -> str:
    """The value ``source`` gives on :data:`SAMPLE_FIELDS` (or its error value)."""
    from storage.formula import FormulaError, compile_formula

    try:
        return _show(compile_formula(source).evaluate(SAMPLE_FIELDS, now=SAMPLE_NOW))
    except FormulaError as exc:
        return exc.code


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_operators() -> str:
    rows = ["| Rule | Example | Result |", "|---|---|---|"]
    for what, src in OPERATOR_EXAMPLES:
        rows.append(f"| {what} | `{_cell(src)}` | `{_cell(evaluate_example(src))}` |")
    return "\n".join(rows)


def render_sample() -> str:
    return ("```json\n" + json.dumps(SAMPLE_FIELDS, indent=2, ensure_ascii=False)
            + "\n```\n\n`NOW()` is " + SAMPLE_NOW.isoformat() + " (a "
            + SAMPLE_NOW.strftime("%A") + ").")


def render_functions() -> tuple[str, list[str]]:
    """Every function by category, with its example evaluated; and the functions without one."""
    from storage.formula import CATEGORIES, describe_functions

    titles = {"text": "Text", "regex": "Regular expressions", "numeric": "Numbers",
              "logical": "Logic", "date": "Dates and times", "array": "Lists"}
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for d in describe_functions():
        by_cat.setdefault(d["category"], []).append(d)
    out: list[str] = []
    missing: list[str] = []
    for cat in [*CATEGORIES, *sorted(set(by_cat) - set(CATEGORIES))]:
        items = by_cat.get(cat)
        if not items:
            continue
        out += [f"### {titles.get(cat, cat.title())}", "",
                "| Function | Description | Example | Result |", "|---|---|---|---|"]
        for d in items:
            src = FUNCTION_EXAMPLES.get(d["name"])
            if src is None:
                missing.append(d["name"])
                example, result = PLACEHOLDER, ""
            else:
                example, result = f"`{_cell(src)}`", f"`{_cell(evaluate_example(src))}`"
            out.append(f"| `{_cell(d['signature'])}` | {_cell(d['description'])} | {example} | {result} |")
        out.append("")
    return "\n".join(out).rstrip(), missing


def render_error_values() -> str:
    from storage.formula import ERROR_CODES

    meaning = {
        "#ERROR!": "a generic failure: `ERROR()`, `REGEX_EXTRACT` without a match, a bad regular expression",
        "#VALUE!": "a value of the wrong kind (text where a number or date is needed)",
        "#DIV/0!": "division by zero",
        "#NUM!": "a number out of range (`SQRT(-1)`, `LN(0)`, an overflow)",
        "#REF!": "reserved for a reference to a column that no longer exists (today a column broken by a forced delete shows `status: \"error\"` and a null value instead)",
        "#TIMEOUT!": "a JavaScript formula ran longer than its time limit",
        "#MEMORY!": "a JavaScript formula used more than its memory limit",
    }
    rows = ["| Error value | Means |", "|---|---|"]
    for code in sorted(ERROR_CODES):
        rows.append(f"| `{code}` | {meaning.get(code, PLACEHOLDER)} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- API


def openapi() -> dict[str, Any]:
    """``/openapi.json`` of the app, built in-process (the pool is not opened)."""
    from api.app import create_app
    from service.config import Settings

    app = create_app(Settings(database_url="postgresql://docs@127.0.0.1:1/none"))
    return app.openapi()  # type: ignore[no-any-return]


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(METHOD, path, operation)`` of every documented operation (HEAD twins left out)."""
    out = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method == "head" and "get" in item:
                continue
            out.append((method.upper(), path, op))
    return out


def _schema_type(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        kinds = [_schema_type(s, spec) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(kinds) or "null"
    if schema.get("type") == "array":
        return f"list of {_schema_type(schema.get('items', {}), spec)}"
    if "enum" in schema:
        return " / ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    return str(schema.get("type", "any"))


def _body_fields(op: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    content = (op.get("requestBody") or {}).get("content", {})
    schema = (content.get("application/json") or {}).get("schema")
    if not schema:
        return []
    if "anyOf" in schema:
        schema = next((s for s in schema["anyOf"] if "$ref" in s), schema)
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    if schema.get("type") == "array":
        return [f"JSON body: a list of `{_schema_type(schema.get('items', {}), spec)}`"
                + _fields_of(schema.get("items", {}), spec)]
    props = schema.get("properties", {})
    if not props:
        return []
    required = set(schema.get("required", []))
    parts = []
    for name, prop in props.items():
        desc = prop.get("description", "")
        default = f" (default `{json.dumps(prop['default'])}`)" if "default" in prop and prop["default"] is not None else ""
        parts.append(f"`{name}`{'*' if name in required else ''}: {_schema_type(prop, spec)}{default}"
                     + (f" — {desc}" if desc else ""))
    return ["Body: " + "; ".join(parts)]


def _fields_of(schema: dict[str, Any], spec: dict[str, Any]) -> str:
    if "$ref" not in schema:
        return ""
    target = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    names = list(target.get("properties", {}))
    return f" ({', '.join(f'`{n}`' for n in names)})" if names else ""


def _response(op: dict[str, Any], spec: dict[str, Any]) -> str:
    ok = [c for c in op.get("responses", {}) if c.startswith("2") or c == "304"]
    parts = []
    for code in ok:
        content = op["responses"][code].get("content", {}).get("application/json", {})
        schema = content.get("schema", {})
        shape = _schema_type(schema, spec) if schema.get("$ref") or schema.get("type") == "array" else ""
        parts.append(f"{code}" + (f" `{shape}`{_fields_of(schema if '$ref' in schema else schema.get('items', {}), spec)}"
                                  if shape else ""))
    return ", ".join(parts)


GROUPS: list[tuple[str, str]] = [
    # (title, path prefix); the first matching prefix wins, in this order
    ("Tables", "/functions/v1/rest-api/tables/{table_id}/columns"),
    ("Records: run, compute, run-actions", "/functions/v1/rest-api/tables/{table_id}/records/{record_id}/"),
    ("Records", "/functions/v1/rest-api/tables/{table_id}/records"),
    ("Records: run, compute, run-actions", "/functions/v1/rest-api/tables/{table_id}/run-actions"),
    ("Records: run, compute, run-actions", "/functions/v1/rest-api/runs"),
    ("Semantic search", "/functions/v1/rest-api/tables/{table_id}/search"),
    ("Views", "/functions/v1/rest-api/tables/{table_id}/views"),
    ("Schedules", "/functions/v1/rest-api/tables/{table_id}/schedules"),
    ("Tables", "/functions/v1/rest-api/tables"),
    ("SQL", "/functions/v1/rest-api/sql"),
    ("Schema and usage", "/functions/v1/rest-api/schema"),
    ("Schema and usage", "/functions/v1/rest-api/usage"),
    ("Agents and channels", "/functions/v1/rest-api/agents"),
    ("Special fields (integration catalogue)", "/functions/v1/rest-api/special-fields"),
    ("Admin: credentials", "/functions/v1/admin/workspaces/{workspace_id}/credentials"),
    ("Admin: workspaces, profiles, tokens", "/functions/v1/admin"),
    ("App users (auth)", "/functions/v1/auth"),
    ("Storage: buckets and objects", "/storage/v1"),
    ("Agent chat webhook", "/functions/v1/agent-webhook"),
    ("MCP", "/functions/v1/mcp-server"),
    ("SDK files", "/sdk"),
    ("Public views and forms", "/p/"),
    ("Health", "/healthz"),
]


def group_of(path: str) -> str:
    for title, prefix in GROUPS:
        if path.startswith(prefix):
            assert title in GROUP_ORDER, title
            return title
    return "Other"


GROUP_ORDER = [
    "Tables", "Records", "Records: run, compute, run-actions", "SQL", "Semantic search",
    "Schema and usage", "Views", "Schedules", "Agents and channels",
    "Special fields (integration catalogue)", "Storage: buckets and objects", "App users (auth)",
    "Agent chat webhook", "Public views and forms", "SDK files", "MCP",
    "Admin: workspaces, profiles, tokens", "Admin: credentials", "Health", "Other",
]


def _rst(text: str) -> str:
    """Docstrings write ``code``; markdown wants `code`."""
    return text.replace("``", "`")


def render_endpoints(spec: dict[str, Any]) -> str:
    """Every operation, grouped: an index table, then method, path, what it does, query
    parameters, body and answer of each."""
    groups: dict[str, list[str]] = {}
    index: dict[str, list[str]] = {}
    for method, path, op in operations(spec):
        title = group_of(path)
        summary = _rst((op.get("description") or op.get("summary") or "").strip())
        first = summary.split("\n\n")[0].replace("\n", " ")
        index.setdefault(title, []).append(f"| `{method}` | `{path}` | {_cell(first)} |")
        lines = [f"#### `{method} {path}`", ""]
        if summary:
            lines += [summary, ""]
        params = [p for p in op.get("parameters", []) if p["in"] in ("query", "header")]
        if params:
            lines.append("Parameters: " + "; ".join(
                f"`{p['name']}` ({p['in']}, {_schema_type(p.get('schema', {}), spec)}"
                + (f", default `{json.dumps(p['schema']['default'])}`" if "default" in p.get("schema", {}) else "") + ")"
                + (f" — {_rst(p['description'])}" if p.get("description") else "")
                for p in params))
            lines.append("")
        for body in _body_fields(op, spec):
            lines += [_rst(body), ""]
        lines += [f"Answers: {_response(op, spec)}.", ""]
        groups.setdefault(title, []).extend(lines)
    out = ["| Method | Path | What |", "|---|---|---|"]
    for title in GROUP_ORDER:
        out += index.get(title, [])
    out += ["", "`*` marks a required body field. Errors are `{error, code}`: see [errors.md](errors.md).", ""]
    for title in GROUP_ORDER:
        if title in groups:
            out += [f"### {title}", "", *groups[title]]
    return "\n".join(out).rstrip()


def render_plans() -> str:
    from storage import plans

    def n(v: int | None, unit: str = "") -> str:
        if v is None:
            return "unlimited"
        if unit == "GB":
            return f"{v // plans.GB:,} GB"
        return f"{v:,}"

    cols = [("Requests per minute (workspace)", lambda p: n(p.requests_per_minute)),
            ("Requests per month", lambda p: n(p.requests_per_month)),
            ("Pipeline seconds per row", lambda p: n(p.pipeline_seconds_per_row)),
            ("Pipeline steps per row", lambda p: n(p.pipeline_steps_per_row)),
            ("SQL timeout (s)", lambda p: n(p.sql_timeout_s)),
            ("Automation runs per month", lambda p: n(p.automation_runs_per_month)),
            ("Tables", lambda p: n(p.tables)),
            ("Storage", lambda p: n(p.storage_bytes, "GB")),
            ("Builds per month", lambda p: n(p.builds_per_month)),
            ("AI credits per month", lambda p: n(p.ai_credits_per_month)),
            ("Auto-recharge allowed", lambda p: "yes" if p.can_auto_recharge else "no")]
    names = list(plans.PLANS)
    rows = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for title, get in cols:
        rows.append(f"| {title} | " + " | ".join(get(plans.PLANS[x]) for x in names) + " |")
    rows += ["", "On every plan: page size default "
             f"{plans.PAGE_DEFAULT}, at most {plans.PAGE_MAX:,}; a batch holds at most {plans.BATCH_MAX}"
             f" rows; `in`/`cs` take at most {plans.IN_MAX} values; a query's filters hold at most"
             f" {plans.CONDITIONS_MAX} conditions; one token makes at most"
             f" {plans.TOKEN_REQUESTS_PER_MINUTE:,} requests per minute."]
    return "\n".join(rows)


# --------------------------------------------------------------------------- pages

MARKER = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->).*?(<!-- END GENERATED: (?P=name) -->)", re.S)


def splice(text: str, sections: dict[str, str]) -> str:
    """``text`` with each generated section replaced; a marker missing is an error."""
    found = {m.group("name") for m in MARKER.finditer(text)}
    lost = set(sections) - found
    if lost:
        raise SystemExit(f"markers missing: {', '.join(sorted(lost))}")
    return MARKER.sub(lambda m: m.group(1) + "\n" + sections[m.group("name")] + "\n" + m.group(3)
                      if m.group("name") in sections else m.group(0), text)


@dataclass
class Result:
    pages: dict[Path, str]  # path → the page as it should read
    undocumented_codes: list[str]
    functions_without_example: list[str]


def generate() -> Result:
    codes_table, missing_codes = render_codes(scan_codes())
    functions, missing_examples = render_functions()
    spec = openapi()
    wanted = {
        DOCS / "errors.md": {"codes": codes_table},
        DOCS / "formulas.md": {"sample": render_sample(), "operators": render_operators(),
                               "functions": functions, "error-values": render_error_values()},
        DOCS / "api.md": {"endpoints": render_endpoints(spec), "plans": render_plans()},
    }
    pages = {path: splice(path.read_text(), sections) for path, sections in wanted.items()}
    return Result(pages, missing_codes, missing_examples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page is stale")
    args = ap.parse_args(argv)
    res = generate()
    stale = [p for p, text in res.pages.items() if p.read_text() != text]
    if not args.check:
        for p in stale:
            p.write_text(res.pages[p])
            print(f"wrote {p.relative_to(ROOT)}")
    elif stale:
        print("stale: " + ", ".join(str(p.relative_to(ROOT)) for p in stale) + " (run scripts/gen_docs.py)")
    if res.undocumented_codes:
        print("codes without a description (add them to CODE_NOTES in scripts/gen_docs.py): "
              + ", ".join(res.undocumented_codes))
    if res.functions_without_example:
        print("functions without an example (add them to FUNCTION_EXAMPLES in scripts/gen_docs.py): "
              + ", ".join(res.functions_without_example))
    bad = (args.check and stale) or res.undocumented_codes or res.functions_without_example
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
