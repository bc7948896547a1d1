"""The operator admin API (what "the app" does, DESIGN §4), under ``/functions/v1/admin``.

Authorised by ``Authorization: Bearer <WDS_ADMIN_KEY>``. Creates workspaces, access
profiles with grants, and tokens (the secret is returned once, only at creation or
rotation).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Literal, TypeVar

import psycopg
from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from api.deps import StateDep, require_admin
from api.ops.usage import workspace_usage as usage_report
from api.responses import JSON
from api.schemas import ErrorOut
from api.services import limits
from api.state import AppState
from storage import access, appusers, meta, objects
from storage.access import BucketPerms, Perms, TokenType
from storage.errors import Conflict, NotFound, ValidationError
from storage.plans import PLANS
from storage.usage import MAX_DAYS
from storage.values import iso

T = TypeVar("T")
router = APIRouter(
    prefix="/functions/v1/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses={s: {"model": ErrorOut} for s in (400, 401, 404, 409, 413, 503)},
)
Strict = ConfigDict(extra="forbid")
PlanName = Literal["free", "starter", "pro", "business", "enterprise"]


class WorkspaceIn(BaseModel):
    model_config = Strict
    name: str = Field(min_length=1, max_length=255)
    plan: PlanName = "free"


class WorkspacePatch(BaseModel):
    model_config = Strict
    name: str | None = Field(default=None, min_length=1, max_length=255)
    plan: PlanName | None = None
    read_only: bool | None = None
    auto_recharge: bool | None = None
    relay_profile_id: int | None = None
    signup_fields: list[str] | None = Field(
        default=None, description="Users columns an app user may fill at sign-up (none by default; never"
        " role or permission columns)")


class WorkspaceOut(BaseModel):
    id: int
    name: str
    plan: str
    read_only: bool
    auto_recharge: bool
    relay_profile_id: int | None
    signup_fields: list[str]
    created_at: str


class GrantIn(BaseModel):
    model_config = Strict
    table_id: int
    read: bool = True
    create: bool = False
    update: bool = False
    delete: bool = False


class BucketGrantIn(BaseModel):
    model_config = Strict
    bucket: int | str = Field(description="the bucket's id or name")
    read: bool = True
    write: bool = False
    all_paths: bool = Field(default=False, description="app users acting through this profile reach every"
                            " path, not only users/<their id>/")


class BucketGrantOut(BaseModel):
    bucket_id: int
    bucket: str
    read: bool
    write: bool
    all_paths: bool


class ProfileIn(BaseModel):
    model_config = Strict
    name: str = Field(min_length=1, max_length=255)
    grants: list[GrantIn] = Field(default_factory=list)
    bucket_grants: list[BucketGrantIn] = Field(default_factory=list)


class ProfileOut(BaseModel):
    id: int
    name: str
    grants: list[GrantIn]
    bucket_grants: list[BucketGrantOut]


class TokenIn(BaseModel):
    model_config = Strict
    type: Literal["rest_api", "user_mcp", "vibe_mcp"]
    name: str = Field(min_length=1, max_length=255)
    profile_id: int | None = None
    expires_in_seconds: int | None = Field(default=None, gt=0, le=10 * 365 * 86400)


class TokenOut(BaseModel):
    id: int
    token: str = Field(description="the secret; shown only in this response")
    type: str
    name: str
    expires_at: str | None


class TokenInfo(BaseModel):
    id: int
    type: str
    name: str
    prefix: str
    profile_id: int | None
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None
    created_at: str


def _ws_out(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"], "name": row["name"], "plan": row["plan"], "read_only": row["read_only"],
        "auto_recharge": row["auto_recharge"], "relay_profile_id": row["relay_profile_id"],
        "signup_fields": list(row.get("signup_fields") or []), "created_at": iso(row["created_at"]),
    }


async def _workspace(state: AppState, workspace_id: int) -> dict[str, Any]:
    async with state.db.connection() as conn:
        row = await meta.get_workspace(conn, workspace_id=workspace_id)
    if row is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return row


async def _profile_out(state: AppState, row: dict[str, Any]) -> dict[str, Any]:
    async with state.db.connection() as conn:
        grants = await access.profile_grants(conn, profile_id=row["id"])
        buckets = await access.profile_bucket_grants(conn, profile_id=row["id"])
    return {"id": row["id"], "name": row["name"], "grants": grants, "bucket_grants": buckets}


async def _check_buckets(
    state: AppState, workspace_id: int, grants: list[BucketGrantIn]
) -> list[tuple[int, BucketPerms]]:
    out: list[tuple[int, BucketPerms]] = []
    async with state.db.connection() as conn:
        for g in grants:
            bucket = await objects.get_bucket(conn, workspace_id=workspace_id, ref=g.bucket)
            if bucket is None:
                raise ValidationError(f"bucket {g.bucket!r} is not a bucket of workspace {workspace_id}")
            if any(b == bucket["id"] for b, _ in out):
                raise ValidationError(f"bucket {g.bucket!r} is granted twice")
            out.append((bucket["id"], BucketPerms(g.read, g.write, g.all_paths)))
    return out


async def _check_tables(state: AppState, workspace_id: int, grants: list[GrantIn]) -> list[tuple[int, Perms]]:
    schema = await state.schema(workspace_id)
    seen: set[int] = set()
    out = []
    for g in grants:
        if g.table_id not in schema.tables:
            raise ValidationError(f"table {g.table_id} is not a table of workspace {workspace_id}")
        if g.table_id in seen:
            raise ValidationError(f"table {g.table_id} is granted twice")
        seen.add(g.table_id)
        out.append((g.table_id, Perms(g.read, g.create, g.update, g.delete)))
    return out


# --------------------------------------------------------------------------- workspaces


@router.post("/workspaces", status_code=201, response_model=WorkspaceOut)
async def create_workspace(body: WorkspaceIn, state: StateDep) -> JSON:
    async with state.db.transaction() as conn:
        row = await meta.create_workspace(conn, name=body.name, plan=body.plan)
    return JSON(_ws_out(row), status_code=201)


@router.get("/workspaces", response_model=list[WorkspaceOut])
async def list_workspaces(state: StateDep) -> JSON:
    async with state.db.connection() as conn:
        rows = await meta.list_workspaces(conn)
    return JSON([_ws_out(r) for r in rows])


@router.get("/workspaces/{workspace_id}", response_model=WorkspaceOut)
async def get_workspace(workspace_id: int, state: StateDep) -> JSON:
    return JSON(_ws_out(await _workspace(state, workspace_id)))


@router.patch("/workspaces/{workspace_id}", response_model=WorkspaceOut)
async def patch_workspace(workspace_id: int, body: WorkspacePatch, state: StateDep) -> JSON:
    """Change plan, read-only state, auto-recharge, the app-user relay profile or the
    columns app users may fill at sign-up (`signup_fields`)."""
    await _workspace(state, workspace_id)
    changes = body.model_dump(exclude_unset=True)
    # an explicit null means "unchanged" for the columns that cannot be null (not a 500)
    for key in ("name", "plan", "read_only", "auto_recharge", "signup_fields"):
        if changes.get(key) is None:
            changes.pop(key, None)
    if "signup_fields" in changes:
        changes["signup_fields"] = appusers.clean_signup_fields(changes["signup_fields"])
    if changes.get("relay_profile_id") is not None:
        async with state.db.connection() as conn:
            if await access.get_profile(conn, workspace_id=workspace_id, profile_id=changes["relay_profile_id"]) is None:
                raise ValidationError(f"profile {changes['relay_profile_id']} is not a profile of this workspace")
    async with state.db.transaction() as conn:
        row = await meta.update_workspace(conn, workspace_id=workspace_id, changes=changes)
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
    assert row is not None
    limits.note_workspace(state, workspace_id, auto_recharge=row["auto_recharge"])
    return JSON(_ws_out(row))


@router.get("/workspaces/{workspace_id}/usage")
async def workspace_usage(
    workspace_id: int,
    state: StateDep,
    days: int = Query(30, ge=1, le=MAX_DAYS, description="how many days back, today included (UTC)"),
) -> JSON:
    """Request counts by day, token, door and status, and this month's quota counters."""
    row = await _workspace(state, workspace_id)
    return JSON(await usage_report(state, workspace_id=workspace_id, plan_name=row["plan"], days=days))


