"""App users of a workspace (DESIGN §4 "App users"): accounts, the Users table, refresh tokens.

Where things live:

* the profile is a record of the workspace's real ``Users`` table (columns ``Email``,
  required text, and ``Name``, text), created on the first sign-up;
* e-mail (lower-cased), the argon2 password hash and the Users record id live in
  ``wds.app_users`` (migration m0006), never in a visible column, so no token, SQL query
  or export of the Users table can read a hash;
* refresh tokens are stored hashed in ``wds.app_refresh_tokens`` with a ``family_id``:
  every refresh rotates the token, and presenting a rotated (revoked) token again revokes
  the whole family — a stolen refresh token dies the first time both parties use it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from psycopg import AsyncConnection

from storage import meta
from storage.access import BUCKET_GRANTS_SQL, Principal
from storage.columnspec import ColumnSpec
from storage.errors import Conflict, Forbidden, ServiceError, ValidationError
from storage.schema import ColumnType, TableMeta

Conn = AsyncConnection[Any]
USERS_TABLE = "Users"
EMAIL_COLUMN = "Email"
NAME_COLUMN = "Name"
MIN_PASSWORD = 8
MAX_PASSWORD = 1024
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")
# a small deny-list of the most common passwords of at least 8 characters
COMMON_PASSWORDS = frozenset(
    """
    password password1 password12 password123 password1234 passw0rd p@ssw0rd p@ssword
    12345678 123456789 1234567890 0123456789 87654321 11111111 00000000 12341234 11223344
    qwertyui qwerty123 qwertyuiop qwerty12 1q2w3e4r 1qaz2wsx zaq12wsx asdfghjk asdfasdf
    iloveyou sunshine princess football baseball welcome1 welcome123 superman batman123
    trustno1 letmein1 letmeinnow abc12345 abcd1234 abcdefgh aa123456 monkey123 dragon123
    changeme changeme123 administrator admin123 admin1234 computer internet whatever
    starwars master123 michael1 jennifer shadow12 football1 iloveyou1 secret123 test1234
    """.split()
)


def check_own_profile_row(principal: Principal, rid: int, fields: Iterable[str]) -> None:
    """An app user writes only its own row of the Users table, and not its e-mail (the
    one it signed up with, which signs it in): its direct writes and the record steps
    its writes run (activities/records.py) alike.

    Raises:
        Forbidden: another user's row, or the e-mail column.
    """
    if rid != principal.app_user_id:
        raise Forbidden("an app user may change only its own row of the Users table")
    if EMAIL_COLUMN in fields:
        raise Forbidden(f"{EMAIL_COLUMN} is the e-mail the account signs in with: it is not changed by a"
                        " record write")


def normalize_email(value: Any) -> str:
    """Trimmed, lower-cased e-mail; 400 VALIDATION_ERROR when it does not look like one."""
    if not isinstance(value, str):
        raise ValidationError("email must be a string")
    email = value.strip().lower()
    if len(email) > 254 or not _EMAIL.match(email):
        raise ValidationError("email is not a valid e-mail address")
    return email


def check_password(password: Any, email: str | None = None) -> str:
    """Refuse weak passwords (400 WEAK_PASSWORD): short, common, or the e-mail itself.

    >>> check_password("correct horse battery")
    'correct horse battery'
    >>> check_password("password1")
    Traceback (most recent call last):
    ...
    storage.errors.ServiceError: this password is too common
    """
    if not isinstance(password, str):
        raise ValidationError("password must be a string")
    if len(password) < MIN_PASSWORD:
        raise ServiceError(f"passwords have at least {MIN_PASSWORD} characters", code="WEAK_PASSWORD")
    if len(password) > MAX_PASSWORD:
        raise ServiceError(f"passwords have at most {MAX_PASSWORD} characters", code="WEAK_PASSWORD")
    lowered = password.lower()
    if lowered in COMMON_PASSWORDS or len(set(password)) < 3:
        raise ServiceError("this password is too common", code="WEAK_PASSWORD")
    if email and lowered in (email, email.split("@")[0]):
        raise ServiceError("the password cannot be the e-mail address", code="WEAK_PASSWORD")
    return password


# a column whose name says role, permission or ownership is never filled by the user signing up
_PRIVILEGED = re.compile(r"role|admin|permission|privilege|staff|superuser|owner|grant|scope|access|verified",
                         re.IGNORECASE)
MAX_SIGNUP_FIELDS = 50


def clean_signup_fields(names: Any) -> list[str]:
    """Validate a workspace's self-service sign-up columns (``signup_fields``).

    >>> clean_signup_fields(["Name", "Company"])
    ['Name', 'Company']
    >>> clean_signup_fields(["Role"])
    Traceback (most recent call last):
    ...
    storage.errors.ValidationError: 'Role' looks like a role or permission column: never filled at sign-up

    Raises:
        ValidationError: not a list of distinct column names, Email, or a privileged-looking name.
    """
    if not isinstance(names, list) or len(names) > MAX_SIGNUP_FIELDS:
        raise ValidationError(f"signup_fields must be a list of at most {MAX_SIGNUP_FIELDS} column names")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name.strip() or len(name) > 255:
            raise ValidationError("signup_fields holds column names (1-255 characters)")
        if name == EMAIL_COLUMN:
            raise ValidationError(f"{EMAIL_COLUMN} is always the e-mail signed up with")
        if _PRIVILEGED.search(name):
            raise ValidationError(f"{name!r} looks like a role or permission column: never filled at sign-up")
        if name in out:
            raise ValidationError(f"{name!r} is listed twice")
        out.append(name)
    return out


def check_signup_fields(fields: dict[str, Any], allowed: list[str]) -> dict[str, Any]:
    """The sign-up ``fields``, each of which must be one of the workspace's ``signup_fields``.

    Raises:
        ServiceError: 400 SIGNUP_FIELD_NOT_ALLOWED naming the refused fields.
    """
    refused = sorted(k for k in fields if k not in allowed)
    if refused:
        raise ServiceError(
            f"sign-up does not take {', '.join(map(repr, refused))}; this workspace's sign-up fields are "
            f"{allowed or 'none'}", code="SIGNUP_FIELD_NOT_ALLOWED",
        )
    return fields


def hash_refresh(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_refresh_token() -> str:
    # no "wds_" prefix: a refresh token is never a bearer credential
    return "rt_" + secrets.token_urlsafe(32)


# --------------------------------------------------------------------------- Users table


async def ensure_users_table(conn: Conn, *, workspace_id: int) -> tuple[TableMeta, bool]:
    """The workspace's Users table with its Email and Name columns, created if missing.

    Runs in the caller's transaction, which must hold the workspace's schema lock. Returns
    the table and whether the schema changed (the caller then invalidates caches).

    Raises:
        Conflict: a Users table exists whose Email or Name column is not text.
    """
    schema = await meta.load_schema(conn, workspace_id=workspace_id)
    table = schema.table(USERS_TABLE)
    changed = False
    if table is None:
        row = await meta.create_table(conn, workspace_id=workspace_id, name=USERS_TABLE, icon="users", token_id=None)
        table_id = row["id"]
        changed = True
    else:
        table_id = table.id
    for name, required in ((EMAIL_COLUMN, True), (NAME_COLUMN, False)):
        col = table.column(name) if table is not None else None
        if col is None:
            await meta.create_column(
                conn, workspace_id=workspace_id, table_id=table_id,
                spec=ColumnSpec(name=name, type=ColumnType.TEXT, required=required),
            )
            changed = True
        elif col.type is not ColumnType.TEXT:
            raise Conflict(f"the {USERS_TABLE} table's {name} column must be text")
    if changed:
        schema = await meta.load_schema(conn, workspace_id=workspace_id)
    found = schema.tables.get(table_id)
    assert found is not None
    return found, changed


# --------------------------------------------------------------------------- accounts


async def workspace_state(conn: Conn, *, workspace_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT id, plan, read_only, relay_profile_id, signup_fields FROM wds.workspaces WHERE id = %s",
        (workspace_id,),
    )
    return await cur.fetchone()


async def get_by_email(conn: Conn, *, workspace_id: int, email: str) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT * FROM wds.app_users WHERE workspace_id = %s AND email = %s", (workspace_id, email)
    )
    return await cur.fetchone()


async def has_accounts(conn: Conn, *, table_id: int) -> bool:
    """Whether app users sign in with this table's profile rows (it is their Users table)."""
    cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM wds.app_users WHERE table_id = %s) AS yes", (table_id,))
    row = await cur.fetchone()
    return bool(row and row["yes"])


