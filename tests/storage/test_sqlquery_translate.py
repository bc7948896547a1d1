"""The SQL endpoint's translator: grammar, name resolution, typing, and every refusal.

Pure tests: tables are built by hand and no database is touched. Refusals are asserted
by error code; the physical SQL is checked as text because it is the contract with
``run_sql`` (identifiers quoted, every literal a bound parameter).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from storage.errors import ServiceError
from storage.schema import ColumnMeta, ColumnType, Option, TableMeta
from storage.sqlquery import AnalyticPlan, SqlPlan, table_resolver, translate

WS = 3
STATUS = (Option("opt_open", "Open", "red"), Option("opt_done", "Done", "green"))
TAGS = (Option("t_a", "Alpha", "blue"), Option("t_b", "Beta", "gray"))


def _col(cid: int, name: str, type_: ColumnType, **kw: Any) -> ColumnMeta:
    return ColumnMeta(id=cid, table_id=7, name=name, type=type_, position=cid, **kw)


TASKS = TableMeta(
    id=7,
    workspace_id=WS,
    name="Tasks",
    icon=None,
    columns=(
        _col(1, "Name", ColumnType.TEXT),
        _col(2, "Due Date", ColumnType.DATE),
        _col(3, "Status", ColumnType.SINGLE_SELECT, options=STATUS),
        _col(4, "Tags", ColumnType.MULTI_SELECT, options=TAGS),
        _col(5, "Score", ColumnType.NUMBER),
        _col(6, "Done", ColumnType.CHECKBOX),
        _col(8, "Owner", ColumnType.RELATION, relation_table_id=9),
        _col(10, "Files", ColumnType.FILE),
        _col(11, "Total", ColumnType.FORMULA, formula="{Score} * 2"),
        _col(12, "select", ColumnType.TEXT),
    ),
)
SECRET = TableMeta(id=8, workspace_id=WS, name="Secret", icon=None, columns=(_col(20, "Code", ColumnType.TEXT),))
TWINS = (
    TableMeta(id=30, workspace_id=WS, name="Twin", icon=None, columns=()),
    TableMeta(id=31, workspace_id=WS, name="TWIN", icon=None, columns=()),
)
AMBIGUOUS_COLS = TableMeta(
    id=40,
    workspace_id=WS,
    name="Cases",
    icon=None,
    columns=(_col(41, "Label", ColumnType.TEXT), _col(42, "LABEL", ColumnType.TEXT), _col(43, "ID", ColumnType.TEXT)),
)
RESOLVE = table_resolver([TASKS, SECRET, *TWINS, AMBIGUOUS_COLS])


def plan(query: str) -> SqlPlan:
    return translate(query, resolve_table=RESOLVE, can_read=lambda table_id: table_id != SECRET.id)


def where_sql(p: SqlPlan) -> str:
    text = p.count_query.as_string()
    return text.split(" WHERE ", 1)[1] if " WHERE " in text else ""


def error_code(query: str) -> str:
    with pytest.raises(ServiceError) as info:
        plan(query)
    return info.value.code


# --- the grammar -------------------------------------------------------------------------


def test_star_selects_system_columns_then_every_column_in_position_order() -> None:
    p = plan("SELECT * FROM Tasks")
    assert [f.name for f in p.fields] == [
        "id", "created_at", "updated_at", "Name", "Due Date", "Status", "Tags", "Score", "Done",
        "Owner", "Files", "Total", "select",
    ]
    assert p.rows_query is not None
    assert p.rows_query.as_string().startswith(
        'SELECT "id", "created_at", "updated_at", "c_1", "c_2", "c_3"'
    )
    assert ' FROM "ws_3"."t_7" ' in p.rows_query.as_string()
    assert (p.count_only, p.limit, p.offset, p.table) == (False, 100, 0, TASKS)


def test_field_list_selects_only_those_fields_in_order_without_repeats() -> None:
    p = plan('SELECT "Due Date", name, id, Name FROM tasks')
    assert [f.name for f in p.fields] == ["Due Date", "Name", "id"]
    assert p.rows_query is not None
    assert p.rows_query.as_string().startswith('SELECT "c_2", "c_1", "id" FROM')


def test_count_star_plans_only_the_count() -> None:
    p = plan("SELECT COUNT(*) FROM Tasks WHERE Score > 2")
    assert p.count_only and p.rows_query is None and p.fields == ()
    assert p.count_query.as_string() == 'SELECT count(*) FROM "ws_3"."t_7" WHERE ("c_5" > %s)'
    assert p.where_params == (2.0,)


def test_count_star_accepts_and_ignores_order_and_paging() -> None:
    p = plan("select count(*) from Tasks order by Name limit 5 offset 2")
    assert p.count_only and "LIMIT" not in p.count_query.as_string()


@pytest.mark.parametrize(
    ("query", "expected_sql", "params"),
    [
        # a text column's btree holds its first 200 characters: bound them, then compare
        ("Name = 'a'", '((left("c_1", 200) = left(%s::text, 200) AND "c_1" = %s))', ("a", "a")),
        ("Name != 'a'", '("c_1" <> %s)', ("a",)),
        ("Name <> 'a'", '("c_1" <> %s)', ("a",)),
        ("Score > 1", '("c_5" > %s)', (1.0,)),
        ("Score < -1.5", '("c_5" < %s)', (-1.5,)),
        ("Score >= 1e3", '("c_5" >= %s)', (1000.0,)),
        ("Score <= '7'", '("c_5" <= %s)', (7.0,)),
        ("Name LIKE 'a%'", '("c_1" LIKE %s)', ("a%",)),
        ("Name NOT LIKE '%z'", '("c_1" NOT LIKE %s)', ("%z",)),
        ("Name IN ('a', 'b')", '((left("c_1", 200) IN (left(%s::text, 200), left(%s::text, 200))'
         ' AND "c_1" IN (%s, %s)))', ("a", "b", "a", "b")),
        ("Name NOT IN ('a')", '(NOT (left("c_1", 200) IN (left(%s::text, 200)) AND "c_1" IN (%s)))', ("a", "a")),
        ("Name IS NULL", '("c_1" IS NULL)', ()),
        ("Name IS NOT NULL", '("c_1" IS NOT NULL)', ()),
        ("Owner = 12", '("c_8" = %s)', (12,)),
        ("id IN (1, 2)", '("id" IN (%s, %s))', (1, 2)),
        ("Done = true", '(coalesce("c_6", false) = %s)', (True,)),
        ("Done != 'false'", '(coalesce("c_6", false) <> %s)', (False,)),
        ("Status = 'Open'", '("c_3" = %s)', ("opt_open",)),
        ("Status IN ('opt_done', 'Open')", '("c_3" IN (%s, %s))', ("opt_done", "opt_open")),
        ("Tags = 'Alpha'", """(coalesce("c_4", '{}'::text[]) @> ARRAY[%s]::text[])""", ("t_a",)),
        ("Tags != 't_b'", """(NOT (coalesce("c_4", '{}'::text[]) @> ARRAY[%s]::text[]))""", ("t_b",)),
        ("Tags IN ('Alpha', 'Beta')", """(coalesce("c_4", '{}'::text[]) && ARRAY[%s, %s]::text[])""", ("t_a", "t_b")),
        ("Tags NOT IN ('Alpha')", """(NOT (coalesce("c_4", '{}'::text[]) && ARRAY[%s]::text[]))""", ("t_a",)),
        ("Tags IS NULL", """(cardinality(coalesce("c_4", '{}'::text[])) = 0)""", ()),
        ("Files IS NOT NULL", """(NOT ("c_10" IS NULL OR "c_10" IN ('[]'::jsonb, 'null'::jsonb)))""", ()),
        ("Total IS NULL", """(("c_11" IS NULL OR "c_11" = 'null'::jsonb))""", ()),
        ("Total > 'b'", """(("c_11" #>> '{}') > %s::text)""", ("b",)),
        ('"select" = \'x\'', '((left("c_12", 200) = left(%s::text, 200) AND "c_12" = %s))', ("x", "x")),
    ],
)
def test_each_condition_becomes_quoted_sql_with_bound_parameters(
    query: str, expected_sql: str, params: tuple[Any, ...]
) -> None:
    p = plan(f"SELECT * FROM Tasks WHERE {query}")
    assert where_sql(p) == expected_sql
    assert p.where_params == params


