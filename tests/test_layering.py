"""Imports go one way (DESIGN §1, STYLE): storage imports nothing of ours; workflows only
activities' dataclasses and pure helpers; activities never the API. Parsed with ast, so a
violation anywhere in a module (even inside a function) fails."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"api", "workflows", "activities", "storage", "wds", "worker", "bench", "sdk"}
RULES = {
    "storage": set(),
    "workflows": {"activities"},
    "activities": {"storage", "activities"},
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
