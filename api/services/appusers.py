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

Brute force (issue 22): every password sign-in takes a slot in two moving windows
*before* the password is checked — per account + client IP (``WDS_SIGNIN_FAILS_PER_ACCOUNT_IP``,
5 per 15 minutes) and per account from any IP (``WDS_SIGNIN_FAILS_PER_ACCOUNT``, 50 per 15
minutes) — and a successful sign-in frees them. Taking the slot first is what makes the
limit hold under concurrency: 50 parallel wrong passwords get 5 × 401 and 45 × 429
``AUTH_RATE_LIMIT``, not 50 checks made before any failure was counted. There is no
per-IP window across accounts, so one client failing for one account locks no other
account out of that IP. Sign-ups take a slot per client IP (``WDS_SIGNUPS_PER_IP``, 30 per
10 minutes) and per workspace (``WDS_SIGNUPS_PER_WORKSPACE``, 300 per 10 minutes) → 429
``SIGNUP_RATE_LIMIT``. The windows live in the shared limiter store of :mod:`api.services.limits`
(Redis with ``WDS_REDIS_URL``: every API process counts together; the ``limits`` library's
moving-window hit is atomic there and in memory); if Redis fails they fall back to this
process's memory.

Sign-up ``fields`` may name only the workspace's ``signup_fields`` (none by default) →
400 ``SIGNUP_FIELD_NOT_ALLOWED``. Password hashing runs on a small thread pool
(``WDS_PASSWORD_HASH_THREADS``, 2): argon2 takes ~50 ms and 64 MiB per hash, so a burst
queues there instead of taking every default-executor thread and the memory with it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import logging
import math
import re
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import jwt
import psycopg
from fastapi import Request
from limits import RateLimitItem, parse
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher

from api.services import limits
from api.state import AppState
from storage import appusers as au
from storage import records as rec
from storage.access import Perms, Principal, TokenType, bucket_grants_of
from storage.db import current_workspace
from storage.errors import Conflict, Forbidden, RateLimited, ServiceError, Unauthorized, Unavailable
from storage.slots import KeyedSlots
from storage.values import iso_text

ISSUER = "wds"
AUDIENCE = "wds-app"
_PASSWORDS = PasswordHash((Argon2Hasher(),))
# used only while the shared store (Redis) fails
_local_limiter = MovingWindowRateLimiter(MemoryStorage())
log = logging.getLogger("wds.appusers")
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
            app_user_id=record_id, users_table_id=row["users_table_id"],
            bucket_grants=bucket_grants_of(row["bucket_grants"]),
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


# --------------------------------------------------------------------------- throttling and hashing


@functools.cache
def _item(spec: str) -> RateLimitItem:
    return parse(spec)  # validated when the settings were read


async def _take(state: AppState, spec: str, key: str) -> tuple[bool, MovingWindowRateLimiter]:
    """Take one slot of ``spec``'s window for ``key``; False when the window is full."""
    shared = limits.runtime(state).limiter.strategy
    try:
        return await shared.hit(_item(spec), "auth", key), shared
    except Exception as exc:  # the shared store is down: count in this process meanwhile
        log.warning("limiter store unavailable, auth windows are per process: %s", exc)
        return await _local_limiter.hit(_item(spec), "auth", key), _local_limiter


async def _throttle(state: AppState, windows: list[tuple[str, str]], message: str, code: str) -> None:
    """Take a slot in every window, in order; 429 ``code`` with ``Retry-After`` at the first full one."""
    for spec, key in windows:
        ok, limiter = await _take(state, spec, key)
        if not ok:
            try:
                stats = await limiter.get_window_stats(_item(spec), "auth", key)
                retry = max(1, math.ceil(stats.reset_time - time.time()))
            except Exception:
                retry = int(_item(spec).get_expiry())
            raise RateLimited(message, code=code, headers={"Retry-After": str(retry)})


async def _release(state: AppState, windows: list[tuple[str, str]]) -> None:
    for spec, key in windows:
        for limiter in (limits.runtime(state).limiter.strategy, _local_limiter):
            try:
                await limiter.clear(_item(spec), "auth", key)
            except Exception as exc:
                log.warning("could not clear auth window: %s", exc)


