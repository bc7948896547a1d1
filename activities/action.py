"""The ``action`` kind: one request of the special-fields catalogue, per record.

Config ``{group_id, request_id, params, credential?}``: each parameter value may be a
sandboxed Jinja2 template over the record; values are coerced to the declared types,
then the catalogue request's own templates (over ``params``) give the method, URL,
headers and body, and the call goes through the platform proxy like http_request.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from temporalio import activity

from activities import catalogue
from activities.http_request import (
    check_credential_name,
    check_timeout,
    encode_body,
    record_extra,
    timeout_of,
    to_result,
)
from activities.metrics import timed_step
from activities.proxy import (
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
    step_error,
)
from activities.steps import column_for_step
from activities.sandbox import sandbox
from activities.templates import TemplateFailure, check_template, render, render_many
from activities.types import StepInput, StepResult
from storage import jsontext
from storage.db import Database
from storage.errors import ValidationError
from storage.pipelines import register_config_check
from storage.refs import strings

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def coerce_param(spec: dict[str, Any], value: Any) -> Any:
    """A rendered parameter value as its declared type.

    >>> coerce_param({"name": "n", "type": "integer"}, "42"), coerce_param({"name": "b", "type": "boolean"}, "no")
    (42, False)

    Raises:
        RequestInvalid: the value does not convert.
    """
    kind, name = spec["type"], spec["name"]
    try:
        if kind in ("string", "url"):
            return value if isinstance(value, str) else jsontext.dumps(value).decode()
        if kind == "integer":
            number = float(value) if isinstance(value, str) else value
            if isinstance(number, bool) or not isinstance(number, (int, float)) or number != int(number):
                raise ValueError
            return int(number)
        if kind == "number":
            number = float(value) if isinstance(value, str) else value
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise ValueError
            return int(number) if float(number).is_integer() and abs(number) < 2**53 else float(number)
        if kind == "boolean":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE | _FALSE:
                return text in _TRUE
            raise ValueError
        # json: a template renders text; text that parses is used as the JSON value
        if isinstance(value, str):
            try:
                return orjson.loads(value)
            except orjson.JSONDecodeError:
                return value
        return value
    except (TypeError, ValueError, OverflowError):
        raise RequestInvalid(f"param {name!r}: {str(value)[:60]!r} is not a valid {kind}") from None


def raw_params(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The request's parameters as configured (templates), defaults filled in."""
    given = config.get("params") or {}
    return {spec["name"]: given.get(spec["name"], spec.get("default")) for spec in request.get("params", [])}


def render_params(request: dict[str, Any], rendered: dict[str, Any]) -> dict[str, Any]:
    """The request's parameters for one record from :func:`raw_params` rendered over it:
    defaulted and typed.

    Raises:
        RequestInvalid: a value does not convert or a required parameter is empty.
    """
    out: dict[str, Any] = {}
    for spec in request.get("params", []):
        name = spec["name"]
        value = rendered.get(name)
        if value is None or value == "":
            if spec["required"]:
                raise RequestInvalid(f"param {name!r} is required and rendered empty")
            out[name] = spec.get("default") if value is None else None
            continue
        out[name] = coerce_param(spec, value)
    return out


def build_action_request(
    request: dict[str, Any], params: dict[str, Any], *, key: str, credential: Credential | None,
    timeout_s: float,
) -> OutboundRequest:
    """Render a catalogue request over typed ``params``.

    Raises:
        TemplateFailure, RequestInvalid: as for http_request.
    """
    url = render(request["url"], {}, params=params).strip()
    check_url(url)
    headers = clean_headers({k: render(v, {}, params=params) for k, v in (request.get("headers") or {}).items()})
    body_text = render(request["body"], {}, params=params) if request.get("body") else ""
    content = encode_body(body_text, headers) if body_text.strip() else None
    if content is not None and "json" in headers.get("Content-Type", "").lower():
        try:
            orjson.loads(content)
        except orjson.JSONDecodeError:
            raise RequestInvalid("the integration's body did not render to valid JSON") from None
    return OutboundRequest(method=request["method"], url=url, headers=headers, content=content,
                           idempotency_key=key, credential=credential, timeout_s=timeout_s)


