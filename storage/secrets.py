"""Stored credentials: encryption at rest and their metadata rows (``wds.credentials``).

Secrets are sealed with Fernet (AES-128-CBC + HMAC-SHA256) under a key derived from the
service's ``secret_key`` with HKDF-SHA256, so rotating nothing but that one setting is
enough to keep every workspace's credentials unreadable from a database dump. A secret
goes in once and never comes back out through the API: only pipeline steps (through the
platform proxy) call :meth:`SecretBox.decrypt`.

Every credential is bound to ``hosts``: host patterns matched against the host *name* of
the URL a step calls (not its resolved address), checked by the proxy on the first
request and on every redirect (:func:`host_allowed`). A pattern is

* ``api.stripe.com`` — that host exactly (any port);
* ``*.example.com`` — any subdomain at any depth (``a.example.com``, ``a.b.example.com``),
  never the apex ``example.com`` itself (list it too to allow it);
* ``127.0.0.1``, ``[::1]`` — an IP literal, matched as written in the URL;
* any of those with ``:port`` — that port only (the scheme's default port counts:
  ``api.stripe.com:443`` matches ``https://api.stripe.com/``).

Names are compared lower-case, IDNA-encoded and without a trailing dot. An empty list
matches nothing: the migration leaves credentials it could not bind that way.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import idna

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from storage.errors import ServiceError, Unavailable, ValidationError
from storage.refs import strings

Conn = AsyncConnection[Any]
CREDENTIAL_TYPES = ("bearer", "header", "basic", "query")
MAX_SECRET = 16_384
_SALT = b"wds-credentials"
_INFO = b"wds credentials v1"
# columns safe to show: never secret_enc
_PUBLIC = "id, name, type, header_name, hosts, created_at"
MAX_HOSTS = 50
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_URL_AUTHORITY = re.compile(r"^\s*(https?)://([^/?#\\]*)", re.IGNORECASE)
HOSTS_REQUIRED = "CREDENTIAL_HOSTS_REQUIRED"
INVALID_HOST_PATTERN = "INVALID_HOST_PATTERN"


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


# --------------------------------------------------------------------------- host patterns


@dataclass(frozen=True)
class HostPattern:
    """One parsed host pattern (see the module docstring)."""

    host: str  # a lower-case ASCII name, a normalised IP, or the suffix after "*."
    wildcard: bool = False
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"*.{host}" if self.wildcard else host
        return text if self.port is None else f"{text}:{self.port}"

    def matches(self, host: str, port: int) -> bool:
        """Whether a normalised ``host`` (see :func:`normalise_host`) and port fall under it."""
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def _invalid(text: str, why: str) -> ValidationError:
    return ValidationError(f"host pattern {text!r}: {why}", code=INVALID_HOST_PATTERN)


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _dns_name(text: str, raw: str) -> str:
    try:
        name = idna.encode(text, uts46=True).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError):
        # idna refuses underscores, which some real hosts use: fall back to plain ASCII
        if not text.isascii():
            raise _invalid(raw, "not a valid host name") from None
        name = text.lower()
    labels = name.split(".")
    if not all(_LABEL.match(label) for label in labels):
        raise _invalid(raw, "not a valid host name (letters, digits, '-' and '.' only)")
    return name


def parse_host_pattern(text: Any) -> HostPattern:
    """Parse one host pattern.

    >>> str(parse_host_pattern("API.Stripe.com.")), str(parse_host_pattern("*.example.com:8443"))
    ('api.stripe.com', '*.example.com:8443')
    >>> str(parse_host_pattern("[::1]:8080")), str(parse_host_pattern("127.0.0.1"))
    ('[::1]:8080', '127.0.0.1')

    Raises:
        ValidationError: ``INVALID_HOST_PATTERN`` — a URL, a path, a bad port, a wildcard
            other than a whole leading ``*.`` label over at least two labels, or a wildcard IP.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("a host pattern must be a non-empty string", code=INVALID_HOST_PATTERN)
    raw = text
    text = text.strip().lower()
    if len(text) > 260 or any(c in text for c in "/\\@?#%{} \t\r\n"):
        raise _invalid(raw, "give a host name, *.domain or an IP address, optionally with :port — not a URL")
    port: int | None = None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise _invalid(raw, "unclosed '['")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise _invalid(raw, "unexpected text after ']'")
        port_text = rest[1:] if rest else None
        ip = _ip(host)
        if ip is None or ":" not in ip:
            raise _invalid(raw, "brackets hold an IPv6 address")
    elif text.count(":") > 1:
        ip = _ip(text)
        if ip is None:
            raise _invalid(raw, "an IPv6 address with a port is written [address]:port")
        host, port_text = ip, None
    else:
        host, sep, port_text_ = text.partition(":")
        port_text = port_text_ if sep else None
        ip = _ip(host)
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
            raise _invalid(raw, "the port must be a number from 1 to 65535")
        port = int(port_text)
    if ip is not None:
        return HostPattern(host=ip, port=port)
    host = host.rstrip(".")
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if "*" in host:
        raise _invalid(raw, "'*' is allowed only as the whole first label ('*.example.com')")
    if not host:
        raise _invalid(raw, "no host name")
    if wildcard and (_ip(host) is not None or host.count(".") < 1):
        raise _invalid(raw, "a wildcard needs a domain of at least two labels ('*.example.com', not '*.com')")
    return HostPattern(host=_dns_name(host, raw), wildcard=wildcard, port=port)


