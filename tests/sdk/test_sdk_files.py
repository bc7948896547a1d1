"""``{base_url}/sdk/``: the index, the hashed module and its stable alias, types, the
example page — content types, caching, CORS, ETags — and the package metadata."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path

import httpx
import pytest

from api.app import VERSION

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk"


@pytest.fixture(scope="module")
def index(base_url: str) -> dict:
    r = httpx.get(f"{base_url}/sdk/")
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "*"
    return r.json()


def test_index_names_the_hashed_module_as_latest(index):
    js = (SDK / "wds.js").read_bytes()
    hashed = f"wds.{hashlib.sha256(js).hexdigest()[:12]}.js"
    assert index["latest"] == hashed
    assert index["files"] == [hashed, "wds.js", "wds.d.ts"]
    assert index["version"] == VERSION


@pytest.mark.parametrize(
    ("name", "content_type", "cache"),
    [
        ("latest", "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"),
        ("wds.js", "text/javascript; charset=utf-8", "public, max-age=300, must-revalidate"),
        ("wds.d.ts", "application/typescript; charset=utf-8", "public, max-age=300, must-revalidate"),
        ("example.js", "text/javascript; charset=utf-8", "no-cache"),
    ],
)
def test_files_are_served_with_type_cache_and_cors(base_url, index, name, content_type, cache):
    name = index["latest"] if name == "latest" else name
    r = httpx.get(f"{base_url}/sdk/{name}")
    assert r.status_code == 200
    assert r.headers["content-type"] == content_type
    assert r.headers["cache-control"] == cache
    assert r.headers["access-control-allow-origin"] == "*"
    assert r.headers["x-content-type-options"] == "nosniff"
    source = "wds.js" if name.startswith("wds.") and name.endswith(".js") else name
    assert r.content == (SDK / source).read_bytes()


def test_module_responses_point_deno_at_the_types(base_url, index):
    for name in (index["latest"], "wds.js"):
        assert httpx.get(f"{base_url}/sdk/{name}").headers["x-typescript-types"] == "/sdk/wds.d.ts"


def test_etag_revalidation_answers_304(base_url):
    first = httpx.get(f"{base_url}/sdk/wds.js")
    again = httpx.get(f"{base_url}/sdk/wds.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == first.headers["etag"]
    weak = httpx.get(f"{base_url}/sdk/wds.js", headers={"If-None-Match": f'"x", W/{first.headers["etag"]}'})
    assert weak.status_code == 304


def test_head_answers_without_a_body(base_url):
    r = httpx.head(f"{base_url}/sdk/wds.js")
    assert r.status_code == 200 and r.content == b""
    assert int(r.headers["content-length"]) == (SDK / "wds.js").stat().st_size


def test_example_page_is_html_with_a_strict_policy_and_no_token(base_url):
    r = httpx.get(f"{base_url}/sdk/example")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert '<script type="module" src="./example.js">' in r.text
    assert not re.search(r"wds_(rest|vibe|mcp)_", r.text + (SDK / "example.js").read_text())


@pytest.mark.parametrize("name", ["wds.0123456789ab.js", "example.html", "__init__.py", "package.json", "..%2Fpyproject.toml"])
def test_unknown_files_are_404_not_found(base_url, name):
    r = httpx.get(f"{base_url}/sdk/{name}")
    assert r.status_code == 404
    assert r.json()["code"] == "NOT_FOUND"


def test_package_metadata_matches_the_service():
    pkg = json.loads((SDK / "package.json").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert pkg["version"] == project["version"] == VERSION
    assert pkg["type"] == "module" and pkg["sideEffects"] is False
    assert pkg["types"] == "./wds.d.ts" and pkg["exports"]["."]["import"] == "./wds.js"
    assert pkg.get("dependencies", {}) == {}
    assert f'export const VERSION = "{VERSION}";' in (SDK / "wds.js").read_text()


def test_the_module_imports_nothing():
    source = (SDK / "wds.js").read_text()
    assert not re.search(r"^\s*import\s", source, re.MULTILINE)
    assert "require(" not in source
