"""The platform proxy: every outbound HTTP call of a pipeline step goes through here.

It injects the named credential (looked up when the step runs, so secrets never travel in
workflow payloads) only into a request whose URL host matches one of the credential's
host patterns (``storage/secrets.py``), re-checked on every redirect: a request or a
redirect to any other host is not sent at all and the record fails with
``CREDENTIAL_HOST_MISMATCH`` (so does a redirect from https to http). It sends an
``Idempotency-Key`` that is the same on every attempt, applies a timeout and a 1.5 MiB
response cap (:data:`STEP_RESULT_MAX_BYTES`: what a step can hand back), follows at most 5 redirects by hand (dropping the step's own
``Authorization``/``Cookie`` headers when the origin changes), over the shared client of
``activities/egress.py`` whose connection layer is the SSRF guard (checked after DNS
resolution, on every hop). The secret is redacted from what a receiver echoes back and
from every error message before either becomes a cell, an error or workflow history.

Retries (a documented choice): transient failures — connection errors, timeouts, 429,
502, 503, 504 — are retried *per record inside the activity* with exponential backoff
and jitter (honouring ``Retry-After``), within the activity's own deadline. A batch where
one record keeps failing therefore never re-sends the records that succeeded; a record
that outlasts its attempts becomes that record's step error ("HTTP 503 after 4
attempts"). Temporal's retry policy still covers the activity as a whole (a lost worker).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus

import httpx
import orjson
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.egress import DEFAULT_TIMEOUT_S, AddressRefused
from activities.ledger import size_text
from storage import jsontext
from storage.db import Database
from storage.errors import ServiceError
from storage.secrets import SecretBox, host_allowed, load_secrets, normalise_host

# What a remote step hands back to its workflow — every record's value of one run, as
# Temporal's JSON — travels as one Temporal payload, and Temporal refuses a payload over
# its blob-size error limit (2 MiB by default) with its own "[TMPRL1103] Attempted to
# upload payloads with size that exceeded the error limit." A step's results are kept
# within this (activities/http_request.py fit_result), leaving room under that limit for
# the result's envelope and error messages; a response larger than it is not read further,
# since it could never be kept.
STEP_RESULT_MAX_BYTES = 1536 * 1024
MAX_RESPONSE_BYTES = STEP_RESULT_MAX_BYTES
MAX_REDIRECTS = 5
MAX_ATTEMPTS = 4
CONCURRENCY = 32  # requests in flight per step (one activity)
TRANSIENT_STATUS = frozenset({429, 502, 503, 504})
REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
BACKOFF_BASE_S = 0.2
BACKOFF_MAX_S = 5.0
MAX_RETRY_AFTER_S = 10.0
_STRIP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "upgrade"})
T = TypeVar("T")


class ResponseTooLarge(Exception):
    """The response body exceeded the cap."""


TOO_LARGE = f"response larger than {size_text(MAX_RESPONSE_BYTES)}, the most a step keeps"


class RequestInvalid(Exception):
    """The rendered request is not a valid HTTP request (bad URL, method, header)."""


HOST_MISMATCH = "CREDENTIAL_HOST_MISMATCH"


class CredentialHostMismatch(Exception):
    """The credential is not bound to the host a request (or a redirect) goes to."""


def step_error(message: str) -> ApplicationError:
    """A whole-step configuration failure: not retried, every record gets ``message``."""
    return ApplicationError(message, type="StepError", non_retryable=True)


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class Credential:
    """A decrypted credential; ``secret`` stays out of reprs and messages."""

    name: str
    type: str  # bearer | header | basic | query
    header_name: str | None
    secret: str = field(repr=False)
    hosts: tuple[str, ...] = ()  # host patterns it may be sent to; empty: none

    def check_host(self, url: httpx.URL) -> None:
        """Raises:
            CredentialHostMismatch: ``url``'s host matches none of the credential's patterns.
        """
        if not host_allowed(self.hosts, url):
            bound = ", ".join(self.hosts) if self.hosts else "no host (set its hosts)"
            raise CredentialHostMismatch(
                f"{HOST_MISMATCH}: credential {self.name!r} is not bound to host {normalise_host(url.raw_host)!r}"
                f" (bound to: {bound}); nothing was sent")

    def apply(self, headers: dict[str, str], params: list[tuple[str, str | int | float | bool | None]]) -> None:
        if self.type == "bearer":
            headers["Authorization"] = f"Bearer {self.secret}"
        elif self.type == "basic":
            headers["Authorization"] = f"Basic {self._basic()}"
        elif self.type == "header":
            headers[self.header_name or "X-Api-Key"] = self.secret
        elif self.type == "query":
            params.append((self.header_name or "api_key", self.secret))

    def _basic(self) -> str:
        # the secret is "user:password": RFC 7617 is base64 of exactly that
        return base64.b64encode(self.secret.encode()).decode()

    def _forms(self) -> list[str]:
        """The forms of the secret a receiver may echo, longest first: as is, every
        percent-encoding a client or receiver writes (``%20`` or ``+`` for a space, ``/``
        kept or not, upper- or lower-case hex digits) including the very query value httpx
        sends, and base64 ``user:password`` for ``basic``.

        >>> forms = Credential("c", "query", "k", "SECRET QUERY+456/é")._forms()
        >>> [f in forms for f in ("SECRET+QUERY%2B456%2F%C3%A9", "SECRET%20QUERY%2B456/%C3%A9", "SECRET+QUERY%2b456%2f%c3%a9")]
        [True, True, True]
        """
        s = self.secret
        encoded = {quote(s, safe=""), quote(s), quote_plus(s), quote_plus(s, safe="/"), _sent_query_value(s)}
        forms = {s} | encoded | {_PERCENT.sub(lambda m: m.group().lower(), f) for f in encoded}
        if self.type == "basic":
            forms.add(self._basic())
        return [f for f in sorted(forms, key=lambda f: (-len(f), f)) if f and len(f) >= 4]

    def redact(self, data: bytes) -> bytes:
        """Remove the secret from what a receiver echoed back (cells and errors hold this)."""
        for form in self._forms():
            data = data.replace(form.encode(), b"[redacted]")
        return data

    def redact_value(self, value: Any) -> Any:
        """:meth:`redact` over a parsed body: every string in it, keys too. JSON may write
        any character as an escape (``\\u0042earer …``), which the bytes do not show."""
        forms = self._forms()

        def clean(item: Any) -> Any:
            if isinstance(item, str):
                for form in forms:
                    if form in item:
                        item = item.replace(form, "[redacted]")
                return item
            if isinstance(item, dict):
                return {clean(k): clean(v) for k, v in item.items()}
            if isinstance(item, list):
                return [clean(v) for v in item]
            return item

        return clean(value)


_PERCENT = re.compile(r"%[0-9A-F]{2}")


def _sent_query_value(value: str) -> str:
    """``value`` as httpx writes it into a query string (what :meth:`Credential.apply`
    sends for a ``query`` credential): today ``quote_plus``, asked of httpx itself so that
    the redaction follows its encoding.

    >>> _sent_query_value("a b+c/~é")
    'a+b%2Bc%2F~%C3%A9'
    """
    return httpx.URL("http://h/").copy_merge_params([("k", value)]).raw_path.decode("ascii").split("k=", 1)[1]


async def load_credentials(
    db: Database, secret_key: str | None, workspace_id: int, names: Sequence[str]
) -> dict[str, Credential]:
    """Decrypt the named credentials of a workspace.

    Raises:
        ApplicationError: (StepError) a name has no credential, or it cannot be decrypted.
    """
    wanted = sorted({n for n in names if n})
    if not wanted:
        return {}
    async with db.connection() as conn:
        rows = await load_secrets(conn, workspace_id=workspace_id, names=wanted)
    missing = [n for n in wanted if n not in rows]
    if missing:
        raise step_error(f"credential {missing[0]!r} not found in this workspace")
    try:
        box = SecretBox(secret_key)
        return {
            name: Credential(name=name, type=row["type"], header_name=row["header_name"],
                             secret=box.decrypt(row["secret_enc"]), hosts=tuple(row["hosts"] or ()))
            for name, row in rows.items()
        }
    except ServiceError as exc:
        raise step_error(f"credential unusable: {exc.message}") from None


# --------------------------------------------------------------------------- requests


@dataclass
class OutboundRequest:
    method: str
    url: str
    headers: dict[str, str]
    content: bytes | None
    idempotency_key: str
    credential: Credential | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class Outcome:
    """One record's result: ``value`` (the parsed body) or ``error``."""

    value: Any = None
    error: str | None = None
    status: int | None = None
    attempts: int = 1


