"""Storage buckets and objects: metadata in ``wds.buckets``/``wds.objects``, bytes in obstore.

Object keys in the store are ``<workspace_id>/<bucket_id>/<path>``: the workspace and
bucket come from our metadata, never from the client, and ``path`` passes
:func:`clean_path` (no ``..``, ``.``, empty segments, absolute paths, backslashes, NUL or
control characters), so a client can name nothing outside its own bucket.

Signed URLs carry ``token=<expires>.<hmac>``: HMAC-SHA256 over bucket id, path and expiry
with a key derived from the service's ``secret_key``. Bucket ids are unique per
deployment, so a signature names exactly one workspace's object.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import mimetypes
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import obstore
import psycopg
from obstore.store import LocalStore, from_url
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from storage.errors import Conflict, Forbidden, InvalidValue, NotFound, ServiceError, Unavailable, ValidationError
from storage.schema import ColumnType, TableMeta

Conn = AsyncConnection[Any]
MAX_PATH = 1024
MAX_SEGMENT = 255
_BUCKET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# route words under /storage/v1/object/ that a bucket name would shadow
RESERVED_NAMES = frozenset({"list", "public", "sign", "authenticated", "info", "upload"})
_GENERIC_TYPES = {"", "application/octet-stream", "application/x-www-form-urlencoded", "multipart/form-data"}
_MAGIC: tuple[tuple[int, bytes, str], ...] = (
    (0, b"\x89PNG\r\n\x1a\n", "image/png"),
    (0, b"\xff\xd8\xff", "image/jpeg"),
    (0, b"GIF87a", "image/gif"),
    (0, b"GIF89a", "image/gif"),
    (0, b"%PDF-", "application/pdf"),
    (0, b"PK\x03\x04", "application/zip"),
    (0, b"\x1f\x8b", "application/gzip"),
    (0, b"ID3", "audio/mpeg"),
    (0, b"OggS", "audio/ogg"),
    (0, b"\x1aE\xdf\xa3", "video/webm"),
    (0, b"BM", "image/bmp"),
    (0, b"\x00\x00\x01\x00", "image/x-icon"),
    (4, b"ftyp", "video/mp4"),
)


# --------------------------------------------------------------------------- pure helpers


def clean_bucket_name(name: Any) -> str:
    """Validate a bucket name: 1–63 of ``A-Z a-z 0-9 . _ -``, not all digits, not reserved."""
    if not isinstance(name, str) or not _BUCKET_NAME.match(name):
        raise ValidationError("bucket name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
    if name.isdigit() or name.lower() in RESERVED_NAMES:
        raise ValidationError(f"{name!r} cannot be a bucket name (all digits or a reserved word)")
    return name


def clean_path(path: str) -> str:
    """Validate an object path; the result is used verbatim in the store key.

    >>> clean_path("avatars/u1/me.png")
    'avatars/u1/me.png'
    >>> clean_path("../etc/passwd")
    Traceback (most recent call last):
    ...
    storage.errors.ValidationError: object paths cannot contain '.' or '..' segments
    """
    if not isinstance(path, str) or not path:
        raise ValidationError("the object path is empty")
    if len(path.encode()) > MAX_PATH:
        raise ValidationError(f"object paths are at most {MAX_PATH} bytes")
    if path.startswith("/"):
        raise ValidationError("object paths are relative (no leading '/')")
    if "\\" in path or any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        raise ValidationError("object paths cannot contain backslashes or control characters")
    segments = path.split("/")
    for seg in segments:
        if seg in (".", ".."):
            raise ValidationError("object paths cannot contain '.' or '..' segments")
        if not seg:
            raise ValidationError("object paths cannot contain empty segments ('//' or a trailing '/')")
        if len(seg.encode()) > MAX_SEGMENT:
            raise ValidationError(f"object path segments are at most {MAX_SEGMENT} bytes")
    return path


def clean_prefix(prefix: str | None) -> str:
    """A listing prefix: empty, or a path (a trailing ``/`` allowed)."""
    if not prefix:
        return ""
    body = prefix[:-1] if prefix.endswith("/") else prefix
    return clean_path(body) + ("/" if prefix.endswith("/") else "")


def object_key(workspace_id: int, bucket_id: int, path: str) -> str:
    return f"{int(workspace_id)}/{int(bucket_id)}/{path}"


def staging_key(workspace_id: int) -> str:
    """A fresh key an upload streams to before it is known to win its path.

    ``<workspace_id>/.staging/<random>``: bucket ids are digits, so it names no object.
    The upload moves it to :func:`object_key` under :func:`lock_workspace_storage` once
    the path is its own, or deletes it; a loser of a race never touches the winner's bytes.
    """
    return f"{int(workspace_id)}/.staging/{uuid.uuid4().hex}"


def sniff_content_type(head: bytes, declared: str | None, path: str) -> str:
    """The declared type when specific, else magic bytes, else the file extension."""
    kind = (declared or "").split(";")[0].strip().lower()
    if kind not in _GENERIC_TYPES and re.fullmatch(r"[a-z0-9.+-]+/[a-z0-9.+-]+", kind):
        return (declared or "").strip()[:200]
    for offset, magic, mime in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return mime
    if head[:4] == b"RIFF" and head[8:12] in (b"WEBP", b"WAVE"):
        return "image/webp" if head[8:12] == b"WEBP" else "audio/wav"
    guessed, _ = mimetypes.guess_type(path)
    if guessed:
        return guessed
    if head and b"\x00" not in head[:512]:
        try:
            head[:512].decode()
            return "text/plain; charset=utf-8"
        except UnicodeDecodeError:
            pass
    return "application/octet-stream"


def signing_key(secret_key: str | None) -> bytes:
    if not secret_key:
        raise Unavailable("signed URLs need WDS_SECRET_KEY", code="NOT_CONFIGURED")
    return hmac.new(secret_key.encode(), b"wds-storage-signed-url-v1", hashlib.sha256).digest()


def _mac(key: bytes, bucket_id: int, path: str, expires: int) -> str:
    digest = hmac.new(key, f"{int(bucket_id)}\n{path}\n{int(expires)}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sign(key: bytes, bucket_id: int, path: str, expires: int) -> str:
    """``<expires>.<mac>``: the ``token`` query parameter of a signed URL."""
    return f"{int(expires)}.{_mac(key, bucket_id, path, expires)}"


def verify(key: bytes, bucket_id: int, path: str, token: str | None, now: float | None = None) -> bool:
    """True when ``token`` signs this object and has not expired."""
    # ASCII only: str.isdigit takes other scripts' digits ("²") that int() refuses, and
    # hmac.compare_digest refuses non-ASCII text
    if not token or "." not in token or len(token) > 200 or not token.isascii():
        return False
    exp_text, _, mac = token.partition(".")
    if not exp_text.isdigit():
        return False
    expires = int(exp_text)
    if expires < (time.time() if now is None else now):
        return False
    return hmac.compare_digest(mac, _mac(key, bucket_id, path, expires))


def rounded_expiry(ttl_s: int, now: float | None = None) -> int:
    """An expiry at least ``ttl_s`` ahead, rounded up so repeated reads give the same URL."""
    step = max(60, ttl_s // 4)
    at = int((time.time() if now is None else now) + ttl_s)
    return at + (-at % step)


# --------------------------------------------------------------------------- object store


def make_store(url: str | None, data_dir: Path) -> Any:
    """The configured obstore store: local files under ``data_dir/storage`` by default."""
    if not url:
        root = Path(data_dir).resolve() / "storage"
        root.mkdir(parents=True, exist_ok=True)
        return LocalStore(prefix=root, mkdir=True)
    if url.startswith("file://"):
        Path(url[7:]).mkdir(parents=True, exist_ok=True)
        return from_url(url, mkdir=True)
    return from_url(url)


class ObjectStorage:
    """Thin async wrapper over an obstore store; store failures become 503 UNAVAILABLE."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def put(self, key: str, data: AsyncIterator[bytes] | bytes) -> None:
        try:
            await obstore.put_async(self.store, key, data)
        except ServiceError:
            raise
        except ValueError as exc:
            raise ValidationError("the object path is not valid for the store") from exc
        except Exception as exc:
            raise Unavailable("the object store is not reachable right now") from exc

    async def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing what ``dst`` held (atomic on a file system)."""
        try:
            await obstore.rename_async(self.store, src, dst, overwrite=True)
        except Exception as exc:
            raise Unavailable("the object store is not reachable right now") from exc

    async def open(self, key: str, chunk: int = 256 * 1024) -> tuple[int, AsyncIterator[bytes]]:
        """Size and a byte stream of an object; 404 when the store no longer has it."""
        try:
            result = await obstore.get_async(self.store, key)
        except FileNotFoundError:
            raise NotFound("object not found") from None
        except Exception as exc:
            raise Unavailable("the object store is not reachable right now") from exc
        return int(result.meta["size"]), result.stream(min_chunk_size=chunk).__aiter__()

    async def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                await obstore.delete_async(self.store, key)
            except FileNotFoundError:
                continue
            except Exception as exc:
                raise Unavailable("the object store is not reachable right now") from exc


# --------------------------------------------------------------------------- metadata


async def create_bucket(
    conn: Conn, *, workspace_id: int, name: str, public: bool, token_id: int | None = None
) -> dict[str, Any]:
    try:
        cur = await conn.execute(
            "INSERT INTO wds.buckets (workspace_id, name, public, created_by_token_id) VALUES (%s, %s, %s, %s)"
            " RETURNING id, name, public, created_at",
            (workspace_id, name, public, token_id),
        )
    except psycopg.errors.UniqueViolation:
        raise Conflict(f"a bucket named {name!r} already exists") from None
    row = await cur.fetchone()
    assert row is not None
    return row


async def list_buckets(conn: Conn, *, workspace_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT id, name, public, created_at FROM wds.buckets WHERE workspace_id = %s ORDER BY id",
        (workspace_id,),
    )
    return await cur.fetchall()


async def get_bucket(conn: Conn, *, workspace_id: int, ref: str | int) -> dict[str, Any] | None:
    """A bucket of this workspace by id (digits) or name; other workspaces' never match."""
    text = str(ref)
    if text.isascii() and text.isdigit() and len(text) <= 18:
        cur = await conn.execute(
            "SELECT id, workspace_id, name, public FROM wds.buckets WHERE id = %s AND workspace_id = %s",
            (int(text), workspace_id),
        )
    else:
        cur = await conn.execute(
            "SELECT id, workspace_id, name, public FROM wds.buckets WHERE name = %s AND workspace_id = %s",
            (text, workspace_id),
        )
    return await cur.fetchone()


