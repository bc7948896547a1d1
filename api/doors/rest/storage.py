"""Storage buckets and objects (DESIGN §4 "Storage").

Access rule (issue 22): a bucket is reached only through a grant. The builder token
(vibe_mcp) has full access to every bucket, a rest_api token to the buckets it created;
otherwise the token's access profile needs a bucket grant (``bucket_grants: [{bucket_id,
read, write, all_paths}]`` on the admin profile endpoints, or the builder's
``grant_bucket_access`` tool): ``read`` lists, downloads and signs, ``write`` uploads and
deletes objects and deletes the bucket. Public buckets are readable by every credential of
the workspace (their objects are public anyway); writing needs ``write`` there too.
App-user sessions act through the relay profile's bucket grants and reach only
``users/<their user id>/`` unless the grant says ``all_paths``. Uploads and deletes need
a workspace that is not read-only; creating buckets needs a server token. Public buckets
serve ``/storage/v1/object/public/{bucket_id}/{path}`` without a token; objects of
authenticated buckets are also reachable through signed, expiring URLs, which only a
credential that may read the object can make.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.responses import StreamingResponse

from api.deps import RestPrincipal, StateDep, require_writable
from api.responses import JSON
from api.schemas import ErrorOut
from api.state import AppState
from storage import objects as obj
from storage.access import Principal
from storage.errors import Conflict, Forbidden, NotFound, PayloadTooLarge, PlanLimit, ValidationError
from storage.plans import plan as plan_of
from storage.values import set_file_url_signer


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """File cells of authenticated buckets render as signed URLs (needs ``secret_key``)."""
    settings = app.state.wds.settings
    if settings.secret_key:
        key = obj.signing_key(settings.secret_key)
        ttl = int(settings.storage_signed_url_ttl_s)

        def signer(bucket_id: int, path: str) -> str:
            return "token=" + obj.sign(key, bucket_id, path, obj.rounded_expiry(ttl))

        set_file_url_signer(signer)
    try:
        yield
    finally:
        set_file_url_signer(None)


# every failure is {error, code}: declared so that /openapi.json tells the truth
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorOut} for s in (400, 401, 402, 403, 404, 409, 413, 429, 503)
}
DOWNLOAD: dict[int | str, dict[str, Any]] = {200: {"content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}, "description": "the object's bytes"}}
router = APIRouter(prefix="/storage/v1", tags=["storage"], lifespan=lifespan, responses=ERRORS)
MAX_SIGN_S = 7 * 86_400
_SNIFF_BYTES = 512


class BucketIn(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo ("pubic") is refused, never a private bucket
    name: str
    public: StrictBool = False


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expires_in: int = Field(3600, description="seconds the URL stays valid (1 s to 7 days)")


def storage_of(state: AppState) -> obj.ObjectStorage:
    """The process's object store, created on first use from the settings."""
    store = state.extras.get("object_storage")
    if store is None:
        store = obj.ObjectStorage(obj.make_store(state.settings.storage_url, state.settings.data_dir))
        state.extras["object_storage"] = store
    return store  # type: ignore[no-any-return]


def _server_token(principal: Principal) -> None:
    if principal.app_user_id is not None:
        raise Forbidden("app-user sessions cannot manage buckets")


def _may_read(principal: Principal, bucket: dict[str, Any], path: str | None = None) -> None:
    """403 unless ``principal`` may read ``bucket`` (at ``path``, when given)."""
    if not principal.may_read_object(bucket["id"], bool(bucket["public"]), path):
        if bucket["public"] or principal.bucket_perms(bucket["id"]).read:
            raise Forbidden(f"app users may use only {principal.own_prefix(bucket['id'])} of a bucket")
        raise Forbidden(f"no read grant on bucket {bucket['name']!r}")


def _may_write(principal: Principal, bucket: dict[str, Any], path: str | None = None) -> None:
    """403 unless ``principal`` may write ``bucket`` (at ``path``, when given)."""
    require_writable(principal)
    if not principal.bucket_perms(bucket["id"]).write:
        raise Forbidden(f"no write grant on bucket {bucket['name']!r}")
    own = principal.own_prefix(bucket["id"])
    if own is not None and (path is None or not path.startswith(own)):
        raise Forbidden(f"app users may write only under {own}")


async def _bucket(state: AppState, principal: Principal, ref: str) -> dict[str, Any]:
    async with state.db.connection() as conn:
        bucket = await obj.get_bucket(conn, workspace_id=principal.workspace_id, ref=ref)
    if bucket is None:
        raise NotFound(f"bucket {ref} not found")
    return bucket


