"""App-user sessions: sign-up, sign-in, refresh, sign-out, and the principal they act as.

Access tokens are HS256 JWTs (key derived from ``secret_key``; ``WDS_APP_ACCESS_TTL_S``,
default 15 min) with ``sub`` = the user's Users record id, ``ws`` = workspace id and
``sid`` = the refresh-token family. They are told apart from service tokens by prefix:
service tokens start with ``wds_``, JWTs never do.

A session acts only through the workspace's relay access profile (``PATCH
/admin/workspaces/{ws} {relay_profile_id}``): its principal carries exactly that profile's
grants (no relay profile → 403), may use only the record endpoints, ``GET /tables`` and
storage, and stops working within seconds of sign-out (the session check is cached with
the token cache, which sign-out invalidates across processes).

Brute force: at most 5 failed sign-ins per e-mail per 15 minutes and 50 per client IP
(moving windows, per process, ``limits`` memory storage) → 429 ``AUTH_RATE_LIMIT``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import math
import re
import secrets
import time
from datetime import datetime, timezone
from typing import Any

import jwt
import psycopg
from fastapi import Request
from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from api.state import AppState
from storage import appusers as au
from storage import records as rec
from storage.access import Perms, Principal, TokenType
from storage.db import current_workspace
from storage.errors import Conflict, Forbidden, RateLimited, ServiceError, Unauthorized, Unavailable
from storage.values import iso_text

ISSUER = "wds"
AUDIENCE = "wds-app"
_PASSWORDS = PasswordHash((Argon2Hasher(),))
_FAILS_PER_EMAIL = RateLimitItemPerMinute(5, 15)
_FAILS_PER_IP = RateLimitItemPerMinute(50, 15)
_limiter = MovingWindowRateLimiter(MemoryStorage())
# what an app-user session may call on the REST door
_RECORD_PATH = re.compile(r"^/functions/v1/rest-api/tables/[^/]+/records(/.*)?$")
_TABLE_READ_PATH = re.compile(r"^/functions/v1/rest-api/tables(/[^/]+)?$")


@functools.cache
def _dummy_hash() -> str:
    """Verified when the e-mail is unknown, so timing does not reveal which e-mails exist."""
    return _PASSWORDS.hash(secrets.token_urlsafe(16))


def is_app_token(secret: str) -> bool:
    """JWTs (three base64url parts) rather than ``wds_`` service tokens."""
    return not secret.startswith("wds_") and secret.count(".") == 2


def _jwt_key(state: AppState) -> bytes:
    secret = state.settings.secret_key
    if not secret:
        raise Unavailable("app users need WDS_SECRET_KEY", code="NOT_CONFIGURED")
    return hmac.new(secret.encode(), b"wds-app-user-jwt-v1", hashlib.sha256).digest()


def access_token(state: AppState, *, workspace_id: int, record_id: int, family_id: str) -> tuple[str, int]:
    ttl = int(state.settings.app_access_ttl_s)
    now = time.time()
    claims = {
        "iss": ISSUER, "aud": AUDIENCE, "sub": str(record_id), "ws": workspace_id, "sid": family_id,
        # whole seconds, rounded so the token lives at least the ``expires_in`` it is
        # announced with (int(now) + ttl could end it up to a second early)
        "iat": int(now), "exp": math.ceil(now) + ttl, "typ": "access",
    }
    return jwt.encode(claims, _jwt_key(state), algorithm="HS256"), ttl


def decode_access(state: AppState, token: str) -> dict[str, Any]:
    """Verified claims of an access token; 401 when invalid or expired."""
    try:
        claims = jwt.decode(
            token, _jwt_key(state), algorithms=["HS256"], audience=AUDIENCE, issuer=ISSUER,
            options={"require": ["exp", "sub", "ws", "sid"]},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized("the access token has expired; refresh the session", code="TOKEN_EXPIRED") from None
    except jwt.PyJWTError:
        raise Unauthorized("invalid, expired or revoked token") from None
    if claims.get("typ") != "access" or not str(claims["sub"]).isdigit() or not isinstance(claims["ws"], int):
        raise Unauthorized("invalid, expired or revoked token")
    return claims


async def app_user_principal(state: AppState, token: str) -> Principal:
    """The principal of an app-user access token: the relay profile's grants only.

    Raises:
        Unauthorized: bad/expired token, deleted user, signed-out session.
        Forbidden: the workspace has no relay access profile.
    """
    claims = decode_access(state, token)
    workspace_id, record_id, family = claims["ws"], int(claims["sub"]), str(claims["sid"])

    async def load() -> Principal | None:
        async with state.db.connection() as conn:
            row = await au.session_principal_row(conn, workspace_id=workspace_id, record_id=record_id, family_id=family)
        if row is None:
            return None
        grants = {g[0]: Perms(g[1], g[2], g[3], g[4]) for g in row["grants"]}
        return Principal(
            token_id=-int(row["user_id"]), workspace_id=workspace_id, type=TokenType.REST_API,
            profile_id=row["relay_profile_id"], plan=row["plan"], read_only=row["read_only"],
            expires_at=datetime.fromtimestamp(claims["exp"], timezone.utc), grants=grants,
            app_user_id=record_id,
        )

    key = "app:" + hashlib.sha256(token.encode()).hexdigest()
    principal = await state.caches.principal(key, load)
    if principal is None:
        raise Unauthorized("invalid, expired or revoked token")
    if principal.profile_id is None:
        raise Forbidden("this workspace has no relay access profile for app users")
    current_workspace.set(principal.workspace_id)  # its queries count against its cap (storage/db.py)
    return principal


def check_route(request: Request) -> None:
    """App-user sessions may read and write records and read table metadata, nothing else."""
    path = request.url.path.rstrip("/")
    if _RECORD_PATH.match(path) or (request.method == "GET" and _TABLE_READ_PATH.match(path)):
        return
    if path.startswith("/storage/v1/"):
        return
    raise Forbidden("app-user sessions may only read and write records")


# --------------------------------------------------------------------------- flows


async def _workspace(state: AppState, workspace_id: int, *, writing: bool) -> dict[str, Any]:
    """The workspace, which must have app users enabled (a relay access profile)."""
    async with state.db.connection() as conn:
        ws = await au.workspace_state(conn, workspace_id=workspace_id)
    if ws is None or ws["relay_profile_id"] is None:
        raise Forbidden("app users are not enabled for this workspace (no relay access profile)")
    if writing and ws["read_only"]:
        raise Forbidden("this workspace's plan allows reads only", code="PLAN_READ_ONLY", extra={"upgrade": True})
    return ws


def _user_out(table: Any, row: dict[str, Any] | None, account: dict[str, Any]) -> dict[str, Any]:
    record = rec.row_to_record(table, row) if (table is not None and row is not None) else None
    fields = record["fields"] if record else {}
    return {
        "id": account["record_id"], "email": account["email"], "name": fields.get(au.NAME_COLUMN),
        "fields": fields, "created_at": iso_text(account["created_at"]),
    }


async def _session(state: AppState, conn: Any, account: dict[str, Any], family: str | None = None) -> dict[str, Any]:
    family = family or secrets.token_urlsafe(16)
    refresh = await au.issue_refresh(
        conn, workspace_id=account["workspace_id"], user_id=account["id"], family_id=family,
        ttl_s=state.settings.app_refresh_ttl_s,
    )
    token, ttl = access_token(state, workspace_id=account["workspace_id"], record_id=account["record_id"], family_id=family)
    return {"access_token": token, "token_type": "bearer", "refresh_token": refresh, "expires_in": ttl}


async def _user_record(state: AppState, account: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    schema = await state.schema(account["workspace_id"])
    table = schema.tables.get(account["table_id"])
    if table is None:
        return None, None
    async with state.db.connection() as conn:
        row = await rec.get_record_row(conn, table=table, record_id=account["record_id"])
    return table, row


async def signup(state: AppState, *, workspace_id: int, email: Any, password: Any, fields: Any) -> dict[str, Any]:
    """Create the account and its Users record, and sign in (201 body)."""
    email = au.normalize_email(email)
    au.check_password(password, email)
    if fields is not None and not isinstance(fields, dict):
        raise ServiceError("fields must be an object of Users columns")
    await _workspace(state, workspace_id, writing=True)
    password_hash = await asyncio.to_thread(_PASSWORDS.hash, password)
    changed = False
    try:
        async with state.db.transaction() as conn:
            # the schema lock: the first sign-up may create the Users table
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (workspace_id,))
            if await au.get_by_email(conn, workspace_id=workspace_id, email=email) is not None:
                raise Conflict("an account with this e-mail already exists")
            table, changed = await au.ensure_users_table(conn, workspace_id=workspace_id)
            profile = {k: v for k, v in (fields or {}).items() if k != au.EMAIL_COLUMN}
            prepared = rec.prepare_fields(table, {**profile, au.EMAIL_COLUMN: email}, creating=True)
            row = await rec.insert_record(conn, table=table, row=prepared)
            account = await au.insert_user(
                conn, workspace_id=workspace_id, table_id=table.id, record_id=row["id"], email=email,
                password_hash=password_hash,
            )
            session = await _session(state, conn, account)
            if changed:
                await state.caches.notify(conn, workspace_id=workspace_id)
    except psycopg.errors.UniqueViolation:
        raise Conflict("an account with this e-mail already exists") from None
    finally:
        if changed:
            state.caches.drop_schema(workspace_id)
    return {**session, "user": _user_out(table, row, account)}


async def _throttled(keys: list[tuple[Any, str]]) -> None:
    for item, key in keys:
        if not await _limiter.test(item, "auth", key):
            stats = await _limiter.get_window_stats(item, "auth", key)
            retry = max(1, int(stats.reset_time - time.time()))
            raise RateLimited(
                "too many failed sign-ins; try again later", code="AUTH_RATE_LIMIT",
                headers={"Retry-After": str(retry)},
            )


async def password_grant(state: AppState, *, workspace_id: int, email: Any, password: Any, ip: str) -> dict[str, Any]:
    """Sign in with e-mail and password; 401 on a mismatch, 429 when throttled."""
    if not isinstance(password, str) or not isinstance(email, str):
        raise ServiceError("email and password are required for grant_type=password")
    email = email.strip().lower()
    keys = [(_FAILS_PER_EMAIL, f"email:{workspace_id}:{email}"), (_FAILS_PER_IP, f"ip:{ip}")]
    await _throttled(keys)
    await _workspace(state, workspace_id, writing=False)
    async with state.db.connection() as conn:
        account = await au.get_by_email(conn, workspace_id=workspace_id, email=email)
    stored = account["password_hash"] if account else _dummy_hash()
    ok, new_hash = await asyncio.to_thread(_PASSWORDS.verify_and_update, password[: au.MAX_PASSWORD], stored)
    if account is None or not ok:
        for item, key in keys:
            await _limiter.hit(item, "auth", key)
        raise Unauthorized("invalid e-mail or password", code="INVALID_CREDENTIALS")
    await _limiter.clear(_FAILS_PER_EMAIL, "auth", keys[0][1])
    async with state.db.transaction() as conn:
        if new_hash:
            await au.set_password_hash(conn, user_id=account["id"], password_hash=new_hash)
        session = await _session(state, conn, account)
    table, row = await _user_record(state, account)
    return {**session, "user": _user_out(table, row, account)}


async def refresh_grant(state: AppState, *, workspace_id: int, refresh_token: Any) -> dict[str, Any]:
    """Rotate a refresh token; reuse of a rotated one revokes the session family (401)."""
    if not isinstance(refresh_token, str) or not refresh_token or len(refresh_token) > 200:
        raise ServiceError("refresh_token is required for grant_type=refresh_token")
    async with state.db.transaction() as conn:
        used = await au.consume_refresh(conn, workspace_id=workspace_id, token=refresh_token)
        if used is None:
            account = None
        else:
            cur = await conn.execute("SELECT * FROM wds.app_users WHERE id = %s", (used["user_id"],))
            account = await cur.fetchone()
            if account is not None:
                session = await _session(state, conn, account, family=used["family_id"])
    if used is None:
        # a reused token revoked its family: sessions cached elsewhere must drop now
        async with state.db.connection() as conn:
            await state.caches.notify(conn, tokens=True)
        state.caches.drop_tokens()
    if account is None:
        raise Unauthorized("invalid, expired or revoked refresh token")
    table, row = await _user_record(state, account)
    return {**session, "user": _user_out(table, row, account)}


async def current_user(state: AppState, token: str) -> dict[str, Any]:
    principal = await app_user_principal(state, token)
    assert principal.app_user_id is not None
    async with state.db.connection() as conn:
        account = await au.get_by_record(conn, workspace_id=principal.workspace_id, record_id=principal.app_user_id)
    if account is None:
        raise Unauthorized("invalid, expired or revoked token")
    table, row = await _user_record(state, account)
    return _user_out(table, row, account)


async def logout(state: AppState, *, token: str | None, refresh_token: Any, workspace_id: Any) -> None:
    """Revoke the session family named by the access token or by a refresh token."""
    family: str | None = None
    if token:
        family = str(decode_access(state, token)["sid"])
    elif isinstance(refresh_token, str) and isinstance(workspace_id, int):
        async with state.db.connection() as conn:
            family = await au.family_of(conn, workspace_id=workspace_id, token=refresh_token)
    if family is None:
        raise Unauthorized("send the access token, or {workspace_id, refresh_token}")
    async with state.db.transaction() as conn:
        await au.revoke_family(conn, family_id=family)
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