# --------------------------------------------------------------------------- profiles


@router.post("/workspaces/{workspace_id}/profiles", status_code=201, response_model=ProfileOut)
async def create_profile(workspace_id: int, body: ProfileIn, state: StateDep) -> JSON:
    await _workspace(state, workspace_id)
    grants = await _check_tables(state, workspace_id, body.grants)
    buckets = await _check_buckets(state, workspace_id, body.bucket_grants)
    try:
        async with state.db.transaction() as conn:
            row = await access.create_profile(conn, workspace_id=workspace_id, name=body.name)
            await access.set_grants(conn, profile_id=row["id"], grants=grants)
            await access.set_bucket_grants(conn, profile_id=row["id"], grants=buckets)
    except Exception as exc:
        if "unique" in str(exc).lower():
            raise Conflict(f"a profile named {body.name!r} already exists") from None
        raise
    return JSON(await _profile_out(state, row), status_code=201)


@router.get("/workspaces/{workspace_id}/profiles", response_model=list[ProfileOut])
async def list_profiles(workspace_id: int, state: StateDep) -> JSON:
    await _workspace(state, workspace_id)
    async with state.db.connection() as conn:
        rows = await access.list_profiles(conn, workspace_id=workspace_id)
    return JSON([await _profile_out(state, r) for r in rows])