def test_dates_compare_as_utc_timestamps() -> None:
    p = plan("SELECT * FROM Tasks WHERE \"Due Date\" >= '2024-03-01' AND created_at < '2024-03-02T10:00:00Z'")
    assert p.where_params == (
        datetime(2024, 3, 1, tzinfo=timezone.utc),
        datetime(2024, 3, 2, 10, tzinfo=timezone.utc),
    )


def test_computed_columns_compare_numerically_when_the_literal_is_a_number_else_as_text() -> None:
    p = plan("SELECT * FROM Tasks WHERE Total = 5 AND Total >= '2.5' AND Total IN ('a', true) AND Total != 'x'")
    text = where_sql(p)
    assert text.count("jsonb_typeof") == 4  # the numeric reading of = 5 and >= '2.5'
    assert ">= %s::numeric" in text and "NOT (" in text
    assert p.where_params == (5.0, "5", 2.5, "a", "true", "x")


def test_conditions_combine_with_and_and_parentheses_only_group() -> None:
    p = plan("SELECT * FROM Tasks WHERE (Score > 1 AND (Name = 'a')) AND Done = false")
    assert where_sql(p) == ('("c_5" > %s) AND ((left("c_1", 200) = left(%s::text, 200) AND "c_1" = %s))'
                            ' AND (coalesce("c_6", false) = %s)')
    assert p.where_params == (1.0, "a", "a", False)