async def _hashing(state: AppState, workspace_id: int, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn`` (argon2) on the process's small hashing pool, never on the event loop.

    A workspace has at most ``password_hashes_per_workspace`` hashes on the pool at once;
    its others wait their turn on the loop (first come, first served), up to
    ``password_hash_wait_s``, then 503 ``WORKSPACE_BUSY``. The pool's queue is shared by
    every workspace of the process: without the slots, a flood of sign-ins at one
    workspace (unknown e-mails need no account and are hashed too) queued every other
    workspace's sign-ins behind it.

    Raises:
        Unavailable: 503 ``WORKSPACE_BUSY`` (``Retry-After``) when no slot came free in time.
    """
    pool: ThreadPoolExecutor | None = state.extras.get("password_pool")
    if pool is None:
        pool = state.extras["password_pool"] = ThreadPoolExecutor(
            max_workers=state.settings.password_hash_threads, thread_name_prefix="wds-argon2")
    slots: KeyedSlots | None = state.extras.get("password_slots")
    if slots is None:
        slots = state.extras["password_slots"] = KeyedSlots(state.settings.password_hashes_per_workspace)
    try:
        release = await slots.take(workspace_id, state.settings.password_hash_wait_s)
    except TimeoutError:
        raise Unavailable("too many sign-ins at this workspace right now; retry shortly",
                          code="WORKSPACE_BUSY", headers={"Retry-After": "1"}) from None
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)
    finally:
        release()


# --------------------------------------------------------------------------- sign-up and sign-in


async def signup(
    state: AppState, *, workspace_id: int, email: Any, password: Any, fields: Any, ip: str = "unknown"
) -> dict[str, Any]:
    """Create the account and its Users record, and sign in (201 body).

    Raises:
        ServiceError: 400 (bad e-mail, WEAK_PASSWORD, SIGNUP_FIELD_NOT_ALLOWED).
        RateLimited: 429 SIGNUP_RATE_LIMIT.
    """
    email = au.normalize_email(email)
    au.check_password(password, email)
    if fields is not None and not isinstance(fields, dict):
        raise ServiceError("fields must be an object of Users columns")
    ws = await _workspace(state, workspace_id, writing=True)
    profile = au.check_signup_fields(fields or {}, list(ws["signup_fields"] or []))
    settings = state.settings
    await _throttle(state, [(settings.signups_per_ip, f"signup:ip:{ip}"),
                            (settings.signups_per_workspace, f"signup:ws:{workspace_id}")],
                    "too many sign-ups; try again later", "SIGNUP_RATE_LIMIT")
    password_hash = await _hashing(state, workspace_id, _PASSWORDS.hash, password)
    changed = False
    try:
        async with state.db.transaction() as conn:
            # the schema lock: the first sign-up may create the Users table
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (workspace_id,))
            if await au.get_by_email(conn, workspace_id=workspace_id, email=email) is not None:
                raise Conflict("an account with this e-mail already exists")
            table, changed = await au.ensure_users_table(conn, workspace_id=workspace_id)
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


async def password_grant(state: AppState, *, workspace_id: int, email: Any, password: Any, ip: str) -> dict[str, Any]:
    """Sign in with e-mail and password; 401 on a mismatch, 429 when throttled."""
    if not isinstance(password, str) or not isinstance(email, str):
        raise ServiceError("email and password are required for grant_type=password")
    email = email.strip().lower()[:320]
    await _workspace(state, workspace_id, writing=False)
    account_key = f"signin:{workspace_id}:{hashlib.sha256(email.encode()).hexdigest()}"
    windows = [(state.settings.signin_fails_per_account_ip, f"{account_key}:{ip}"),
               (state.settings.signin_fails_per_account, account_key)]
    # the slots are taken before the password is checked (see the module docstring)
    await _throttle(state, windows, "too many failed sign-ins; try again later", "AUTH_RATE_LIMIT")
    async with state.db.connection() as conn:
        account = await au.get_by_email(conn, workspace_id=workspace_id, email=email)
    stored = account["password_hash"] if account else _dummy_hash()
    ok, new_hash = await _hashing(state, workspace_id, _PASSWORDS.verify_and_update, password[: au.MAX_PASSWORD], stored)
    if account is None or not ok:
        raise Unauthorized("invalid e-mail or password", code="INVALID_CREDENTIALS")
    await _release(state, windows)
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
