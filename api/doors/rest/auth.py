"""App-user auth endpoints under ``{base_url}/functions/v1/auth`` (DESIGN §4 "App users").

``POST /signup {workspace_id, email, password, fields?}`` → 201 session;
``POST /token {grant_type: password|refresh_token, workspace_id, ...}`` → session;
``GET /user`` (Bearer access token) → the user; ``POST /logout`` → 204.
A session is ``{access_token, token_type, refresh_token, expires_in, user}``.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from api.deps import StateDep, bearer
from api.responses import JSON
from api.schemas import ErrorOut
from api.services import appusers
from storage.errors import ServiceError, Unauthorized

router = APIRouter(prefix="/functions/v1/auth", tags=["auth"],
                   responses={s: {"model": ErrorOut} for s in (400, 401, 403, 409, 429, 503)})


class SignupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown key ("role") is refused, not ignored
    workspace_id: int
    email: str
    password: str
    fields: dict[str, Any] | None = Field(
        default=None,
        description="values of the Users columns the workspace's signup_fields list (none by default)")


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grant_type: Literal["password", "refresh_token"]
    workspace_id: int
    email: str | None = None
    password: str | None = None
    refresh_token: str | None = None


class LogoutIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspace_id: int | None = None
    refresh_token: str | None = None


def _client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _app_token(request: Request) -> str:
    token = bearer(request)
    if not appusers.is_app_token(token):
        raise Unauthorized("this endpoint takes an app-user access token")
    return token


@router.post("/signup", status_code=201)
async def signup(body: SignupIn, request: Request, state: StateDep) -> JSON:
    """Create an account and sign in: 409 CONFLICT for a taken e-mail, 400 WEAK_PASSWORD,
    400 SIGNUP_FIELD_NOT_ALLOWED for `fields` the workspace's `signup_fields` do not list,
    429 SIGNUP_RATE_LIMIT past the per-IP or per-workspace sign-up window."""
    session = await appusers.signup(
        state, workspace_id=body.workspace_id, email=body.email, password=body.password, fields=body.fields,
        ip=_client_ip(request),
    )
    return JSON(session, status_code=201, headers={"Cache-Control": "no-store"})


@router.post("/token")
async def token(body: TokenIn, request: Request, state: StateDep) -> JSON:
    """Sign in with a password or rotate a refresh token."""
    if body.grant_type == "password":
        session = await appusers.password_grant(
            state, workspace_id=body.workspace_id, email=body.email, password=body.password,
            ip=_client_ip(request),
        )
    else:
        if not body.refresh_token:
            raise ServiceError("refresh_token is required for grant_type=refresh_token")
        session = await appusers.refresh_grant(state, workspace_id=body.workspace_id, refresh_token=body.refresh_token)
    return JSON(session, headers={"Cache-Control": "no-store"})


@router.get("/user")
async def user(request: Request, state: StateDep) -> JSON:
    return JSON(await appusers.current_user(state, _app_token(request)))


@router.post("/logout", status_code=204)
async def logout(request: Request, state: StateDep, body: LogoutIn | None = None) -> Response:
    """End the session (every refresh token of its family); access tokens stop working."""
    token = _app_token(request) if request.headers.get("authorization") else None
    await appusers.logout(
        state, token=token, refresh_token=body.refresh_token if body else None,
        workspace_id=body.workspace_id if body else None,
    )
    return Response(status_code=204)