def _object_out(bucket: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    return {
        "bucket_id": bucket["id"], "bucket": bucket["name"], "path": row["path"], "size": row["size"],
        "content_type": row["content_type"],
        "created_at": row["created_at"].isoformat() if row.get("created_at") else None,
    }


# --------------------------------------------------------------------------- buckets


@router.get("/bucket")
async def list_buckets(principal: RestPrincipal, state: StateDep) -> JSON:
    async with state.db.connection() as conn:
        rows = await obj.list_buckets(conn, workspace_id=principal.workspace_id)
    # only the buckets this credential may read: the names of others do not leak
    return JSON([obj.bucket_out(r) for r in rows if r["public"] or principal.bucket_perms(r["id"]).read])


@router.post("/bucket", status_code=201)
async def create_bucket(body: BucketIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Create a bucket `{name, public}`; names are unique per workspace (409)."""
    require_writable(principal)
    _server_token(principal)
    name = obj.clean_bucket_name(body.name)
    async with state.db.transaction() as conn:
        row = await obj.create_bucket(conn, workspace_id=principal.workspace_id, name=name,
                                      public=body.public, token_id=principal.token_id)
        # the creator's cached principal (in every process) must learn of its new bucket
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
    return JSON(obj.bucket_out(row), status_code=201)


@router.get("/bucket/{bucket}")
async def get_bucket(bucket: str, principal: RestPrincipal, state: StateDep) -> JSON:
    row = await _bucket(state, principal, bucket)
    _may_read(principal, row)
    return JSON(obj.bucket_out(row))


@router.delete("/bucket/{bucket}")
async def delete_bucket(
    bucket: str, principal: RestPrincipal, state: StateDep,
    force: bool = Query(False, description="also delete the bucket's objects"),
) -> JSON:
    """Delete a bucket; a bucket with objects needs `force=true` (409 otherwise)."""
    require_writable(principal)
    _server_token(principal)
    row = await _bucket(state, principal, bucket)
    _may_write(principal, row)
    async with state.db.transaction() as conn:
        if not force and await obj.list_objects(conn, bucket_id=row["id"], prefix="", limit=1, offset=0):
            raise Conflict("the bucket is not empty; delete its objects or pass force=true")
        paths = await obj.delete_bucket(conn, bucket_id=row["id"])
    await storage_of(state).delete([obj.object_key(principal.workspace_id, row["id"], p) for p in paths])
    return JSON({"id": row["id"], "deleted": True})


# --------------------------------------------------------------------------- objects


@router.get("/object/list/{bucket}")
async def list_objects(
    bucket: str, principal: RestPrincipal, state: StateDep,
    prefix: str | None = Query(None), limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0),
) -> JSON:
    """Objects of a bucket whose path starts with `prefix`, by path."""
    row = await _bucket(state, principal, bucket)
    _may_read(principal, row)
    pre = obj.clean_prefix(prefix)
    own = principal.own_prefix(row["id"])
    if own is not None:  # an app user lists its own prefix (the default) or inside it
        pre = pre or own
        if not pre.startswith(own):
            raise Forbidden(f"app users may list only {own} of a bucket")
    async with state.db.connection() as conn:
        rows = await obj.list_objects(conn, bucket_id=row["id"], prefix=pre, limit=limit, offset=offset)
    return JSON({"objects": [_object_out(row, r) for r in rows], "limit": limit, "offset": offset})


@router.get("/object/public/{bucket_id}/{path:path}", responses=DOWNLOAD)
async def download_public(bucket_id: str, path: str, state: StateDep) -> StreamingResponse:
    """Anonymous download from a public bucket (404 for anything else, so nothing leaks)."""
    path = obj.clean_path(path)
    if not (bucket_id.isascii() and bucket_id.isdigit()) or len(bucket_id) > 18:
        raise NotFound("object not found")
    async with state.db.connection() as conn:
        bucket = await obj.bucket_by_id(conn, bucket_id=int(bucket_id))
    if bucket is None or not bucket["public"]:
        raise NotFound("object not found")
    return await _download(state, bucket, path, cache="public, max-age=60")


@router.post("/object/sign/{bucket}/{path:path}")
async def sign_object(bucket: str, path: str, principal: RestPrincipal, state: StateDep,
                      body: SignIn | None = None) -> JSON:
    """A URL that downloads the object without a token until it expires (``expires_in``
    3600 s when the body is left out)."""
    body = body or SignIn()
    path = obj.clean_path(path)
    if not 1 <= body.expires_in <= MAX_SIGN_S:
        raise ValidationError(f"expires_in must be between 1 and {MAX_SIGN_S} seconds")
    row = await _bucket(state, principal, bucket)
    _may_read(principal, row, path)  # a URL is a read: only a credential that may read can make one
    async with state.db.connection() as conn:
        if await obj.get_object(conn, bucket_id=row["id"], path=path) is None:
            raise NotFound("object not found")
    expires = int(time.time()) + body.expires_in
    token = obj.sign(obj.signing_key(state.settings.secret_key), row["id"], path, expires)
    url = (
        f"{state.settings.public_base_url.rstrip('/')}/storage/v1/object/sign/{row['id']}/"
        f"{quote(path, safe='/')}?token={token}"
    )
    return JSON({"signed_url": url, "expires_at": expires})


@router.get("/object/sign/{bucket_id}/{path:path}", responses=DOWNLOAD)
async def download_signed(bucket_id: str, path: str, state: StateDep, token: str | None = Query(None)) -> StreamingResponse:
    """Download through a signed URL; an expired or wrong signature is 403."""
    path = obj.clean_path(path)
    key = obj.signing_key(state.settings.secret_key)
    if not (bucket_id.isascii() and bucket_id.isdigit()) or len(bucket_id) > 18 or not obj.verify(key, int(bucket_id), path, token):
        raise Forbidden("the signed URL is invalid or has expired", code="INVALID_SIGNATURE")
    async with state.db.connection() as conn:
        bucket = await obj.bucket_by_id(conn, bucket_id=int(bucket_id))
    if bucket is None:
        raise NotFound("object not found")
    return await _download(state, bucket, path, cache="private, max-age=60")


@router.get("/object/{bucket}/{path:path}", responses=DOWNLOAD)
async def download(bucket: str, path: str, principal: RestPrincipal, state: StateDep) -> StreamingResponse:
    path = obj.clean_path(path)
    row = await _bucket(state, principal, bucket)
    _may_read(principal, row, path)
    return await _download(state, row, path, cache="private, no-cache")


async def _download(state: AppState, bucket: dict[str, Any], path: str, *, cache: str) -> StreamingResponse:
    async with state.db.connection() as conn:
        meta = await obj.get_object(conn, bucket_id=bucket["id"], path=path)
    if meta is None:
        raise NotFound("object not found")
    size, stream = await storage_of(state).open(obj.object_key(bucket["workspace_id"], bucket["id"], path))
    ctype = str(meta["content_type"])
    headers = {
        "Content-Length": str(size),
        "Cache-Control": cache,
        # user content on the API origin: never sniffed, never scripted
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
    }
    if any(t in ctype for t in ("html", "xml", "javascript")):
        headers["Content-Disposition"] = "attachment"
    return StreamingResponse(stream, media_type=ctype, headers=headers)


@router.post("/object/{bucket}/{path:path}", status_code=201)
async def upload(bucket: str, path: str, request: Request, principal: RestPrincipal, state: StateDep) -> JSON:
    """Upload the raw body; an existing path is 409 unless `x-upsert: true` (or PUT)."""
    return await _upload(bucket, path, request, principal, state, upsert=_truthy(request.headers.get("x-upsert")))


@router.put("/object/{bucket}/{path:path}", responses={201: {"description": "created (no object was there)"}})
async def upsert(bucket: str, path: str, request: Request, principal: RestPrincipal, state: StateDep) -> JSON:
    """Upload the raw body, replacing an existing object."""
    return await _upload(bucket, path, request, principal, state, upsert=True)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


async def _upload(
    bucket_ref: str, path: str, request: Request, principal: Principal, state: AppState, *, upsert: bool
) -> JSON:
    path = obj.clean_path(path)
    bucket = await _bucket(state, principal, bucket_ref)
    _may_write(principal, bucket, path)
    quota = plan_of(principal.plan).storage_bytes
    async with state.db.connection() as conn:
        existing = await obj.get_object(conn, bucket_id=bucket["id"], path=path)
        clash = None if existing is not None else await obj.path_clash(conn, bucket_id=bucket["id"], path=path)
        used = await obj.used_bytes(conn, workspace_id=principal.workspace_id) if quota is not None else 0
    if existing is not None and not upsert:
        raise Conflict(f"object {path!r} already exists; send x-upsert: true to replace it")
    if clash is not None:
        raise Conflict(f"object {clash!r} exists: a path cannot be both an object and a folder of objects"
                       f" ({path!r})")
    max_object = state.settings.storage_max_object_bytes
    room = None if quota is None else quota - used + (existing["size"] if existing else 0)
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit():
        _check_size(int(declared), max_object, room)

    stream = request.stream().__aiter__()
    head = b""
    async for chunk in stream:
        head += chunk
        if len(head) >= _SNIFF_BYTES:
            break
    ctype = obj.sniff_content_type(head, request.headers.get("content-type"), path)
    size = 0
    # bytes this process holds for the workspace's uploads still streaming (the declared
    # Content-Length from the first chunk on, or what has arrived when more or undeclared):
    # each upload's room leaves the others' out, so parallel uploads cannot stage past the
    # plan's storage before the check under the lock refuses them (8 × 900 MB on a 1 GB
    # plan staged 6.7 GB of the shared disk, then 7 × 402); the first to declare wins
    staging: Counter[int] = state.extras.setdefault("staging_bytes", Counter())
    ws_id = principal.workspace_id
    expected = int(declared) if declared and declared.isascii() and declared.isdigit() else 0
    held = 0

    def count(n: int) -> None:
        nonlocal size, held
        size += n
        need = max(size, expected)
        if need > held:
            staging[ws_id] += need - held
            held = need
        try:
            _check_size(size, max_object, None)
            if room is not None and held > room - (staging[ws_id] - held):
                raise PlanLimit("this upload would exceed the plan's storage", kind="storage")
        except (PlanLimit, PayloadTooLarge):
            staging[ws_id] -= held  # at once: the others' next chunks see the room it frees
            held = 0
            raise

    async def body() -> AsyncIterator[bytes]:
        count(len(head))
        if head:
            yield head
        async for chunk in stream:
            count(len(chunk))  # past a limit: aborts the store upload, nothing is kept
            yield chunk

    # the bytes go to a staging key first: until the path is known to be this upload's
    # (under the workspace's storage lock, below), nothing of another upload is touched
    key = obj.object_key(principal.workspace_id, bucket["id"], path)
    staged = obj.staging_key(principal.workspace_id)
    store = storage_of(state)
    try:
        await store.put(staged, body())
    finally:
        staging[ws_id] -= held  # stored (or refused): the row's size counts from here on
        if staging[ws_id] <= 0:
            del staging[ws_id]
    try:
        async with state.db.transaction() as conn:
            await obj.lock_workspace_storage(conn, workspace_id=principal.workspace_id)
            # concurrent uploads may have taken the path, made it a folder or used the room
            # meanwhile: decide again under the lock, where no other upload of the workspace runs
            current = await obj.get_object(conn, bucket_id=bucket["id"], path=path)
            if current is not None and not upsert:
                raise Conflict(f"object {path!r} already exists; send x-upsert: true to replace it")
            clash = None if current is not None else await obj.path_clash(conn, bucket_id=bucket["id"], path=path)
            if clash is not None:
                raise Conflict(f"object {clash!r} exists: a path cannot be both an object and a folder of"
                               f" objects ({path!r})")
            if quota is not None:
                now_used = await obj.used_bytes(conn, workspace_id=principal.workspace_id)
                if now_used - (current["size"] if current else 0) + size > quota:
                    raise PlanLimit("this upload would exceed the plan's storage", kind="storage")
            row = await obj.put_object_row(
                conn, workspace_id=principal.workspace_id, bucket_id=bucket["id"], path=path,
                size=size, content_type=ctype, replace=upsert,
            )
            # still under the lock: the row and the bytes change together (a failed move
            # rolls the row back)
            await store.rename(staged, key)
    except BaseException:
        # the staged bytes are nobody's: any previous version of the object stays as it was
        with suppress(Exception):  # the refusal is the answer, not a failed clean-up
            await store.delete([staged])
        raise
    return JSON(_object_out(bucket, row), status_code=201 if current is None else 200)


def _check_size(size: int, max_object: int, room: int | None) -> None:
    if size > max_object:
        raise PayloadTooLarge(f"objects are at most {max_object} bytes")
    if room is not None and size > room:
        raise PlanLimit("this upload would exceed the plan's storage", kind="storage")


@router.delete("/object/{bucket}/{path:path}")
async def delete_object(bucket: str, path: str, principal: RestPrincipal, state: StateDep) -> JSON:
    path = obj.clean_path(path)
    row = await _bucket(state, principal, bucket)
    _may_write(principal, row, path)
    async with state.db.transaction() as conn:
        # under the upload lock: an upload of the same path lands before or after, never between
        await obj.lock_workspace_storage(conn, workspace_id=principal.workspace_id)
        found = await obj.delete_object_row(conn, bucket_id=row["id"], path=path)
        if not found:
            raise NotFound("object not found")
        await storage_of(state).delete([obj.object_key(principal.workspace_id, row["id"], path)])
    return JSON({"path": path, "deleted": True})