def test_order_by_keeps_direction_and_null_placement_and_breaks_ties_by_id() -> None:
    p = plan('SELECT Name FROM Tasks ORDER BY "Due Date" DESC, Score, Done ASC NULLS FIRST')
    assert p.rows_query is not None
    assert p.rows_query.as_string().endswith(
        'ORDER BY "c_2" DESC NULLS FIRST, "c_5" ASC NULLS LAST, coalesce("c_6", false) ASC NULLS FIRST,'
        ' "id" ASC NULLS LAST LIMIT %s OFFSET %s'
    )


def test_order_by_a_single_select_follows_the_options_order() -> None:
    p = plan("SELECT Name FROM Tasks WHERE Score > 1 ORDER BY Status DESC LIMIT 5")
    assert p.rows_query is not None
    assert "ORDER BY array_position(%s::text[], \"c_3\") DESC NULLS FIRST" in p.rows_query.as_string()
    assert p.rows_params == (1.0, ["opt_open", "opt_done"], 5, 0)


def test_order_by_id_needs_no_tie_breaker() -> None:
    p = plan("SELECT Name FROM Tasks ORDER BY id DESC")
    assert p.rows_query is not None
    assert p.rows_query.as_string().endswith('ORDER BY "id" DESC NULLS FIRST LIMIT %s OFFSET %s')


def test_limit_and_offset_are_bound_parameters() -> None:
    p = plan("SELECT * FROM Tasks LIMIT 1000 OFFSET 20")
    assert (p.limit, p.offset, p.rows_params) == (1000, 20, (1000, 20))


def test_trailing_semicolon_and_comments_are_harmless() -> None:
    p = plan("SELECT Name FROM Tasks -- a comment ; DROP TABLE x\n WHERE /* ; */ Score > 1;;")
    assert where_sql(p) == '("c_5" > %s)'


def test_long_and_chains_keep_their_order() -> None:
    p = plan("SELECT * FROM Tasks WHERE " + " AND ".join(f"Score = {i}" for i in range(500)))
    assert p.where_params == tuple(float(i) for i in range(500))


def test_deeply_nested_parentheses_are_refused_not_crashed() -> None:
    assert error_code("SELECT * FROM Tasks WHERE " + "(" * 3000 + "Score = 1" + ")" * 3000) == "INVALID_SQL"


def test_qualified_columns_and_star_may_name_the_from_table() -> None:
    p = plan('SELECT "Tasks"."Name" FROM Tasks WHERE tasks.Score > 1 ORDER BY Tasks.id')
    assert [f.name for f in p.fields] == ["Name"]
    assert len(plan("SELECT tasks.* FROM Tasks").fields) == 13


# --- names ---------------------------------------------------------------------------------


def test_exact_name_wins_over_case_insensitive_match() -> None:
    assert plan("SELECT * FROM Twin").table.id == 30
    assert plan('SELECT * FROM "TWIN"').table.id == 31
    assert [f.name for f in plan("SELECT Label, LABEL FROM Cases").fields] == ["Label", "LABEL"]


def test_system_names_in_lower_case_always_mean_system_columns() -> None:
    p = plan('SELECT id, "ID" FROM Cases')
    assert [(f.name, f.physical) for f in p.fields] == [("id", "id"), ("ID", "c_43")]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM twin",  # two tables match case-insensitively, none exactly
        "SELECT label FROM Cases",
        "SELECT Id FROM Cases",  # system id and the column "ID"
    ],
)
def test_ambiguous_case_insensitive_names_are_refused(query: str) -> None:
    assert error_code(query) == "INVALID_SQL"