def check_hosts(value: Any) -> list[str]:
    """Validate a credential's ``hosts``; returns the normalised patterns (duplicates dropped).

    Raises:
        ValidationError: ``CREDENTIAL_HOSTS_REQUIRED`` when absent or empty,
            ``INVALID_HOST_PATTERN`` when a pattern is malformed or there are too many.
    """
    if value is None or (isinstance(value, list) and not value):
        raise ValidationError(
            "hosts is required: the host patterns this credential may be sent to, e.g. [\"api.stripe.com\"]",
            code=HOSTS_REQUIRED)
    if not isinstance(value, list):
        raise ValidationError("hosts must be a list of host patterns", code=INVALID_HOST_PATTERN)
    if len(value) > MAX_HOSTS:
        raise ValidationError(f"at most {MAX_HOSTS} host patterns", code=INVALID_HOST_PATTERN)
    out: list[str] = []
    for item in value:
        text = str(parse_host_pattern(item))
        if text not in out:
            out.append(text)
    return out


def normalise_host(host: str | bytes) -> str:
    """A URL's host as patterns compare it: lower-case ASCII (IDNA), no trailing dot, IPs normalised.

    >>> normalise_host(b"API.example.com."), normalise_host("0:0::1")
    ('api.example.com', '::1')
    """
    text = host.decode("ascii", errors="replace") if isinstance(host, bytes) else host
    text = text.strip().strip("[]").lower().rstrip(".")
    return _ip(text) or text


def url_port(url: httpx.URL) -> int:
    """The port a URL connects to (the scheme's default when it names none)."""
    return url.port if url.port is not None else (443 if url.scheme == "https" else 80)


def host_allowed(patterns: Iterable[str], url: httpx.URL) -> bool:
    """Whether ``url``'s host name (and port) matches one of ``patterns``; an empty list matches nothing."""
    host, port = normalise_host(url.raw_host), url_port(url)
    for text in patterns:
        try:
            if parse_host_pattern(text).matches(host, port):
                return True
        except ValidationError:
            continue  # a stored pattern that no longer parses matches nothing
    return False


def literal_origin(url: Any) -> httpx.URL | None:
    """``scheme://host[:port]/`` of a URL template whose scheme and host part are literal;
    ``None`` when they are templated (``{{ }}``/``{% %}``) or it is not an http(s) URL."""
    if not isinstance(url, str):
        return None
    m = _URL_AUTHORITY.match(url)
    if m is None or not m.group(2) or any(c in m.group(2) for c in "{}%"):
        return None
    try:
        parsed = httpx.URL(f"{m.group(1).lower()}://{m.group(2)}/")
    except (httpx.InvalidURL, ValueError):
        return None
    return parsed if parsed.host else None


