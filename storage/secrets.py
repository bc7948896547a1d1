"""Stored credentials: encryption at rest and their metadata rows (``wds.credentials``).

Secrets are sealed with Fernet (AES-128-CBC + HMAC-SHA256) under a key derived from the
service's ``secret_key`` with HKDF-SHA256, so rotating nothing but that one setting is
enough to keep every workspace's credentials unreadable from a database dump. A secret
goes in once and never comes back out through the API: only pipeline steps (through the
platform proxy) call :meth:`SecretBox.decrypt`.
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from psycopg import AsyncConnection

from storage.errors import ServiceError, Unavailable, ValidationError

Conn = AsyncConnection[Any]
CREDENTIAL_TYPES = ("bearer", "header", "basic", "query")
MAX_SECRET = 16_384
_SALT = b"wds-credentials"
_INFO = b"wds credentials v1"
# columns safe to show: never secret_enc
_PUBLIC = "id, name, type, header_name, created_at"


def derive_key(secret_key: str) -> bytes:
    """The Fernet key (urlsafe base64 of 32 bytes) derived from the service secret."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=_INFO).derive(secret_key.encode())
    return base64.urlsafe_b64encode(raw)


class SecretBox:
    """Seals and opens credential secrets with the service key.

    Raises:
        Unavailable: no ``secret_key`` is configured (code ``NOT_CONFIGURED``).
    """

    def __init__(self, secret_key: str | None) -> None:
        if not secret_key:
            raise Unavailable(
                "credentials cannot be stored: the server has no WDS_SECRET_KEY configured",
                code="NOT_CONFIGURED",
            )
        self._fernet = Fernet(derive_key(secret_key))

    def encrypt(self, plaintext: str) -> bytes:
        return self._fernet.encrypt(plaintext.encode())

    def decrypt(self, sealed: bytes) -> str:
        """Open a sealed secret.

        Raises:
            ServiceError: ``CREDENTIAL_UNREADABLE`` when it was sealed under another key.
        """
        try:
            return self._fernet.decrypt(bytes(sealed)).decode()
        except InvalidToken as exc:
            raise ServiceError(
                "the stored credential cannot be decrypted with the current secret key",
                code="CREDENTIAL_UNREADABLE", status=500,
            ) from exc


def check_credential(*, name: Any, type: Any, secret: Any, header_name: Any) -> tuple[str, str, str, str | None]:
    """Validate a credential definition; returns ``(name, type, secret, header_name)``.

    ``header`` credentials name the header to send; ``query`` credentials name the query
    parameter (in ``header_name``); ``basic`` secrets are ``user:password``.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise ValidationError("credential name must be a non-empty string of at most 255 characters")
    if type not in CREDENTIAL_TYPES:
        raise ValidationError(f"credential type must be one of {', '.join(CREDENTIAL_TYPES)}")
    if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET:
        raise ValidationError(f"secret must be a non-empty string of at most {MAX_SECRET} characters")
    if type in ("header", "query"):
        if not isinstance(header_name, str) or not header_name.strip():
            raise ValidationError(f"a {type} credential needs header_name (the header or query parameter name)")
        header_name = header_name.strip()
    elif header_name is not None:
        raise ValidationError("header_name applies to header and query credentials only")
    if type == "basic" and ":" not in secret:
        raise ValidationError("a basic credential's secret is 'user:password'")
    return name.strip(), type, secret, header_name


async def create_credential(
    conn: Conn, *, workspace_id: int, name: str, type: str, header_name: str | None, sealed: bytes
) -> dict[str, Any]:
    """Insert a credential; returns its public row (no secret)."""
    cur = await conn.execute(
        "INSERT INTO wds.credentials (workspace_id, name, type, header_name, secret_enc)"
        f" VALUES (%s, %s, %s, %s, %s) RETURNING {_PUBLIC}",
        (workspace_id, name, type, header_name, sealed),
    )
    row = await cur.fetchone()
    assert row is not None
    return row


async def list_credentials(conn: Conn, *, workspace_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        f"SELECT {_PUBLIC} FROM wds.credentials WHERE workspace_id = %s ORDER BY id", (workspace_id,)
    )
    return await cur.fetchall()


async def delete_credential(conn: Conn, *, workspace_id: int, ref: int | str) -> dict[str, Any] | None:
    """Delete a credential by id or name; ``None`` when there is none."""
    if isinstance(ref, int) or (isinstance(ref, str) and ref.isascii() and ref.isdigit()):
        cur = await conn.execute(
            f"DELETE FROM wds.credentials WHERE workspace_id = %s AND id = %s RETURNING {_PUBLIC}",
            (workspace_id, int(ref)),
        )
    else:
        cur = await conn.execute(
            f"DELETE FROM wds.credentials WHERE workspace_id = %s AND name = %s RETURNING {_PUBLIC}",
            (workspace_id, ref),
        )
    return await cur.fetchone()


async def load_secret(conn: Conn, *, workspace_id: int, name: str) -> dict[str, Any] | None:
    """A credential's ``type``, ``header_name`` and sealed secret by name (for the proxy)."""
    cur = await conn.execute(
        "SELECT id, name, type, header_name, secret_enc FROM wds.credentials"
        " WHERE workspace_id = %s AND name = %s",
        (workspace_id, name),
    )
    return await cur.fetchone()


async def load_secrets(conn: Conn, *, workspace_id: int, names: list[str]) -> dict[str, dict[str, Any]]:
    """Several credentials at once for the proxy: ``name → {id, name, type, header_name,
    secret_enc}``; names without a credential are absent."""
    if not names:
        return {}
    cur = await conn.execute(
        "SELECT id, name, type, header_name, secret_enc FROM wds.credentials"
        " WHERE workspace_id = %s AND name = ANY(%s)",
        (workspace_id, sorted(set(names))),
    )
    return {row["name"]: row for row in await cur.fetchall()}
