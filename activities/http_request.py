"""The ``http_request`` kind: a templated HTTP call per record, through the platform proxy.

Config ``{method, url, headers, body, credential?, timeout_s?}``: method, URL, header
values and body are sandboxed Jinja2 templates over the record (a JSON body is rendered
string by string, then sent as JSON). The cell holds the response body, parsed when it
is JSON; a non-2xx status is the record's step error. One activity call covers every
record of the batch, at most ``CONCURRENCY`` requests in flight, over one shared client.
Its result is kept within what Temporal can carry (:func:`fit_result`).
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from temporalio import activity

from activities.metrics import timed_step
from activities.proxy import (
    DEFAULT_TIMEOUT_S,
    METHODS,
    Credential,
    OutboundRequest,
    Outcome,
    RequestInvalid,
    activity_deadline,
    bounded,
    check_url,
    clean_headers,
    idempotency_key,
    load_credentials,
    send,
)
from activities.results import fit_result
from activities.sandbox import sandbox
from activities.steps import column_for_step
from activities.templates import TemplateFailure, check_template, render_many
from activities.types import StepInput, StepResult
from storage import jsontext
from storage.db import Database
from storage.errors import ValidationError
from storage.pipelines import register_config_check

MAX_TIMEOUT_S = 120.0


def encode_body(body: Any, headers: dict[str, str]) -> bytes | None:
    """A rendered body as bytes; sets Content-Type when the config did not.

    Objects and arrays go as JSON; a string goes as is (JSON if it parses as JSON, else
    text/plain); None sends no body.
    """
    if body is None:
        return None
    has_type = any(k.lower() == "content-type" for k in headers)
    if isinstance(body, str):
        data = body.encode()
        if not has_type:
            try:
                orjson.loads(data)
                headers["Content-Type"] = "application/json"
            except orjson.JSONDecodeError:
                headers["Content-Type"] = "text/plain; charset=utf-8"
        return data
    if not has_type:
        headers["Content-Type"] = "application/json"
    return jsontext.dumps(body)


def timeout_of(config: dict[str, Any]) -> float:
    value = config.get("timeout_s", DEFAULT_TIMEOUT_S)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else DEFAULT_TIMEOUT_S


def templated(config: dict[str, Any]) -> dict[str, Any]:
    """The parts of an http_request config that are templates, to render per record."""
    return {"method": str(config.get("method") or "GET"), "url": str(config.get("url") or ""),
            "headers": config.get("headers") or {}, "body": config.get("body")}


def build_request(
    config: dict[str, Any], rendered: dict[str, Any], *, key: str, credential: Credential | None,
) -> OutboundRequest:
    """An http_request from its config and its :func:`templated` parts rendered over one
    record.

    Raises:
        RequestInvalid: the rendered method, URL or headers are not valid HTTP.
    """
    method = str(rendered["method"]).strip().upper()
    if method not in METHODS:
        raise RequestInvalid(f"method {method!r} is not one of {', '.join(METHODS)}")
    url = str(rendered["url"])
    check_url(url)
    headers = clean_headers(rendered["headers"])
    body = rendered["body"]
    content = None if method in ("GET", "HEAD") and body in (None, "") else encode_body(body, headers)
    return OutboundRequest(method=method, url=url, headers=headers, content=content, idempotency_key=key,
                           credential=credential, timeout_s=timeout_of(config))


def _check_templates(name: str, value: Any, where: str) -> None:
    if isinstance(value, str):
        try:
            check_template(value)
        except TemplateFailure as exc:
            raise ValidationError(f"{name}: {where} — {exc}") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_templates(name, v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_templates(name, v, f"{where}[{i}]")


def check_credential_name(name: str, config: dict[str, Any]) -> None:
    cred = config.get("credential")
    if cred is not None and (not isinstance(cred, str) or not cred.strip()):
        raise ValidationError(f"{name}: config.credential must be the name of a stored credential")


def check_timeout(name: str, config: dict[str, Any]) -> None:
    t = config.get("timeout_s")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= MAX_TIMEOUT_S):
        raise ValidationError(f"{name}: config.timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]")


def check_http_config(name: str, config: dict[str, Any]) -> None:
    """Validate an http_request config at column creation.

    Raises:
        ValidationError: missing/invalid url, method, headers, credential or a template that
            does not parse.
    """
    url = config.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ValidationError(f"{name}: http_request needs config.url")
    method = config.get("method", "GET")
    if not isinstance(method, str):
        raise ValidationError(f"{name}: config.method must be a string")
    if "{" not in method and method.strip().upper() not in METHODS:
        raise ValidationError(f"{name}: config.method must be one of {', '.join(METHODS)}")
    if "{" not in url:
        try:
            check_url(url)
        except RequestInvalid as exc:
            raise ValidationError(f"{name}: {exc}") from None
    elif not url.lstrip().lower().startswith(("http://", "https://", "{")):
        raise ValidationError(f"{name}: config.url must start with http:// or https://")
    headers = config.get("headers")
    if headers is not None:
        if not isinstance(headers, dict) or not all(isinstance(k, str) and k.strip() for k in headers):
            raise ValidationError(f"{name}: config.headers must be an object of header name → value")
        try:
            clean_headers({k: v for k, v in headers.items() if isinstance(v, str) and "{" not in v})
        except RequestInvalid as exc:
            raise ValidationError(f"{name}: {exc}") from None
    check_credential_name(name, config)
    check_timeout(name, config)
    for key in ("method", "url", "headers", "body"):
        _check_templates(name, config.get(key), f"config.{key}")


register_config_check("http_request", check_http_config)


def record_extra(inp: StepInput, rid: str) -> dict[str, Any]:
    extra: dict[str, Any] = {"record_id": int(rid)}
    if inp.items is not None:
        extra["item"] = inp.items.get(rid)
    return extra


def to_result(rids: list[str], outcomes: list[Outcome]) -> StepResult:
    """The step's result, within what Temporal can carry (:func:`fit_result`)."""
    result = StepResult()
    for rid, out in zip(rids, outcomes, strict=True):
        if out.error is not None:
            result.errors[rid] = out.error
        else:
            result.values[rid] = out.value
    return fit_result(result)


