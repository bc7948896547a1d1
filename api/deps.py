"""FastAPI dependencies: the app state and the calling principal per door.

Doors (spec "Authentication"): REST accepts rest_api and vibe_mcp tokens and answers a
user_mcp token with 403 WRONG_PROTOCOL; MCP accepts user_mcp and vibe_mcp.
"""

from __future__ import annotations

import hmac
from datetime import datetime, timezone
from typing import Annotated

from fastapi import Depends, Request

from api.services import appusers
from api.state import AppState
from storage import access
from storage.access import Action, Principal, TokenType
from storage.db import current_workspace
from storage.errors import Forbidden, NotFound, Unauthorized
from storage.schema import TableMeta, WorkspaceSchema


async def get_state(request: Request) -> AppState:
    # async on purpose: FastAPI runs sync dependencies in a thread pool (a hop per request)
    return request.app.state.wds  # type: ignore[no-any-return]


StateDep = Annotated[AppState, Depends(get_state)]


def bearer(request: Request) -> str:
    header = request.headers.get("authorization")
    if not header:
        raise Unauthorized("missing bearer token: send Authorization: Bearer <token>")
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    return secret


async def resolve_principal(state: AppState, secret: str) -> Principal:
    """Token secret → principal (cached briefly); 401 when unknown, revoked or expired.

    A miss is cached briefly too (api/services/cache.py): repeating a bad token costs no query."""
    if len(secret) > 512:
        raise Unauthorized("invalid, expired or revoked token")

    async def load() -> Principal | None:
        async with state.db.connection() as conn:
            return await access.resolve_token(conn, secret=secret)

    principal = await state.caches.principal(access.hash_token(secret), load)
    if principal is None:
        raise Unauthorized("invalid, expired or revoked token")
    if principal.expires_at is not None:
        if principal.expires_at <= datetime.now(timezone.utc):
            raise Unauthorized("invalid, expired or revoked token")
    state.extras.setdefault("touched_tokens", set()).add(principal.token_id)
    # the rest of this request's queries count against its workspace's cap (storage/db.py)
    current_workspace.set(principal.workspace_id)
    return principal


async def rest_principal(request: Request, state: StateDep) -> Principal:
    secret = bearer(request)
    if appusers.is_app_token(secret):
        # an app-user session (JWT): the relay profile's grants, record routes only
        principal = await appusers.app_user_principal(state, secret)
        appusers.check_route(request)
        request.state.principal = principal
        return principal
    principal = await resolve_principal(state, secret)
    if principal.type is TokenType.USER_MCP:
        raise Forbidden("user_mcp tokens work on the MCP server only", code="WRONG_PROTOCOL")
    request.state.principal = principal
    return principal


RestPrincipal = Annotated[Principal, Depends(rest_principal)]



def table_or_404(schema: WorkspaceSchema, table_ref: str | int) -> TableMeta:
    table = schema.table(table_ref)
    if table is None:
        raise NotFound(f"table {table_ref} not found")
    return table


def require(principal: Principal, table: TableMeta, action: Action) -> None:
    """403 FORBIDDEN unless the principal may do ``action`` on ``table``.

    A table the principal cannot even read is reported as 404 for reads, so its
    existence does not leak; writes to a readable table without the right are 403.
    """
    if principal.can(table.id, action):
        return
    raise Forbidden(f"this token has no {action.value} permission on table {table.name!r}")


def require_writable(principal: Principal) -> None:
    if principal.read_only:
        raise Forbidden("this workspace's plan allows reads only", code="PLAN_READ_ONLY", extra={"upgrade": True})


async def require_admin(request: Request) -> None:
    """The operator's admin key (``WDS_ADMIN_KEY``) as the bearer: the admin API and the
    operator's credential routes."""
    key = request.app.state.wds.settings.admin_key
    secret = bearer(request)
    if not key or not hmac.compare_digest(secret.encode(), key.encode()):
        raise Unauthorized("invalid admin key")
