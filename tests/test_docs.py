"""The docs stay true: every error code the source uses is in docs/errors.md with a
description, docs/formulas.md matches the function catalogue, every HTTP path of the app is
in docs/api.md, and README/docs never send a reader outside the repository.

The generated parts come from ``scripts/gen_docs.py``; when one of these tests fails, run
``.venv/bin/python scripts/gen_docs.py`` (and write the description or example it asks
for). No services are needed: the app is built in-process and never opens its pool.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@cache
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_docs"] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


@cache
def generated() -> Any:
    return gen().generate()


@cache
def codes() -> dict[str, Any]:
    return gen().scan_codes()


@cache
def openapi() -> dict[str, Any]:
    return gen().openapi()


def _section(text: str, name: str) -> str:
    m = re.search(rf"<!-- BEGIN GENERATED: {name} -->\n(.*?)\n<!-- END GENERATED: {name} -->", text, re.S)
    assert m, f"marker {name!r} missing"
    return m.group(1)


def _code_rows(text: str) -> dict[str, str]:
    """``code`` → its row of the table in docs/errors.md."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([A-Z0-9_]+)` \|.*$", text, re.M)}


# --------------------------------------------------------------------------- errors.md


def test_scanner_finds_codes_of_every_kind():
    """The scanner sees class attributes, code= keywords, positional codes, dict literals
    and the plan-limit kinds, with the status of the class raised (or status=)."""
    uses = codes()
    expect = {
        "UNKNOWN_COLUMN": 400,  # class attribute in storage/errors.py
        "COLUMN_IN_USE": 409,
        "WRONG_PROTOCOL": 403,  # Forbidden(..., code="WRONG_PROTOCOL")
        "TOKEN_RATE_LIMIT": 429,  # _refuse(item, ident, message, "TOKEN_RATE_LIMIT")
        "CREDENTIAL_UNREADABLE": 500,  # ServiceError(..., status=500)
        "PLAN_LIMIT_TABLES": 402,  # storage.quotas.LIMIT_FIELDS
        "METHOD_NOT_ALLOWED": 405,  # api/errors.py framework mapping
    }
    for code, status in expect.items():
        assert code in uses, code
        assert status in uses[code].statuses, (code, uses[code].statuses)
    assert uses["EVENTS_PURGED"].in_band and not uses["EVENTS_PURGED"].statuses
    assert "path" in uses["CIRCULAR_REFERENCE"].extras
    assert "dependents" in uses["COLUMN_IN_USE"].extras
    assert "upgrade" in uses["PLAN_LIMIT_STORAGE"].extras
    assert "VALIDATION_ERROR" in uses and 402 not in uses["VALIDATION_ERROR"].statuses


def test_every_code_used_in_the_source_is_in_errors_md():
    rows = _code_rows((DOCS / "errors.md").read_text())
    uses = codes()
    missing = sorted(c for c in uses if c not in rows)
    assert not missing, f"codes used in the source but not in docs/errors.md: {missing} (run scripts/gen_docs.py)"
    undescribed = sorted(c for c in uses if c not in gen().CODE_NOTES or gen().PLACEHOLDER in rows[c])
    assert not undescribed, (
        f"codes without a description: {undescribed} (add them to CODE_NOTES in scripts/gen_docs.py, then run it)")


def test_errors_md_statuses_and_extras_match_the_source():
    rows = _code_rows((DOCS / "errors.md").read_text())
    for code, use in codes().items():
        cells = [c.strip() for c in rows[code].strip("|").split("|")]
        if use.statuses and code not in gen().HTTP_OVERRIDES:
            assert cells[1] == ", ".join(str(s) for s in sorted(use.statuses)), (code, cells[1])
        for key in use.extras:
            assert f"`{key}`" in cells[3], (code, key)


def test_errors_md_is_current():
    path = DOCS / "errors.md"
    assert path.read_text() == generated().pages[path], "docs/errors.md is stale: run scripts/gen_docs.py"