class HttpStep:
    """The ``http_step`` activity (dependencies come from ``worker.py``)."""

    def __init__(self, db: Database, settings: Any, client: httpx.AsyncClient) -> None:
        self.db = db
        self.settings = settings
        self.client = client

    @activity.defn(name="http_step")
    @timed_step  # Prometheus wds_step_duration_seconds{kind, status}
    async def http_step(self, inp: StepInput) -> StepResult:
        col = column_for_step(inp)
        config = col.config or {}
        name = config.get("credential")
        creds = await load_credentials(self.db, self.settings.secret_key, inp.table.workspace_id,
                                       [name] if isinstance(name, str) else [])
        credential = creds.get(name) if isinstance(name, str) else None
        deadline = activity_deadline()

        rids = list(inp.records)
        # every record's templates in one go, off the event loop unless simple (activities/templates.py)
        part = templated(config)
        rendered = dict(zip(rids, await render_many(
            [(part, inp.records[rid], record_extra(inp, rid)) for rid in rids], sandbox(),
            workspace=inp.table.workspace_id), strict=True))

        def job(rid: str, fields: dict[str, Any]) -> Any:
            async def run() -> Outcome:
                ok, parts = rendered[rid]
                if not ok:
                    return Outcome(error=parts)
                try:
                    req = build_request(config, parts, key=idempotency_key(inp.step_key, rid), credential=credential)
                except RequestInvalid as exc:
                    return Outcome(error=str(exc))
                return await send(self.client, req, deadline=deadline)
            return run

        outcomes = await bounded([job(rid, inp.records[rid]) for rid in rids])
        return to_result(rids, outcomes)