# --- values and limits -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "code"),
    [
        ("Status = 'Nope'", "INVALID_OPTION"),
        ("Tags IN ('Alpha', 'Gamma')", "INVALID_OPTION"),
        ("Score = 'abc'", "INVALID_SQL"),
        ("Score = true", "INVALID_SQL"),
        ("Name = 5", "INVALID_SQL"),
        ("\"Due Date\" > 'yesterday'", "INVALID_SQL"),
        ("\"Due Date\" > 20240101", "INVALID_SQL"),
        ("Done = 1", "INVALID_SQL"),
        ("Owner = 1.5", "INVALID_SQL"),
        ("id = 'x'", "INVALID_SQL"),
        ("id = 99999999999999999999", "INVALID_SQL"),
        ("Status = 5", "INVALID_SQL"),
        ("Score LIKE '1%'", "INVALID_SQL"),
        ("Status LIKE 'O%'", "INVALID_SQL"),
        ("Status > 'Open'", "INVALID_SQL"),
        ("Done < true", "INVALID_SQL"),
        ("Files = 'x'", "INVALID_SQL"),
        ("Name = NULL", "INVALID_SQL"),
        ("Name IN ('a', NULL)", "INVALID_SQL"),
        ("Name = \"Done\"", "INVALID_SQL"),  # double quotes name a column, not a string
        ("Name IS TRUE", "INVALID_SQL"),
        ("Name = E'a'", "INVALID_SQL"),
        ("Name = $$a$$", "INVALID_SQL"),
        ("Score = -'1'", "INVALID_SQL"),
        ("Name IN ()", "INVALID_SQL"),
    ],
)
def test_values_must_fit_the_column(condition: str, code: str) -> None:
    assert error_code(f"SELECT * FROM Tasks WHERE {condition}") == code


def test_in_takes_at_most_200_values() -> None:
    values = ", ".join(str(i) for i in range(200))
    assert len(plan(f"SELECT * FROM Tasks WHERE Score IN ({values})").where_params) == 200
    assert error_code(f"SELECT * FROM Tasks WHERE Score IN ({values}, 200)") == "TOO_MANY_VALUES"


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("SELECT * FROM Tasks LIMIT 1001", "LIMIT_TOO_LARGE"),
        ("SELECT * FROM Tasks LIMIT -1", "INVALID_SQL"),
        ("SELECT * FROM Tasks LIMIT 1.5", "INVALID_SQL"),
        ("SELECT * FROM Tasks LIMIT ALL", "INVALID_SQL"),
        ("SELECT * FROM Tasks LIMIT NULL", "INVALID_SQL"),
        ("SELECT * FROM Tasks OFFSET '3'", "INVALID_SQL"),
        ("SELECT * FROM Tasks FETCH FIRST 5 ROWS ONLY", "INVALID_SQL"),
    ],
)
def test_limit_and_offset_must_be_whole_numbers_within_bounds(query: str, code: str) -> None:
    assert error_code(query) == code


def test_query_text_is_bounded() -> None:
    long_query = "SELECT * FROM Tasks WHERE Name = '" + "x" * 10_000 + "'"
    assert error_code(long_query) == "PAYLOAD_TOO_LARGE"