@router.put("/workspaces/{workspace_id}/profiles/{profile_id}/grants", response_model=ProfileOut)
async def put_grants(workspace_id: int, profile_id: int, body: list[GrantIn], state: StateDep) -> JSON:
    """Replace a profile's grants."""
    row = await _profile(state, workspace_id, profile_id)
    grants = await _check_tables(state, workspace_id, body)
    await _token_change(state, partial(access.set_grants, profile_id=profile_id, grants=grants))
    return JSON(await _profile_out(state, row))


@router.put("/workspaces/{workspace_id}/profiles/{profile_id}/bucket_grants", response_model=ProfileOut)
async def put_bucket_grants(
    workspace_id: int, profile_id: int, body: list[BucketGrantIn], state: StateDep
) -> JSON:
    """Replace a profile's bucket grants (authenticated buckets answer only granted tokens)."""
    row = await _profile(state, workspace_id, profile_id)
    buckets = await _check_buckets(state, workspace_id, body)
    await _token_change(state, partial(access.set_bucket_grants, profile_id=profile_id, grants=buckets))
    return JSON(await _profile_out(state, row))


async def _profile(state: AppState, workspace_id: int, profile_id: int) -> dict[str, Any]:
    async with state.db.connection() as conn:
        row = await access.get_profile(conn, workspace_id=workspace_id, profile_id=profile_id)
    if row is None:
        raise NotFound(f"profile {profile_id} not found")
    return row


async def _token_change(state: AppState, write: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
    """Run a write to tokens or grants in a transaction that tells every process's token
    cache to forget what it knew; its result."""
    async with state.db.transaction() as conn:
        result = await write(conn)
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
    return result


# --------------------------------------------------------------------------- tokens


def _token_out(row: dict[str, Any], secret: str) -> dict[str, Any]:
    return {"id": row["id"], "token": secret, "type": row["type"], "name": row["name"],
            "expires_at": iso(row["expires_at"])}


@router.post("/workspaces/{workspace_id}/tokens", status_code=201, response_model=TokenOut)
async def create_token(workspace_id: int, body: TokenIn, state: StateDep) -> JSON:
    """Create a token. The secret is in this response only; store it now."""
    await _workspace(state, workspace_id)
    if body.profile_id is not None:
        if body.type == "vibe_mcp":
            raise ValidationError("vibe_mcp tokens see every table and take no profile")
        async with state.db.connection() as conn:
            if await access.get_profile(conn, workspace_id=workspace_id, profile_id=body.profile_id) is None:
                raise ValidationError(f"profile {body.profile_id} is not a profile of this workspace")
    async with state.db.transaction() as conn:
        row, secret = await access.create_token(
            conn, workspace_id=workspace_id, token_type=TokenType(body.type), name=body.name,
            profile_id=body.profile_id, expires_in_seconds=body.expires_in_seconds,
        )
        # cached failed lookups (api/services/cache.py) are dropped in every process: a new token is
        # never refused because of an earlier miss
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
    return JSON(_token_out(row, secret), status_code=201)


@router.get("/workspaces/{workspace_id}/tokens", response_model=list[TokenInfo])
async def list_tokens(workspace_id: int, state: StateDep) -> JSON:
    """Token metadata; secrets are never listed."""
    await _workspace(state, workspace_id)
    async with state.db.connection() as conn:
        rows = await access.list_tokens(conn, workspace_id=workspace_id)
    return JSON([
        {**r, **{k: iso(r[k]) for k in ("expires_at", "revoked_at", "last_used_at", "created_at")}}
        for r in rows
    ])


@router.post("/workspaces/{workspace_id}/tokens/{token_id}/rotate", response_model=TokenOut)
async def rotate_token(workspace_id: int, token_id: int, state: StateDep) -> JSON:
    """New secret with the same rights; the old secret stops working at once."""
    result = await _token_change(state, partial(access.rotate_token, workspace_id=workspace_id, token_id=token_id))
    if result is None:
        raise NotFound(f"active token {token_id} not found")
    return JSON(_token_out(*result))


@router.delete("/workspaces/{workspace_id}/tokens/{token_id}")
async def revoke_token(workspace_id: int, token_id: int, state: StateDep) -> JSON:
    row = await _token_change(state, partial(access.revoke_token, workspace_id=workspace_id, token_id=token_id))
    if row is None:
        raise NotFound(f"token {token_id} not found")
    return JSON({"id": token_id, "revoked": True, "deleted": True})


__all__ = ["router", "PLANS"]