def pattern_of(origin: httpx.URL) -> str:
    """The exact host pattern of a URL: ``host`` or ``host:port`` when it names a port."""
    host = normalise_host(origin.raw_host)
    host = f"[{host}]" if ":" in host else host
    return host if origin.port is None else f"{host}:{origin.port}"


def literal_url_host(url: Any) -> str | None:
    """The host pattern (``host`` or ``host:port``) a URL template always calls, or ``None``
    when its scheme or host part is templated or it is not a URL.

    >>> literal_url_host("https://API.stripe.com/v1/{{ id }}"), literal_url_host("http://127.0.0.1:8443/x")
    ('api.stripe.com', '127.0.0.1:8443')
    >>> literal_url_host("https://{{ host }}/x") is None, literal_url_host("https://a.com{{ p }}") is None
    (True, True)
    """
    origin = literal_origin(url)
    return pattern_of(origin) if origin is not None else None



# (group_id, request_id) → the integration request's parameter defaults
ParamDefaults = Callable[[str, str], Mapping[str, Any]]


def credential_targets(
    kind: str, config: dict[str, Any], defaults: ParamDefaults | None = None
) -> tuple[str, list[httpx.URL]] | None:
    """``(credential name, literal origins)`` a computed column sends its credential to, or
    ``None`` when it names no credential. ``http_request``: the origin of a literal
    ``config.url``; ``action``: those of its literal URL parameters, ``defaults`` filling
    the ones not given (the catalogue's request URLs start with one, e.g.
    ``params.base_url``); ``loop``: its sub-step's. Templated hosts are left out (the
    list may be empty).

    >>> name, origins = credential_targets("http_request", {"url": "https://api.x.com/{{ id }}", "credential": "x"})
    >>> name, [str(o) for o in origins]
    ('x', ['https://api.x.com/'])
    """
    if kind == "loop":
        step = config.get("step")
        if isinstance(step, dict) and isinstance(step.get("config"), dict):
            return credential_targets(str(step.get("type")), step["config"], defaults)
        return None
    name = config.get("credential")
    if not isinstance(name, str) or not name.strip():
        return None
    if kind == "http_request":
        urls = [config.get("url")]
    elif kind == "action":
        params: dict[str, Any] = {}
        if defaults is not None:
            params.update(defaults(str(config.get("group_id")), str(config.get("request_id"))))
        given = config.get("params")
        if isinstance(given, dict):
            params.update({k: v for k, v in given.items() if v is not None})
        urls = list(strings(params))
    else:
        return None
    origins = [o for o in (literal_origin(u) for u in urls) if o is not None]
    return name.strip(), origins


async def check_bound_hosts(
    conn: Conn, *, workspace_id: int, columns: Iterable[tuple[str, str, dict[str, Any]]],
    defaults: ParamDefaults | None = None,
) -> None:
    """Refuse computed columns ``(name, kind, config)`` whose literal URL host is outside the
    hosts of the existing credential they name (a templated host is checked when it runs;
    a credential that does not exist yet fails the step when it runs).

    Raises:
        ValidationError: ``CREDENTIAL_HOST_MISMATCH``.
    """
    targets = [(col, found) for col, kind, config in columns
               if (found := credential_targets(kind, config or {}, defaults)) is not None and found[1]]
    if not targets:
        return
    bound = await credential_hosts(conn, workspace_id=workspace_id, names=[f[0] for _, f in targets])
    for col, (name, origins) in targets:
        for origin in origins:
            if name in bound and not host_allowed(bound[name], origin):
                raise ValidationError(
                    f"{col}: credential {name!r} is not bound to host {pattern_of(origin)!r}"
                    f" (bound to: {', '.join(bound[name]) or 'no host'})", code="CREDENTIAL_HOST_MISMATCH")