# --------------------------------------------------------------------------- formulas.md


def test_formulas_md_lists_every_function_of_the_catalogue():
    from storage.formula import FUNCTIONS

    text = (DOCS / "formulas.md").read_text()
    functions = _section(text, "functions")
    listed = set(re.findall(r"^\| `([A-Z0-9_]+)\(", functions, re.M))
    assert listed == set(FUNCTIONS), (
        f"missing: {sorted(set(FUNCTIONS) - listed)}, not in the catalogue: {sorted(listed - set(FUNCTIONS))}")
    for spec in FUNCTIONS.values():
        assert f"`{spec.signature}`" in functions, spec.signature
    assert not generated().functions_without_example, (
        f"functions without an example: {generated().functions_without_example}"
        " (add them to FUNCTION_EXAMPLES in scripts/gen_docs.py, then run it)")


def test_formulas_md_is_current():
    path = DOCS / "formulas.md"
    assert path.read_text() == generated().pages[path], "docs/formulas.md is stale: run scripts/gen_docs.py"


def test_formula_examples_evaluate_without_error_values():
    """Each function's example shows the function working (error values are only shown
    where the example is about them)."""
    from storage.formula import ERROR_CODES

    bad = {name: src for name, src in gen().FUNCTION_EXAMPLES.items()
           if gen().evaluate_example(src) in ERROR_CODES}
    assert not bad, bad


# --------------------------------------------------------------------------- api.md


def _app_routes() -> list[tuple[str, bool]]:
    """``(path, in the OpenAPI schema)`` of every route of the app, through included routers."""
    from api.app import create_app
    from service.config import Settings

    app = create_app(Settings(database_url="postgresql://docs@127.0.0.1:1/none"))

    def walk(routes: list[Any]) -> Any:
        for r in routes:
            inner = getattr(r, "original_router", None)
            if inner is not None:
                yield from walk(inner.routes)
            elif hasattr(r, "path"):
                yield r.path, getattr(r, "include_in_schema", True)

    return list(walk(app.router.routes))


def test_every_openapi_path_is_in_api_md():
    text = (DOCS / "api.md").read_text()
    spec = openapi()
    missing = [f"{m} {p}" for m, p, _ in gen().operations(spec) if f"`{m} {p}`" not in text]
    assert not missing, f"paths of /openapi.json missing from docs/api.md: {missing} (run scripts/gen_docs.py)"
    assert len(gen().operations(spec)) > 80  # the generator saw the whole app


def test_routes_outside_openapi_are_in_api_md():
    """The WebSocket, MCP, chat page and metrics routes are not in /openapi.json."""
    text = (DOCS / "api.md").read_text()
    own = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
    paths = openapi()["paths"]
    hidden = [p for p, _ in _app_routes() if p not in own and p not in paths]
    assert {"/realtime/v1", "/functions/v1/mcp-server", "/chat/{token}", "/metrics"} <= set(hidden)
    missing = [p for p in hidden if p.split("{")[0].rstrip("/") not in text]
    assert not missing, f"routes missing from docs/api.md: {missing}"


def test_api_md_is_current():
    path = DOCS / "api.md"
    assert path.read_text() == generated().pages[path], "docs/api.md is stale: run scripts/gen_docs.py"


# --------------------------------------------------------------------------- links

PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_link_only_inside_the_repository(page: Path):
    text = page.read_text()
    assert "/work/shared" not in text and "../shared" not in text
    bad = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # web links and anchors on the same page
        file_part = target.split("#", 1)[0]
        resolved = (page.parent / file_part).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            bad.append(target)
    assert not bad, f"{page.name} links outside the repository or to missing files: {bad}"


def test_readme_lists_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in DOCS.glob("*.md") if f"(docs/{p.name})" not in readme]
    assert not missing, f"README's Documentation table misses {missing}"
