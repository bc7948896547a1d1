"""Workspace credentials through the operator admin API (DESIGN §4).

``POST /functions/v1/admin/workspaces/{ws}/credentials {name, type, secret, header_name?}``
→ 201 ``{id, name, type, header_name, created_at}``; the secret is encrypted at once and
never returned, listed or logged again. Pipeline steps name a credential in
``config.credential``; the proxy decrypts it only when a step runs.
"""

from __future__ import annotations

from typing import Any, Literal

import psycopg
from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from api.deps import StateDep
from api.responses import JSON
from api.routes.admin import require_admin
from api.schemas import Deleted, ErrorOut
from api.state import AppState
from storage import meta, secrets
from storage.errors import Conflict, NotFound
from storage.values import iso

router = APIRouter(
    prefix="/functions/v1/admin/workspaces/{workspace_id}/credentials",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses={s: {"model": ErrorOut} for s in (400, 401, 404, 409, 503)},
)


class CredentialIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255)
    type: Literal["bearer", "header", "basic", "query"]
    secret: str = Field(min_length=1, repr=False)
    header_name: str | None = Field(default=None, description="header (type header) or query parameter (type query)")


class CredentialOut(BaseModel):
    id: int
    name: str
    type: str
    header_name: str | None
    created_at: str


def credential_out(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "type": row["type"], "header_name": row["header_name"],
            "created_at": iso(row["created_at"])}


async def _workspace(state: AppState, workspace_id: int) -> None:
    async with state.db.connection() as conn:
        if await meta.get_workspace(conn, workspace_id=workspace_id) is None:
            raise NotFound(f"workspace {workspace_id} not found")


@router.post("", status_code=201, response_model=CredentialOut)
async def create_credential(workspace_id: int, body: CredentialIn, state: StateDep) -> JSON:
    """Store a credential; the response never contains the secret."""
    await _workspace(state, workspace_id)
    name, kind, secret, header_name = secrets.check_credential(
        name=body.name, type=body.type, secret=body.secret, header_name=body.header_name)
    sealed = secrets.SecretBox(state.settings.secret_key).encrypt(secret)
    try:
        async with state.db.connection() as conn:
            row = await secrets.create_credential(conn, workspace_id=workspace_id, name=name, type=kind,
                                                  header_name=header_name, sealed=sealed)
    except psycopg.errors.UniqueViolation:
        raise Conflict(f"a credential named {name!r} already exists") from None
    return JSON(credential_out(row), status_code=201)


@router.get("", response_model=list[CredentialOut])
async def list_credentials(workspace_id: int, state: StateDep) -> JSON:
    """The workspace's credentials (names and kinds; never secrets)."""
    await _workspace(state, workspace_id)
    async with state.db.connection() as conn:
        rows = await secrets.list_credentials(conn, workspace_id=workspace_id)
    return JSON([credential_out(r) for r in rows])


@router.delete("/{credential}", response_model=Deleted)
async def delete_credential(workspace_id: int, credential: str, state: StateDep) -> JSON:
    """Delete a credential by id or name; steps naming it fail until it is created again."""
    async with state.db.connection() as conn:
        row = await secrets.delete_credential(conn, workspace_id=workspace_id, ref=credential)
    if row is None:
        raise NotFound(f"credential {credential!r} not found")
    return JSON({"id": row["id"], "deleted": True})