def test_query_text_must_be_encodable_text() -> None:
    # JSON's "\ud800" decodes to a lone surrogate, which no UTF-8 text (nor PostgreSQL) holds
    assert error_code("SELECT * FROM Tasks WHERE Name = '\ud800'") == "INVALID_SQL"
    assert plan("SELECT * FROM Tasks WHERE Name = 'ünï ☃ 🦆'").where_params == ("ünï ☃ 🦆",) * 2


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        "SELEC * FROM Tasks",
        "SELECT * FROM Tasks WHERE",
        "SELECT * FROM Tasks WHERE Name = 'unterminated",
        # other statements
        "INSERT INTO Tasks (Name) VALUES ('x')",
        "UPDATE Tasks SET Name = 'x'",
        "DELETE FROM Tasks",
        "DROP TABLE Tasks",
        "TRUNCATE Tasks",
        "COPY Tasks TO STDOUT",
        "CREATE TABLE x (a int)",
        "ALTER TABLE Tasks ADD COLUMN x int",
        "GRANT SELECT ON Tasks TO public",
        "SET ROLE postgres",
        "SHOW search_path",
        "EXPLAIN SELECT * FROM Tasks",
        "VACUUM Tasks",
        "BEGIN",
        "TABLE Tasks",
        "VALUES (1)",
        "(SELECT * FROM Tasks)",
        "SELECT * INTO x FROM Tasks",
        # statement chains and comment tricks
        "SELECT * FROM Tasks; DROP TABLE Tasks",
        "SELECT * FROM Tasks; SELECT * FROM Tasks",
        "SELECT * FROM Tasks;/* */DELETE FROM Tasks",
        "SELECT * FROM Tasks -- \n; DELETE FROM Tasks",
        "/* comment */ DELETE FROM Tasks",
        # functions
        "SELECT * FROM Tasks WHERE Score = pg_sleep(10)",
        "SELECT pg_sleep(10) FROM Tasks",
        "SELECT * FROM Tasks ORDER BY random()",
        "SELECT COUNT(*), Name FROM Tasks",
        "SELECT * FROM generate_series(1, 10)",
        "SELECT * FROM Tasks WHERE Name = current_user",
        # subqueries, joins, set operations, CTEs
        "SELECT * FROM Tasks WHERE Score = (SELECT 1)",
        "SELECT * FROM Tasks WHERE EXISTS (SELECT 1)",
        "SELECT * FROM (SELECT * FROM Tasks) s",
        "SELECT * FROM Tasks JOIN Secret ON Tasks.id = Secret.id",
        "SELECT * FROM Tasks, Secret",
        "SELECT * FROM Tasks CROSS JOIN Secret",
        "SELECT * FROM Tasks UNION SELECT * FROM Secret",
        "SELECT * FROM Tasks UNION ALL SELECT * FROM Tasks",
        "SELECT * FROM Tasks INTERSECT SELECT * FROM Tasks",
        "SELECT * FROM Tasks EXCEPT SELECT * FROM Tasks",
        "WITH x AS (SELECT * FROM Tasks) SELECT * FROM x",
        "SELECT * FROM LATERAL (SELECT 1) x",
        # system catalogs and schema-qualified names
        "SELECT * FROM pg_catalog.pg_class",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM pg_class",
        "SELECT * FROM pg_roles",
        "SELECT * FROM ws_3.t_7",
        "SELECT * FROM t_7",
        "SELECT * FROM mydb.public.Tasks",
        "SELECT Tasks.Name.x FROM Tasks",
        "SELECT ws_3.t_7.c_1 FROM Tasks",
        # unknown and unreadable names
        "SELECT * FROM Nope",
        "SELECT * FROM Secret",
        "SELECT COUNT(*) FROM Secret",
        "SELECT Nope FROM Tasks",
        "SELECT c_1 FROM Tasks",
        "SELECT * FROM Tasks WHERE Nope = 1",
        "SELECT * FROM Tasks ORDER BY Nope",
        "SELECT Secret.Name FROM Tasks",
        "SELECT Secret.* FROM Tasks",
        # constructs outside the grammar
        "SELECT * FROM Tasks WHERE Name LIKE 'a!%' ESCAPE '!'",
        "SELECT * FROM Tasks WHERE Name SIMILAR TO 'a'",
        "SELECT * FROM Tasks WHERE Name ~ 'a'",
        "SELECT * FROM Tasks WHERE Name IS NOT DISTINCT FROM 'a'",
        "SELECT * FROM Tasks WHERE Name = 'a'::text",
        "SELECT * FROM Tasks WHERE Name = CAST('a' AS text)",
        "SELECT * FROM Tasks WHERE Name = 'a' COLLATE \"C\"",
        "SELECT * FROM Tasks WHERE Name = $1",
        "SELECT * FROM Tasks WHERE Name = %s",
        "SELECT * FROM Tasks WHERE Name = :name",
        "SELECT * FROM Tasks WHERE Score",
        "SELECT * FROM Tasks WHERE Score = ANY(ARRAY[1])",
        "SELECT * FROM ONLY Tasks",
        "SELECT *, Name FROM Tasks",
        "SELECT",
        "SELECT 1",
        "SELECT Name",
        "SELECT Name FROM Tasks FOR UPDATE",
        "SELECT Name FROM Tasks FOR SHARE",
        "SELECT Name FROM Tasks TABLESAMPLE SYSTEM (10)",
        "SELECT Name, row_number() OVER () FROM Tasks",
    ],
)
def test_anything_outside_the_grammar_is_invalid_sql(query: str) -> None:
    assert error_code(query) == "INVALID_SQL"