def check_action_config(name: str, config: dict[str, Any]) -> None:
    """Validate an action config at column creation.

    Raises:
        ValidationError: unknown group/request, unknown or missing parameters, a template
            that does not parse, or a missing credential the request requires.
    """
    gid, rid = config.get("group_id"), config.get("request_id")
    if not isinstance(gid, str) or not isinstance(rid, str):
        raise ValidationError(f"{name}: action needs config.group_id and config.request_id (strings)")
    if catalogue.list_requests(gid) is None:
        raise ValidationError(f"{name}: unknown integration group {gid!r} (see special-fields/groups)")
    request = catalogue.find_request(gid, rid)
    if request is None:
        raise ValidationError(f"{name}: unknown request {rid!r} in group {gid!r}")
    params = config.get("params") or {}
    if not isinstance(params, dict):
        raise ValidationError(f"{name}: config.params must be an object of parameter name → value")
    declared = {p["name"]: p for p in request.get("params", [])}
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ValidationError(f"{name}: unknown param(s) {', '.join(unknown)} for {gid}/{rid}")
    for pname, spec in declared.items():
        if spec["required"] and params.get(pname) in (None, "") and spec.get("default") is None:
            raise ValidationError(f"{name}: param {pname!r} is required by {gid}/{rid}")
    for pname, value in params.items():
        for text in strings(value):
            try:
                check_template(text)
            except TemplateFailure as exc:
                raise ValidationError(f"{name}: param {pname!r} — {exc}") from None
    check_credential_name(name, config)
    check_timeout(name, config)
    cred = request.get("credential")
    if cred and cred["required"] and not config.get("credential"):
        raise ValidationError(
            f"{name}: {gid}/{rid} needs config.credential (a stored {' or '.join(cred['types'])} credential)"
        )



register_config_check("action", check_action_config)


class ActionStep:
    """The ``action_step`` activity (dependencies come from ``worker.py``)."""

    def __init__(self, db: Database, settings: Any, client: httpx.AsyncClient) -> None:
        self.db = db
        self.settings = settings
        self.client = client

    @activity.defn(name="action_step")
    @timed_step  # Prometheus wds_step_duration_seconds{kind, status}
    async def action_step(self, inp: StepInput) -> StepResult:
        config = column_for_step(inp).config or {}
        gid, rid_ = str(config.get("group_id")), str(config.get("request_id"))
        request = catalogue.find_request(gid, rid_)
        if request is None:
            raise step_error(f"unknown integration {gid}/{rid_}")
        name = config.get("credential")
        credential = None
        if isinstance(name, str) and name:
            credential = (await load_credentials(self.db, self.settings.secret_key,
                                                 inp.table.workspace_id, [name]))[name]
            allowed = (request.get("credential") or {}).get("types") or []
            if allowed and credential.type not in allowed:
                raise step_error(f"{gid}/{rid_} needs a {' or '.join(allowed)} credential;"
                                 f" {name!r} is {credential.type}")
        elif (request.get("credential") or {}).get("required"):
            raise step_error(f"{gid}/{rid_} needs config.credential")
        deadline = activity_deadline()
        timeout_s = timeout_of(config)

        rids = list(inp.records)
        # every record's parameters in one go, off the event loop unless simple (activities/templates.py)
        part = raw_params(request, config)
        rendered = dict(zip(rids, await render_many(
            [(part, inp.records[rid], record_extra(inp, rid)) for rid in rids], sandbox(),
            workspace=inp.table.workspace_id), strict=True))

        def job(rid: str, fields: dict[str, Any]) -> Any:
            async def run() -> Outcome:
                ok, values = rendered[rid]
                if not ok:
                    return Outcome(error=values)
                try:
                    params = render_params(request, values)
                    req = build_action_request(request, params, key=idempotency_key(inp.step_key, rid),
                                               credential=credential, timeout_s=timeout_s)
                except (TemplateFailure, RequestInvalid) as exc:
                    return Outcome(error=str(exc))
                return await send(self.client, req, deadline=deadline)
            return run

        return to_result(rids, await bounded([job(r, inp.records[r]) for r in rids]))