def idempotency_key(step_key: str, record_id: str) -> str:
    """Stable per workflow, column (and loop index) and record: identical on every attempt.

    >>> idempotency_key("wf:3", "7") == idempotency_key("wf:3", "7") != idempotency_key("wf:3", "8")
    True
    """
    return "wds-" + hashlib.sha256(f"{step_key}|{record_id}".encode()).hexdigest()[:40]


def check_url(url: str) -> httpx.URL:
    """Parse an outbound URL: absolute http(s) with a host.

    Raises:
        RequestInvalid: anything else.
    """
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise RequestInvalid(f"invalid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise RequestInvalid("the URL must be absolute http:// or https:// with a host")
    return parsed


def clean_headers(raw: dict[str, Any]) -> dict[str, str]:
    """Rendered headers as sendable strings (hop-by-hop and Host headers are dropped).

    Raises:
        RequestInvalid: a header name or value that is not valid HTTP.
    """
    out: dict[str, str] = {}
    for name, value in raw.items():
        name = str(name).strip()
        if not name or any(c in name for c in " :\r\n\t") or not name.isascii():
            raise RequestInvalid(f"invalid header name {name!r}")
        text = value if isinstance(value, str) else jsontext.dumps(value).decode()
        if "\r" in text or "\n" in text:
            raise RequestInvalid(f"header {name!r} contains a line break")
        if name.lower() not in _STRIP_HEADERS:
            out[name] = text
    return out


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def parse_body(data: bytes, content_type: str) -> Any:
    """The cell value of a response body: parsed JSON when it is JSON, else text."""
    if not data:
        return None
    text = data.decode("utf-8", errors="replace")
    if "json" in content_type.lower() or (not content_type and text.lstrip()[:1] in ("{", "[")):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            return text
    return text


async def _read_capped(resp: httpx.Response) -> bytes:
    declared = resp.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
        raise ResponseTooLarge(TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise ResponseTooLarge(TOO_LARGE)
        chunks.append(chunk)
    return b"".join(chunks)


async def _exchange(
    client: httpx.AsyncClient, req: OutboundRequest, timeout: float
) -> tuple[int, httpx.Headers, bytes]:
    """One attempt: the request and its redirects; returns (status, headers, body)."""
    url = check_url(req.url)
    first = _origin(url)
    method, content = req.method, req.content
    headers = dict(req.headers)
    if not any(k.lower() == "idempotency-key" for k in headers):
        headers["Idempotency-Key"] = req.idempotency_key
    for _ in range(MAX_REDIRECTS + 1):
        send_headers = dict(headers)
        params: list[tuple[str, str | int | float | bool | None]] = []
        if req.credential is not None:
            # bound hosts decide, on the first request and on every redirect; a downgrade
            # to plain http would send the secret in clear
            req.credential.check_host(url)
            if first[0] == "https" and url.scheme != "https":
                raise CredentialHostMismatch(
                    f"{HOST_MISMATCH}: a redirect from https to http would send credential"
                    f" {req.credential.name!r} in clear; nothing was sent")
            req.credential.apply(send_headers, params)
        target = url.copy_merge_params(params) if params else url
        try:
            request = client.build_request(method, target, headers=send_headers, content=content,
                                           timeout=httpx.Timeout(timeout))
        except UnicodeEncodeError:
            # httpx sends header values as ASCII only; the exception holds the whole value
            # (a credential's secret, say), so it goes no further
            raise RequestInvalid("a header value holds a character that is not ASCII, which HTTP headers"
                                 " cannot carry; nothing was sent") from None
        resp = await client.send(request, stream=True)
        try:
            location = resp.headers.get("location")
            if resp.status_code in REDIRECT_STATUS and location:
                nxt = check_url(str(url.join(location)))
                if resp.status_code == 303 or (resp.status_code in (301, 302) and method == "POST"):
                    method, content = "GET", None
                    headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
                if _origin(nxt) != _origin(url):
                    # never carry authorisation to another origin (like browsers and httpx do)
                    headers = {k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")}
                url = nxt
                continue
            body = b"" if method == "HEAD" else await _read_capped(resp)
            return resp.status_code, resp.headers, body
        finally:
            await resp.aclose()
    raise RequestInvalid(f"more than {MAX_REDIRECTS} redirects")


def _received(credential: Credential | None, body: bytes, content_type: str) -> tuple[Any, bytes]:
    """A response body's cell value, and the bytes an error quotes from it. With a
    credential its secret is redacted from both: from the bytes, and from every string of
    the parsed value (a JSON ``\\uXXXX`` escape hides it from the bytes), whose text the
    error then quotes."""
    if credential is None:
        return parse_body(body, content_type), body
    body = credential.redact(body)
    value = credential.redact_value(parse_body(body, content_type))
    return value, (orjson.dumps(value) if value is not None and not isinstance(value, str) else body)


def _redacted(req: OutboundRequest, message: str) -> str:
    """An error message without the request's secret (a redirect's URL may carry it back)."""
    if req.credential is None:
        return message
    return req.credential.redact(message.encode()).decode("utf-8", errors="replace")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


async def send(
    client: httpx.AsyncClient, req: OutboundRequest, *, deadline: float, max_attempts: int = MAX_ATTEMPTS
) -> Outcome:
    """Send ``req`` with per-request retries of transient failures until ``deadline``
    (a ``time.monotonic()`` value). Never raises for HTTP or network trouble."""
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        if remaining <= 0.05:
            return Outcome(error="timed out (step deadline)", attempts=attempt - 1)
        timeout = min(req.timeout_s, remaining)
        retry_after: float | None = None
        status: int | None = None
        try:
            async with asyncio.timeout(timeout):
                status, resp_headers, body = await _exchange(client, req, timeout)
        except AddressRefused as exc:
            return Outcome(error=_redacted(req, str(exc)), attempts=attempt)
        except (ResponseTooLarge, RequestInvalid, CredentialHostMismatch) as exc:
            return Outcome(error=_redacted(req, str(exc)), attempts=attempt)
        except (TimeoutError, httpx.TimeoutException):
            reason = f"timed out ({timeout:.1f} s)"
        except (httpx.TransportError, OSError) as exc:
            reason = f"connection failed ({type(exc).__name__})"
            if isinstance(exc, (httpx.UnsupportedProtocol, httpx.LocalProtocolError)):
                return Outcome(error=f"invalid request ({type(exc).__name__})", attempts=attempt)
        else:
            value, shown = _received(req.credential, body, resp_headers.get("content-type", ""))
            if 200 <= status < 300:
                return Outcome(value=value, status=status, attempts=attempt)
            snippet = shown[:200].decode("utf-8", errors="replace").strip()
            if status not in TRANSIENT_STATUS:
                return Outcome(error=f"HTTP {status}" + (f": {snippet}" if snippet else ""), status=status,
                               attempts=attempt)
            reason = f"HTTP {status}"
            retry_after = _retry_after(resp_headers.get("retry-after"))
        if attempt >= max_attempts:
            return Outcome(error=f"{reason} after {attempt} attempts", status=status, attempts=attempt)
        delay = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER_S))
        if time.monotonic() + delay >= deadline - 0.1:
            return Outcome(error=f"{reason} after {attempt} attempts", status=status, attempts=attempt)
        await asyncio.sleep(delay)


def activity_deadline(margin_s: float = 0.5) -> float:
    """The running activity's deadline as a ``time.monotonic()`` value, minus a margin so
    the step reports its own errors before Temporal times it out."""
    info = activity.info()
    now = datetime.now(UTC)
    ends = []
    if info.start_to_close_timeout:
        ends.append(info.started_time + info.start_to_close_timeout)
    if info.schedule_to_close_timeout:
        ends.append(info.scheduled_time + info.schedule_to_close_timeout)
    remaining = min((e - now).total_seconds() for e in ends) if ends else 60.0
    margin = min(margin_s, max(0.05, remaining * 0.1))
    return time.monotonic() + max(0.1, remaining - margin)


async def bounded(jobs: Sequence[Callable[[], Awaitable[T]]], limit: int = CONCURRENCY) -> list[T]:
    """Run ``jobs`` with at most ``limit`` in flight; results in input order."""
    sem = asyncio.Semaphore(limit)

    async def run(job: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await job()

    return list(await asyncio.gather(*(run(j) for j in jobs)))