def check_credential(
    *, name: Any, type: Any, secret: Any, header_name: Any, hosts: Any
) -> tuple[str, str, str, str | None, list[str]]:
    """Validate a credential definition; returns ``(name, type, secret, header_name, hosts)``.

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
    return name.strip(), type, secret, header_name, check_hosts(hosts)


async def create_credential(
    conn: Conn, *, workspace_id: int, name: str, type: str, header_name: str | None, sealed: bytes,
    hosts: Sequence[str],
) -> dict[str, Any]:
    """Insert a credential; returns its public row (no secret)."""
    cur = await conn.execute(
        "INSERT INTO wds.credentials (workspace_id, name, type, header_name, secret_enc, hosts)"
        f" VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_PUBLIC}",
        (workspace_id, name, type, header_name, sealed, Jsonb(list(hosts))),
    )
    row = await cur.fetchone()
    assert row is not None
    return row


def _by_ref(ref: int | str) -> tuple[str, int | str]:
    if isinstance(ref, int) or (isinstance(ref, str) and ref.isascii() and ref.isdigit()):
        return "id = %s", int(ref)
    return "name = %s", ref


async def set_credential_hosts(
    conn: Conn, *, workspace_id: int, ref: int | str, hosts: Sequence[str]
) -> dict[str, Any] | None:
    """Replace a credential's host patterns (by id or name); ``None`` when there is none."""
    where, value = _by_ref(ref)
    cur = await conn.execute(
        f"UPDATE wds.credentials SET hosts = %s WHERE workspace_id = %s AND {where} RETURNING {_PUBLIC}",
        (Jsonb(list(hosts)), workspace_id, value),
    )
    return await cur.fetchone()


async def credential_hosts(conn: Conn, *, workspace_id: int, names: Sequence[str]) -> dict[str, list[str]]:
    """``name → hosts`` of the named credentials (absent names are left out)."""
    if not names:
        return {}
    cur = await conn.execute(
        "SELECT name, hosts FROM wds.credentials WHERE workspace_id = %s AND name = ANY(%s)",
        (workspace_id, sorted(set(names))),
    )
    return {row["name"]: list(row["hosts"] or []) for row in await cur.fetchall()}


async def list_credentials(conn: Conn, *, workspace_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        f"SELECT {_PUBLIC} FROM wds.credentials WHERE workspace_id = %s ORDER BY id", (workspace_id,)
    )
    return await cur.fetchall()


async def delete_credential(conn: Conn, *, workspace_id: int, ref: int | str) -> dict[str, Any] | None:
    """Delete a credential by id or name; ``None`` when there is none."""
    where, value = _by_ref(ref)
    cur = await conn.execute(
        f"DELETE FROM wds.credentials WHERE workspace_id = %s AND {where} RETURNING {_PUBLIC}",
        (workspace_id, value),
    )
    return await cur.fetchone()


async def load_secret(conn: Conn, *, workspace_id: int, name: str) -> dict[str, Any] | None:
    """A credential's ``type``, ``header_name``, ``hosts`` and sealed secret by name (for the proxy)."""
    cur = await conn.execute(
        "SELECT id, name, type, header_name, hosts, secret_enc FROM wds.credentials"
        " WHERE workspace_id = %s AND name = %s",
        (workspace_id, name),
    )
    return await cur.fetchone()


async def load_secrets(conn: Conn, *, workspace_id: int, names: list[str]) -> dict[str, dict[str, Any]]:
    """Several credentials at once for the proxy: ``name → {id, name, type, header_name,
    hosts, secret_enc}``; names without a credential are absent."""
    if not names:
        return {}
    cur = await conn.execute(
        "SELECT id, name, type, header_name, hosts, secret_enc FROM wds.credentials"
        " WHERE workspace_id = %s AND name = ANY(%s)",
        (workspace_id, sorted(set(names))),
    )
    return {row["name"]: row for row in await cur.fetchall()}