async def bucket_by_id(conn: Conn, *, bucket_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT id, workspace_id, name, public FROM wds.buckets WHERE id = %s", (bucket_id,)
    )
    return await cur.fetchone()


async def delete_bucket(conn: Conn, *, bucket_id: int) -> list[str]:
    """Delete a bucket and its object rows; returns the object paths to remove from the store."""
    cur = await conn.execute("DELETE FROM wds.objects WHERE bucket_id = %s RETURNING path", (bucket_id,))
    paths = [r["path"] for r in await cur.fetchall()]
    await conn.execute("DELETE FROM wds.buckets WHERE id = %s", (bucket_id,))
    return paths


async def used_bytes(conn: Conn, *, workspace_id: int) -> int:
    cur = await conn.execute(
        "SELECT coalesce(sum(size), 0)::bigint AS n FROM wds.objects WHERE workspace_id = %s", (workspace_id,)
    )
    row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def lock_workspace_storage(conn: Conn, *, workspace_id: int) -> None:
    """Serialise one workspace's object writes (inside a transaction): the quota check, the
    existence and folder checks, the row and the move of the bytes to their key happen
    together, so two uploads of one path cannot both find it free."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('wds-storage'), %s::int)", (workspace_id % 2**31,))


async def get_object(conn: Conn, *, bucket_id: int, path: str) -> dict[str, Any] | None:
    cur = await conn.execute(
        "SELECT id, path, size, content_type, created_at FROM wds.objects WHERE bucket_id = %s AND path = %s",
        (bucket_id, path),
    )
    return await cur.fetchone()


async def path_clash(conn: Conn, *, bucket_id: int, path: str) -> str | None:
    """An object of the bucket whose path is a folder of ``path`` (``a`` for ``a/b``), or
    lies under ``path`` taken as a folder (``a/b`` for ``a``): such an object and ``path``
    cannot both exist (a file system store cannot hold a file and a folder of one name;
    the rule holds on every store alike). ``None`` when there is none."""
    parts = path.split("/")
    folders = ["/".join(parts[:i]) for i in range(1, len(parts))]
    cur = await conn.execute(
        "SELECT path FROM wds.objects WHERE bucket_id = %s AND (path = ANY(%s) OR starts_with(path, %s)) LIMIT 1",
        (bucket_id, folders, path + "/"),
    )
    row = await cur.fetchone()
    return None if row is None else str(row["path"])


async def put_object_row(
    conn: Conn, *, workspace_id: int, bucket_id: int, path: str, size: int, content_type: str,
    replace: bool = True,
) -> dict[str, Any]:
    """Insert the object's row, or replace an existing one's when ``replace``.

    Raises:
        Conflict: the path is taken and ``replace`` is false (nothing is changed).
    """
    on_conflict = (
        " ON CONFLICT (bucket_id, path) DO UPDATE SET size = excluded.size,"
        " content_type = excluded.content_type, created_at = now()"
        if replace else " ON CONFLICT (bucket_id, path) DO NOTHING"
    )
    cur = await conn.execute(
        "INSERT INTO wds.objects (workspace_id, bucket_id, path, size, content_type) VALUES (%s, %s, %s, %s, %s)"
        + on_conflict + " RETURNING id, path, size, content_type, created_at",
        (workspace_id, bucket_id, path, size, content_type),
    )
    row = await cur.fetchone()
    if row is None:
        raise Conflict(f"object {path!r} already exists; send x-upsert: true to replace it")
    return row


async def delete_object_row(conn: Conn, *, bucket_id: int, path: str) -> bool:
    cur = await conn.execute(
        "DELETE FROM wds.objects WHERE bucket_id = %s AND path = %s RETURNING id", (bucket_id, path)
    )
    return await cur.fetchone() is not None


async def list_objects(
    conn: Conn, *, bucket_id: int, prefix: str, limit: int, offset: int
) -> list[dict[str, Any]]:
    # prefix match on text without LIKE, so '%' and '_' in a prefix are literal
    cur = await conn.execute(
        "SELECT path, size, content_type, created_at FROM wds.objects"
        " WHERE bucket_id = %s AND left(path, length(%s)) = %s ORDER BY path LIMIT %s OFFSET %s",
        (bucket_id, prefix, prefix, limit, offset),
    )
    return await cur.fetchall()


# --------------------------------------------------------------------------- file columns


def parse_own_url(url: str, base_url: str) -> tuple[str, str] | None:
    """``(bucket ref, path)`` when ``url`` is one of this service's object URLs, else None.

    Lets a client write back the URL it read from a file cell (public, signed or
    authenticated form) and keep an object reference rather than an expiring link.
    """
    prefix = base_url.rstrip("/") + "/storage/v1/object/"
    if not url.startswith(prefix):
        return None
    rest = urlsplit(url[len(prefix):]).path
    parts = rest.split("/", 2)
    if parts and parts[0] in ("public", "sign", "authenticated") and len(parts) == 3:
        return parts[1], unquote(parts[2])
    first, _, path = rest.partition("/")
    if first and path and first not in RESERVED_NAMES:
        return unquote(first), unquote(path)
    return None


async def resolve_file_refs(
    conn: Conn, *, table: TableMeta, values: dict[int, Any], base_url: str,
    may_read: Callable[[int, bool, str], bool] | None = None,
) -> None:
    """Resolve ``{bucket, path}`` items of file columns in place to ``{bucket_id, path, public}``.

    ``values`` is a prepared row's column id → encoded value (``Jsonb`` lists for file
    columns). The bucket must belong to the table's workspace and the object must exist;
    with ``may_read(bucket_id, public, path)``, the writer must be able to read it (a file
    cell of an authenticated bucket reads back as a signed URL).

    Raises:
        InvalidValue: unknown bucket (in this workspace) or missing object.
        Forbidden: an object the writer may not read.
    """
    buckets: dict[str, dict[str, Any] | None] = {}
    for col in table.columns:
        if col.type is not ColumnType.FILE or not isinstance(values.get(col.id), Jsonb):
            continue
        items = values[col.id].obj
        out: list[dict[str, Any]] = []
        for item in items:
            ref: tuple[str, str] | None = None
            if "bucket" in item:
                ref = (str(item["bucket"]), str(item["path"]))
            elif "url" in item:
                ref = parse_own_url(str(item["url"]), base_url)
            if ref is None:
                out.append(item)
                continue
            bucket_ref, path = ref
            if bucket_ref not in buckets:
                buckets[bucket_ref] = await get_bucket(conn, workspace_id=table.workspace_id, ref=bucket_ref)
            bucket = buckets[bucket_ref]
            if bucket is None:
                raise InvalidValue(f"column {col.name!r}: no bucket {bucket_ref!r} in this workspace")
            if may_read is not None and not may_read(bucket["id"], bool(bucket["public"]), path):
                raise Forbidden(f"column {col.name!r}: no read grant on bucket {bucket['name']!r} at {path!r}")
            if await get_object(conn, bucket_id=bucket["id"], path=path) is None:
                raise InvalidValue(f"column {col.name!r}: no object {path!r} in bucket {bucket['name']!r}")
            out.append({"bucket_id": bucket["id"], "path": path, "public": bool(bucket["public"])})
        values[col.id] = Jsonb(out)


def bucket_out(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "public": bool(row["public"])}


def has_object_refs(table: TableMeta, values: Mapping[int, Any], base_url: str) -> bool:
    """Whether a prepared row holds file items that :func:`resolve_file_refs` must resolve."""
    files = table.memo.get("file_columns")
    if files is None:  # once per schema version: each row of a batch asks
        files = table.memo["file_columns"] = tuple(col for col in table.columns if col.type is ColumnType.FILE)
    if not files:
        return False
    own = base_url.rstrip("/") + "/storage/v1/object/"
    for col in files:
        value = values.get(col.id)
        if isinstance(value, Jsonb) and any("bucket" in it or str(it.get("url", "")).startswith(own)
                                            for it in value.obj):
            return True
    return False
