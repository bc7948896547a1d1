"""Workspace credentials through the operator admin API (DESIGN §4).

``POST /functions/v1/admin/workspaces/{ws}/credentials {name, type, secret, header_name?, hosts}``
→ 201 ``{id, name, type, header_name, hosts, created_at}``; the secret is encrypted at once
and never returned, listed or logged again. ``hosts`` (required) binds the credential to
host patterns (``storage/secrets.py``): the proxy attaches it only to a request whose URL
host matches, re-checked on every redirect. ``PATCH .../credentials/{id or name} {hosts}``
replaces them. Pipeline steps name a credential in ``config.credential``; the proxy
decrypts it only when a step runs.
"""

from __future__ import annotations

from typing import Any, Literal

import psycopg
from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from api.deps import StateDep, require_admin
from api.responses import JSON
from api.schemas import Deleted, ErrorOut
from api.state import AppState
from storage import meta, secrets
from storage.errors import Conflict, NotFound
from storage.values import iso

HOSTS_DOC = (
    "required: host patterns the credential may be sent to, matched against the request URL's host name:"
    " 'api.stripe.com', '*.example.com' (subdomains at any depth, not the apex), '127.0.0.1', '[::1]',"
    " each optionally with ':port' (without a port: any port)"
)

_HOSTS_SCHEMA: dict[str, Any] = {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                 "examples": [["api.stripe.com", "*.example.com", "127.0.0.1:8443"]]}

router = APIRouter(
    prefix="/functions/v1/admin/workspaces/{workspace_id}/credentials",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses={s: {"model": ErrorOut} for s in (400, 401, 404, 409, 503)},
)


def _hosts_required(schema: dict[str, Any]) -> None:
    # required in the contract; checked by storage.secrets.check_hosts for its own error codes
    schema.setdefault("required", []).append("hosts")


class CredentialIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_hosts_required)
    name: str = Field(min_length=1, max_length=255)
    type: Literal["bearer", "header", "basic", "query"]
    secret: str = Field(min_length=1, repr=False)
    header_name: str | None = Field(default=None, description="header (type header) or query parameter (type query)")
    # typed loosely so that storage.secrets.check_hosts answers with its own codes
    hosts: Any = Field(default=None, description=HOSTS_DOC, json_schema_extra=_HOSTS_SCHEMA)


class CredentialPatch(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_hosts_required)
    hosts: Any = Field(default=None, description=HOSTS_DOC, json_schema_extra=_HOSTS_SCHEMA)


class CredentialOut(BaseModel):
    id: int
    name: str
    type: str
    header_name: str | None
    hosts: list[str]
    created_at: str


def credential_out(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "type": row["type"], "header_name": row["header_name"],
            "hosts": list(row.get("hosts") or []), "created_at": iso(row["created_at"])}


async def _workspace(state: AppState, workspace_id: int) -> None:
    async with state.db.connection() as conn:
        if await meta.get_workspace(conn, workspace_id=workspace_id) is None:
            raise NotFound(f"workspace {workspace_id} not found")


@router.post("", status_code=201, response_model=CredentialOut)
async def create_credential(workspace_id: int, body: CredentialIn, state: StateDep) -> JSON:
    """Store a credential; the response never contains the secret."""
    await _workspace(state, workspace_id)
    name, kind, secret, header_name, hosts = secrets.check_credential(
        name=body.name, type=body.type, secret=body.secret, header_name=body.header_name, hosts=body.hosts)
    sealed = secrets.SecretBox(state.settings.secret_key).encrypt(secret)
    try:
        async with state.db.connection() as conn:
            row = await secrets.create_credential(conn, workspace_id=workspace_id, name=name, type=kind,
                                                  header_name=header_name, sealed=sealed, hosts=hosts)
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


@router.patch("/{credential}", response_model=CredentialOut)
async def update_credential(workspace_id: int, credential: str, body: CredentialPatch, state: StateDep) -> JSON:
    """Replace a credential's `hosts` (by id or name); the secret cannot be changed (delete and
    create it again)."""
    hosts = secrets.check_hosts(body.hosts)
    async with state.db.connection() as conn:
        row = await secrets.set_credential_hosts(conn, workspace_id=workspace_id, ref=credential, hosts=hosts)
    if row is None:
        raise NotFound(f"credential {credential!r} not found")
    return JSON(credential_out(row))


@router.delete("/{credential}", response_model=Deleted)
async def delete_credential(workspace_id: int, credential: str, state: StateDep) -> JSON:
    """Delete a credential by id or name; steps naming it fail until it is created again."""
    async with state.db.connection() as conn:
        row = await secrets.delete_credential(conn, workspace_id=workspace_id, ref=credential)
    if row is None:
        raise NotFound(f"credential {credential!r} not found")
    return JSON({"id": row["id"], "deleted": True})
