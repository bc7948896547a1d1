"""The read-only SQL endpoint: translate a client's query, then run it safely.

``translate`` is pure (parse → plan → build): sqlglot parses the text, an allow-list
walk refuses anything outside the grammar, human names resolve to physical ones and
every literal becomes a bound parameter. ``run_sql`` executes the plan read-only, as the
workspace's read-only role, under the plan's SQL timeout.

Behaviour the spec leaves open, decided here:

- Names: exact match first, then a unique case-insensitive match (tables and columns);
  double quotes are needed only for names with spaces, symbols or keywords. ``id``,
  ``created_at`` and ``updated_at`` always mean the system columns.
- Rows are flat like the SDK shape: ``*`` gives ``id, created_at, updated_at`` then every
  column in position order; a field list gives exactly those fields. Values are as in
  REST: select columns give option ids, timestamps ISO strings, an unset checkbox
  ``false`` and an unset multi-select or file ``[]``.
- Conditions follow SQL's NULL logic (``Score != 1`` skips rows without a score), but
  compare values as REST shows them: an unset checkbox is ``false``, an unset
  multi-select ``[]``; computed (JSON) columns compare numerically when the literal reads
  as a number and as text otherwise; ORDER BY a single-select follows the options' order.
- WHERE on select columns takes an option id or label (unknown → ``INVALID_OPTION``);
  on a multi-select ``= 'x'`` means "has x", ``IN (...)`` "has any of", ``!=``/``NOT IN``
  their negations, ``IS NULL`` "has none". LIKE works on text columns only; ordering
  comparisons are refused on checkbox, select and file columns. Literals must fit the
  column type (``INVALID_SQL`` otherwise).
- Conditions combine with AND only; OR is refused. Parentheses around conditions are
  accepted. ``NULLS FIRST/LAST`` in ORDER BY is honoured; ``id`` breaks ties.
- LIMIT defaults to 100, at most 1000 (``LIMIT_TOO_LARGE``); IN takes at most 200 values
  (``TOO_MANY_VALUES``); the text is at most 10,000 characters (``PAYLOAD_TOO_LARGE``).
- ``COUNT(*)`` answers ``{count}`` of all matching rows; ORDER BY/LIMIT/OFFSET are
  checked but do not change it.
- A page answers ``{rows, total, table, limit, offset, has_more}``. ``total`` (all
  matching rows, ignoring the page) is counted only when asked (``count``): a count reads
  every match. Without it the page is read with one row more, which gives ``has_more``,
  and ``total`` is still exact when the page reaches the end of the result (``offset`` +
  rows), else ``None``.
- A table of another workspace is "unknown table"; a table of the workspace the token
  cannot read is refused with its own message (both ``INVALID_SQL``).
- Any other SELECT (aggregates, GROUP BY/HAVING, OR/NOT, BETWEEN, ILIKE, arithmetic,
  AS, the curated functions, JOIN along a relation column, IN (SELECT …)) is an
  analytic query: :mod:`storage.sqlquery.analytic` rebuilds it from an allow-list and
  it answers ``{rows, columns: [{name, type}], total, limit, offset, has_more}`` (and
  ``table`` when it reads one table without aggregating). There select columns read
  their labels and relations the related record's id (docs/sql.md).
"""

from storage.sqlquery.analytic import FUNCTIONS, AnalyticPlan
from storage.sqlquery.parse import MAX_QUERY_CHARS
from storage.sqlquery.plan import SqlPlan, table_resolver, translate
from storage.sqlquery.run import run_sql

__all__ = [
    "FUNCTIONS",
    "AnalyticPlan",
    "MAX_QUERY_CHARS",
    "SqlPlan",
    "run_sql",
    "table_resolver",
    "translate",
]