# Constructs the spec's grammar lacks, translated as analytic queries since issue #25
# (their results: tests/storage/test_sqlquery_analytic.py).
ANALYTIC = [
    *(f"SELECT * FROM Tasks WHERE {c}" for c in ("Name = Status", "'a' = Name")),
    "SELECT lower(Name) FROM Tasks",
    "SELECT * FROM Tasks WHERE Name = lower('A')",
    "SELECT COUNT(Name) FROM Tasks",
    "SELECT COUNT(DISTINCT Name) FROM Tasks",
    "SELECT COUNT(*) FILTER (WHERE Score > 1) FROM Tasks",
    "SELECT * FROM Tasks WHERE id IN (SELECT id FROM Tasks)",
    "SELECT * FROM Tasks WHERE Score = 1 OR Score = 2",
    "SELECT * FROM Tasks WHERE (Score = 1 OR Score = 2)",
    "SELECT * FROM Tasks WHERE NOT Score = 1",
    "SELECT * FROM Tasks WHERE Score BETWEEN 1 AND 2",
    "SELECT * FROM Tasks WHERE Name ILIKE 'a'",
    "SELECT * FROM Tasks WHERE Score = 1 + 1",
    "SELECT * FROM Tasks WHERE Name = 'a' || 'b'",
    "SELECT * FROM Tasks WHERE true",
    "SELECT * FROM Tasks WHERE Name = CASE WHEN true THEN 'a' END",
    "SELECT DISTINCT Name FROM Tasks",
    "SELECT Name AS n FROM Tasks",
    "SELECT * FROM Tasks AS t",
    "SELECT * FROM Tasks t",
    "SELECT 1 FROM Tasks",
    "SELECT 'x' FROM Tasks",
    "SELECT Score + 1 FROM Tasks",
    "SELECT Name FROM Tasks GROUP BY Name",
    "SELECT Name FROM Tasks GROUP BY Name HAVING Name = 'a'",
    "SELECT Name FROM Tasks ORDER BY 1",
    "SELECT Name FROM Tasks ORDER BY Score + 1",
]


@pytest.mark.parametrize("query", ANALYTIC)
def test_extended_constructs_are_analytic_queries(query: str) -> None:
    assert isinstance(plan(query), AnalyticPlan)


def test_unknown_and_other_workspace_tables_are_indistinguishable() -> None:
    other_ws = TableMeta(id=99, workspace_id=4, name="Elsewhere", icon=None, columns=())
    # The resolver is scoped to the caller's workspace, so another workspace's table is
    # simply not found: the message is the same as for a name that exists nowhere.
    with pytest.raises(ServiceError) as missing:
        plan("SELECT * FROM Elsewhere")
    assert missing.value.code == "INVALID_SQL"
    assert other_ws.name in missing.value.message and "unknown table" in missing.value.message


def test_refusals_name_the_problem() -> None:
    cases = {
        "SELECT * FROM Tasks WHERE Score = pg_sleep(1)": "PG_SLEEP",
        "SELECT * FROM Tasks; DROP TABLE Tasks": "one statement",
        "DELETE FROM Tasks": "DELETE",
        "SELECT * FROM Tasks JOIN Secret ON true": "read access",
        "SELECT * FROM Tasks JOIN Tasks AS t2 ON true": "relation",
        "SELECT * FROM Tasks UNION SELECT * FROM Tasks": "UNION",
        "SELECT * FROM (SELECT * FROM Tasks) s": "subqueries",
        "SELECT * FROM pg_catalog.pg_class": "schema-qualified",
        "SELECT * FROM Secret": "read access",
        "SELECT Nope FROM Tasks": "Nope",
        "SELECT * FROM Tasks WHERE Score = 1 OR Score = pg_sleep(1)": "PG_SLEEP",
        "SELECT * FROM Tasks WHERE Score = 1 OR Score = random()": "function not allowed",
    }
    for query, fragment in cases.items():
        with pytest.raises(ServiceError) as info:
            plan(query)
        assert fragment.lower() in info.value.message.lower(), (query, info.value.message)


def test_table_resolver_returns_none_for_unknown_names() -> None:
    assert RESOLVE("tasks") is TASKS
    assert RESOLVE("nothing") is None