async def get_by_record(conn: Conn, *, workspace_id: int, record_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT * FROM wds.app_users WHERE workspace_id = %s AND record_id = %s", (workspace_id, record_id)
    )
    return await cur.fetchone()


async def insert_user(
    conn: Conn, *, workspace_id: int, table_id: int, record_id: int, email: str, password_hash: str
) -> dict[str, Any]:
    cur = await conn.execute(
        "INSERT INTO wds.app_users (workspace_id, table_id, record_id, email, password_hash)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING *",
        (workspace_id, table_id, record_id, email, password_hash),
    )
    row = await cur.fetchone()
    assert row is not None
    return row


async def set_password_hash(conn: Conn, *, user_id: int, password_hash: str) -> None:
    await conn.execute("UPDATE wds.app_users SET password_hash = %s WHERE id = %s", (password_hash, user_id))


# --------------------------------------------------------------------------- refresh tokens


async def issue_refresh(
    conn: Conn, *, workspace_id: int, user_id: int, family_id: str, ttl_s: int
) -> str:
    """Store a new refresh token of ``family_id``; returns its secret (shown once)."""
    token = new_refresh_token()
    await conn.execute(
        "INSERT INTO wds.app_refresh_tokens (workspace_id, user_id, token_hash, expires_at, family_id)"
        " VALUES (%s, %s, %s, %s, %s)",
        (workspace_id, user_id, hash_refresh(token),
         datetime.now(timezone.utc) + timedelta(seconds=ttl_s), family_id),
    )
    return token


