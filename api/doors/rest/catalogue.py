"""The special-fields catalogue: integration groups and their requests (for ``action`` columns).

``GET {rest}/special-fields/groups`` → ``[{id, name, description, request_count}]``;
``GET {rest}/special-fields/groups/{id}/requests`` → ``[{group_id, id, name, description,
method, url, headers?, body?, params: [{name, type, required, default?, description}],
credential: {types, required, header_name?} | null}]``. An ``action`` column's config is
``{group_id, request_id, params, credential?}``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from activities import catalogue
from api.deps import RestPrincipal
from api.ops.catalogue import INTEGRATION_SOURCES
from api.responses import JSON
from api.schemas import ERRORS
from api.state import AppState
from storage.access import Principal
from storage.errors import NotFound

router = APIRouter(prefix="/functions/v1/rest-api/special-fields", tags=["special-fields"])


class GroupOut(BaseModel):
    id: str
    name: str
    description: str
    request_count: int


class ParamOut(BaseModel):
    name: str
    type: str
    required: bool
    description: str
    default: Any = None


class CredentialNeed(BaseModel):
    types: list[str]
    required: bool
    header_name: str | None = None


class RequestOut(BaseModel):
    group_id: str
    id: str
    name: str
    description: str
    method: str
    url: str
    headers: dict[str, str] | None = None
    body: str | None = None
    params: list[ParamOut]
    credential: CredentialNeed | None


@router.get("/groups", response_model=list[GroupOut], responses=ERRORS)
async def list_groups(principal: RestPrincipal) -> JSON:
    """Integration groups available to ``action`` columns."""
    return JSON(catalogue.list_groups())


@router.get("/groups/{group_id}/requests", response_model=list[RequestOut], responses=ERRORS)
async def list_requests(group_id: str, principal: RestPrincipal) -> JSON:
    """The requests of one group, with their parameters and the credential they need."""
    requests = catalogue.list_requests(group_id)
    if requests is None:
        raise NotFound(f"integration group {group_id!r} not found")
    return JSON(requests)


async def mcp_integrations(state: AppState, principal: Principal) -> list[dict[str, Any]]:
    """What ``check_column_types`` lists under ``integrations``."""
    return catalogue.integrations()


# check_column_types (MCP) lists every registered integration source
if mcp_integrations not in INTEGRATION_SOURCES:
    INTEGRATION_SOURCES.append(mcp_integrations)
