"""Imports go one way (DESIGN §1, STYLE): storage imports nothing of ours; workflows only
activities' dataclasses and pure helpers; activities never the API. Parsed with ast, so a
violation anywhere in a module (even inside a function) fails."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"api", "workflows", "activities", "storage", "service", "wds", "worker", "bench", "sdk"}
RULES = {
    "storage": set(),
    "workflows": {"activities"},
    "activities": {"storage", "activities"},
    # what every service process is built from (settings, tracing, the outbox relay)
    "service": {"workflows", "activities", "storage"},
    # the API imports the layers below it, never the entry points (wds/, worker.py)
    "api": {"workflows", "activities", "storage", "service"},
}
# the only activities modules workflow code may import (no I/O at import, dataclasses/pure code)
WORKFLOW_IMPORTS = {"activities.types", "activities.ledger"}


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return out


@pytest.mark.parametrize("layer", sorted(RULES))
def test_imports_go_one_way(layer):
    bad = []
    for path in (ROOT / layer).rglob("*.py"):
        for name in imports(path):
            top = name.split(".")[0]
            if top in OURS and top != layer and top not in RULES[layer]:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
            if layer == "workflows" and top == "activities" and name not in WORKFLOW_IMPORTS:
                bad.append(f"{path.relative_to(ROOT)} imports {name} (workflows may import only {WORKFLOW_IMPORTS})")
    assert not bad, "\n".join(bad)


def test_only_worker_py_registers_workflows_and_activities():
    offenders = []
    for path in ROOT.rglob("*.py"):
        if ".venv" in path.parts or "tests" in path.parts or "bench" in path.parts:
            continue
        text = path.read_text()
        # temporalio's Worker(...) (not, say, the formula engine's own _Worker process pool)
        if re.search(r"(?<![\w.])Worker\(", text) and path.name != "worker.py":
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, offenders


# --------------------------------------------------------------------------- api/ inside
#
#   api/app.py                      the composition root: wires middleware, doors, services
#   api/doors/{rest,mcp,chat}       the doors (REST routes with their fast path, MCP, chat)
#   api/middleware/                 the front ASGI layer and its steps (body limits, text
#                                   guard, idempotency, metrics, limits and usage)
#   api/ops/                        the operations layer every door calls (issue #23 item 9)
#   api/services/                   what operations and doors share (pipelines, backfills,
#                                   schedules, realtime, limits, caches, embeddings, ...)
#   api/{state,deps,errors,responses,schemas,serialize}.py   the shared vocabulary
#
# Each package may import the ones listed after it (and the shared vocabulary), never one
# listed before it.
API_LAYERS = {
    "api.doors": {"api.middleware", "api.ops", "api.services"},
    "api.middleware": {"api.services"},
    "api.ops": {"api.services"},
    "api.services": set(),
}
API_PACKAGES = ("api.app", *API_LAYERS)
VOCABULARY = ("api.state", "api.deps", "api.errors", "api.responses", "api.schemas", "api.serialize")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _from_names(path: Path) -> list[str]:
    """``from api.x import y`` also names the module ``api.x.y`` when y is one."""
    tree = ast.parse(path.read_text())
    return [f"{node.module}.{a.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module for a in node.names]


def test_api_root_holds_only_the_app_and_the_shared_vocabulary():
    loose = sorted(p.name for p in (ROOT / "api").glob("*.py")
                   if p.name != "__init__.py" and _module(p) not in ("api.app", *VOCABULARY))
    assert not loose, f"put these in api/doors, api/middleware, api/ops or api/services: {loose}"


@pytest.mark.parametrize("package", sorted(API_LAYERS))
def test_api_packages_import_only_the_ones_below_them(package):
    allowed = API_LAYERS[package]
    bad = []
    for path in (ROOT / package.replace(".", "/")).rglob("*.py"):
        for name in {*imports(path), *_from_names(path)}:
            if not _within(name, "api") or _within(name, package) or name in ("api", *VOCABULARY):
                continue
            if any(_within(name, v) for v in VOCABULARY) or any(_within(name, a) for a in allowed):
                continue
            bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_doors_other_than_rest_import_no_route_module():
    """MCP, chat and the REST fast path call the operations layer, not REST route handlers."""
    paths = [*(ROOT / "api" / "doors" / "mcp").rglob("*.py"), *(ROOT / "api" / "doors" / "chat").rglob("*.py"),
             ROOT / "api" / "doors" / "fastpath.py", ROOT / "api" / "doors" / "rest_reads.py"]
    bad = [f"{path.relative_to(ROOT)} imports {name}"
           for path in paths for name in {*imports(path), *_from_names(path)} if _within(name, "api.doors.rest")]
    assert not bad, "\n".join(bad)


def test_route_modules_import_no_other_route_module():
    """A helper two routes share lives in api/ops (or api/deps, api/schemas), not in a route."""
    bad = []
    for path in (ROOT / "api" / "doors" / "rest").glob("*.py"):
        if path.name == "__init__.py":
            continue
        me = _module(path)
        bad += [f"{path.relative_to(ROOT)} imports {name}" for name in {*imports(path), *_from_names(path)}
                if _within(name, "api.doors.rest") and name != "api.doors.rest" and not _within(name, me)]
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- entry points


def test_entry_points_sit_above_everything():
    """``wds/`` (the CLI, the embedded runtime, the server options) and ``worker.py`` are
    the entry points: only tests and the bench import them."""
    bad = []
    for top in ("api", "workflows", "activities", "storage", "service"):
        for path in (ROOT / top).rglob("*.py"):
            bad += [f"{path.relative_to(ROOT)} imports {name}" for name in imports(path)
                    if name.split(".")[0] in ("wds", "worker")]
    assert not bad, "\n".join(bad)