async def consume_refresh(conn: Conn, *, workspace_id: int, token: str) -> dict[str, Any] | None:
    """Rotate: revoke the presented token and return its row; ``None`` when unusable.

    A token that was already revoked (rotated or signed out) revokes its whole family:
    someone presented a token that its owner has already exchanged.
    """
    cur = await conn.execute(
        "UPDATE wds.app_refresh_tokens SET revoked_at = now()"
        " WHERE token_hash = %s AND workspace_id = %s AND revoked_at IS NULL AND expires_at > now()"
        " RETURNING id, user_id, family_id",
        (hash_refresh(token), workspace_id),
    )
    row = await cur.fetchone()
    if row is not None:
        return row
    cur = await conn.execute(
        "SELECT family_id, revoked_at FROM wds.app_refresh_tokens WHERE token_hash = %s AND workspace_id = %s",
        (hash_refresh(token), workspace_id),
    )
    old = await cur.fetchone()
    if old is not None and old["revoked_at"] is not None and old["family_id"]:
        await revoke_family(conn, family_id=old["family_id"])
    return None


async def revoke_family(conn: Conn, *, family_id: str) -> None:
    await conn.execute(
        "UPDATE wds.app_refresh_tokens SET revoked_at = now() WHERE family_id = %s AND revoked_at IS NULL",
        (family_id,),
    )


async def family_of(conn: Conn, *, workspace_id: int, token: str) -> str | None:
    cur = await conn.execute(
        "SELECT family_id FROM wds.app_refresh_tokens WHERE token_hash = %s AND workspace_id = %s",
        (hash_refresh(token), workspace_id),
    )
    row = await cur.fetchone()
    return row["family_id"] if row else None


async def session_principal_row(
    conn: Conn, *, workspace_id: int, record_id: int, family_id: str
) -> dict[str, Any] | None:
    """Workspace state, relay grants (tables and buckets) and liveness of one app-user
    session, in one query.

    ``None`` when the user no longer exists or the session's family is revoked.
    """
    cur = await conn.execute(
        "SELECT w.plan, w.read_only, w.relay_profile_id, u.id AS user_id, u.table_id AS users_table_id,"
        " coalesce((SELECT jsonb_agg(jsonb_build_array(g.table_id, g.can_read, g.can_create,"
        "   g.can_update, g.can_delete)) FROM wds.grants g WHERE g.profile_id = w.relay_profile_id), '[]')"
        "   AS grants, "
        + BUCKET_GRANTS_SQL.format(profile="w.relay_profile_id") + " AS bucket_grants"
        " FROM wds.app_users u JOIN wds.workspaces w ON w.id = u.workspace_id"
        " WHERE u.workspace_id = %s AND u.record_id = %s"
        " AND EXISTS (SELECT 1 FROM wds.app_refresh_tokens r WHERE r.family_id = %s"
        "   AND r.user_id = u.id AND r.revoked_at IS NULL)",
        (workspace_id, record_id, family_id),
    )
    return await cur.fetchone()
