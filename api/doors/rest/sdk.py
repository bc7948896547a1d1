"""``{base_url}/sdk/`` — the JavaScript client served by the API (DESIGN §4 "SDK files").

``GET /sdk/`` → ``{files, latest, version}``; ``GET /sdk/wds.<hash>.js`` is the module under
its content hash (cached for a year, immutable); ``GET /sdk/wds.js`` is the stable alias of
the newest one (short cache, revalidated by ETag); ``GET /sdk/wds.d.ts`` its types and
``GET /sdk/example`` a small browser page that uses it. Every answer allows any origin:
the files are public and hold no secrets.

The files live in the ``sdk`` package (``sdk/`` at the repository root, shipped as package
data in the wheel), read once per process on first use.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from api.responses import JSON
from api.schemas import ErrorOut
from storage.errors import NotFound, Unavailable

router = APIRouter(prefix="/sdk", tags=["sdk"], responses={404: {"model": ErrorOut}})

IMMUTABLE = "public, max-age=31536000, immutable"
ALIAS = "public, max-age=300, must-revalidate"
JS = "text/javascript; charset=utf-8"
# Deno reads types from this header; browsers ignore it
TS = "application/typescript; charset=utf-8"
HTML = "text/html; charset=utf-8"
HASH_LEN = 12
# the example page runs only its own script and talks only to this origin
EXAMPLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self' ws: wss:; img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; "
    "base-uri 'none'"
)


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


@dataclass(frozen=True, slots=True)
class Bundle:
    hashed_name: str  # wds.<hash>.js
    version: str
    assets: dict[str, Asset]  # served name → asset (both wds.js and the hashed name)


def sdk_dir() -> Path:
    """Where the SDK files are: the installed ``sdk`` package, else the repository's ``sdk/``.

    Raises:
        Unavailable: NOT_CONFIGURED when neither holds ``wds.js``.
    """
    spec = importlib.util.find_spec("sdk")
    candidates: list[Path] = []
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(p) for p in spec.submodule_search_locations)
    candidates.append(Path(__file__).resolve().parents[3] / "sdk")
    for path in candidates:
        if (path / "wds.js").is_file():
            return path
    raise Unavailable("the SDK files are not installed with this service", code="NOT_CONFIGURED")


def _asset(body: bytes, content_type: str) -> Asset:
    return Asset(body, content_type, '"' + hashlib.sha256(body).hexdigest()[:20] + '"')


@functools.cache
def bundle() -> Bundle:
    """Read and hash the files once per process (they change only with a deploy)."""
    root = sdk_dir()
    js = (root / "wds.js").read_bytes()
    digest = hashlib.sha256(js).hexdigest()[:HASH_LEN]
    hashed = f"wds.{digest}.js"
    version = "0.0.0"
    for line in js.decode("utf-8").splitlines():
        if line.startswith("export const VERSION"):
            version = line.split('"')[1]
            break
    assets = {"wds.js": _asset(js, JS), hashed: _asset(js, JS)}
    for name, ctype in (("wds.d.ts", TS), ("example.html", HTML), ("example.js", JS)):
        path = root / name
        if path.is_file():
            assets[name] = _asset(path.read_bytes(), ctype)
    return Bundle(hashed, version, assets)


def _headers(asset: Asset, cache: str) -> dict[str, str]:
    return {
        "Cache-Control": cache,
        "ETag": asset.etag,
        "Access-Control-Allow-Origin": "*",
        "X-Content-Type-Options": "nosniff",
        "Cross-Origin-Resource-Policy": "cross-origin",
    }


def _serve(request: Request, asset: Asset, cache: str, extra: dict[str, str] | None = None) -> Response:
    headers = _headers(asset, cache)
    if extra:
        headers.update(extra)
    match = request.headers.get("if-none-match", "")
    if asset.etag in (tag.strip().removeprefix("W/") for tag in match.split(",")):
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.content_type, headers=headers)


@router.get("/")
async def index() -> JSON:
    """The served files and the newest module's hashed name (``latest``)."""
    b = bundle()
    files = [b.hashed_name, "wds.js"] + [n for n in ("wds.d.ts",) if n in b.assets]
    return JSON(
        {"files": files, "latest": b.hashed_name, "version": b.version},
        headers={"Access-Control-Allow-Origin": "*", "Cache-Control": "no-cache"},
    )


EXAMPLE_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/html": {}}}, 304: {"description": "not modified"}}
FILE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/javascript": {}, "application/typescript": {}}}, 304: {"description": "not modified"}}


# one route per method: GET and HEAD each get their own operation id in /openapi.json
@router.get("/example", responses=EXAMPLE_RESPONSES)
@router.head("/example", responses=EXAMPLE_RESPONSES)
async def example(request: Request) -> Response:
    """A small page that lists the tables and records of a token typed into a form."""
    asset = bundle().assets.get("example.html")
    if asset is None:
        raise NotFound("no example page in this build")
    return _serve(request, asset, "no-cache", {"Content-Security-Policy": EXAMPLE_CSP, "Referrer-Policy": "no-referrer"})


@router.get("/{name}", responses=FILE_RESPONSES)
@router.head("/{name}", responses=FILE_RESPONSES)
async def file(name: str, request: Request) -> Response:
    """``wds.js`` (alias, short cache), ``wds.<hash>.js`` (immutable), ``wds.d.ts``, ``example.js``."""
    b = bundle()
    asset = b.assets.get(name)
    if asset is None or name == "example.html":
        raise NotFound(f"no SDK file {name!r}; GET /sdk/ lists them")
    if name == b.hashed_name:
        return _serve(request, asset, IMMUTABLE, {"X-TypeScript-Types": "/sdk/wds.d.ts"})
    if name == "wds.js":
        return _serve(request, asset, ALIAS, {"X-TypeScript-Types": "/sdk/wds.d.ts"})
    return _serve(request, asset, ALIAS if name.endswith(".d.ts") else "no-cache")
