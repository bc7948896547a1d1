"""The ``ai_agent`` kind: a chat completion per record on an OpenAI-compatible endpoint.

Config ``{prompt, system?, model?, output: text|json}``: prompt and system are sandboxed
Jinja2 templates over the record, sent to ``{WDS_AI_BASE_URL}/chat/completions`` with
``WDS_AI_API_KEY`` (model: the column's, else ``WDS_AI_MODEL``). ``output: json`` asks for
a JSON object (``response_format``) and the cell holds the parsed value; a reply that
does not parse is the record's step error. Each completion costs AI credits (one per
started 1,000 tokens) on the workspace's monthly ``ai_credits`` counter, checked before
the step runs (402-style ``PLAN_LIMIT_AI_CREDITS`` step error). With no provider
configured every record fails with one clear message and nothing else is affected.

The provider is operator configuration, so it is called on a plain client, not through
the SSRF guard of user-defined HTTP steps; transient failures are retried the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
from temporalio import activity

from activities.http_request import check_timeout, record_extra, to_result
from activities.metrics import timed_step
from activities.openai_stream import reply_of  # the one reader of a completion, shared with the chat
from activities.proxy import (
    DEFAULT_TIMEOUT_S,
    Credential,
    OutboundRequest,
    Outcome,
    activity_deadline,
    bounded,
    idempotency_key,
    send,
    step_error,
)
from activities.sandbox import sandbox
from activities.steps import column_for_step
from activities.templates import TemplateFailure, check_template, render_many
from activities.types import StepInput, StepResult
from storage import jsontext, quotas
from storage.db import Database
from storage.errors import PlanLimit, ValidationError
from storage.pipelines import register_config_check
from storage.plans import plan as plan_of
from storage.secrets import literal_url_host

OUTPUTS = ("text", "json")
NO_PROVIDER = "no AI provider configured: set WDS_AI_BASE_URL"
AI_CONCURRENCY = 8
USAGE_KIND = "ai_tokens"  # raw tokens beside the credits, for reporting
TOKENS_PER_CREDIT = 1000


def chat_body(messages: list[dict[str, str]], *, model: str, json_mode: bool, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages}
    if json_mode:
        body["response_format"] = {"type": "json_object"}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def parse_json_reply(content: str) -> Any:
    """The JSON value of a model reply (a ```json fence is tolerated).

    >>> parse_json_reply('```json\\n{"a": 1}\\n```')
    {'a': 1}

    Raises:
        ValueError: the reply is not JSON.
    """
    text = content.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError("the model's reply is not valid JSON") from None


def credits_for(tokens: int) -> int:
    """AI credits of one completion: one per started 1,000 tokens, at least one.

    >>> credits_for(0), credits_for(1000), credits_for(1001)
    (1, 1, 2)
    """
    return max(1, -(-tokens // TOKENS_PER_CREDIT))


async def check_ai_quota(db: Database, *, workspace_id: int, plan_name: str) -> None:
    """Refuse the step when the workspace's AI credits of the month are spent.

    Raises:
        PlanLimit: ``PLAN_LIMIT_AI_CREDITS`` (unless the plan may auto-recharge and does).
    """
    month = quotas.month_key(datetime.now(UTC))
    async with db.connection() as conn:
        totals, flags = await quotas.load_counters(conn, pairs=[(workspace_id, month)])
    used = totals.get((workspace_id, month, quotas.AI_CREDITS), 0)
    quotas.decide(plan_of(plan_name), quotas.AI_CREDITS, used=used, adding=1,
                  auto_recharge=flags.get(workspace_id, False))


async def record_ai_usage(db: Database, *, workspace_id: int, credits: int, tokens: int) -> None:
    """Add a step's AI credits (the quota) and raw tokens (for reporting) to this month."""
    if credits <= 0 and tokens <= 0:
        return
    month = quotas.month_key(datetime.now(UTC))
    async with db.connection() as conn:
        await quotas.add_counters(conn, deltas={(workspace_id, month, quotas.AI_CREDITS): credits,
                                                (workspace_id, month, USAGE_KIND): tokens})


def check_ai_config(name: str, config: dict[str, Any]) -> None:
    """Validate an ai_agent config at column creation.

    Raises:
        ValidationError: missing prompt, bad output/model, or a template that does not parse.
    """
    prompt = config.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValidationError(f"{name}: ai_agent needs config.prompt (a template)")
    system = config.get("system")
    if system is not None and not isinstance(system, str):
        raise ValidationError(f"{name}: config.system must be a string")
    if config.get("output", "text") not in OUTPUTS:
        raise ValidationError(f"{name}: config.output must be 'text' or 'json'")
    model = config.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ValidationError(f"{name}: config.model must be a model name")
    check_timeout(name, config)
    for key in ("prompt", "system"):
        if isinstance(config.get(key), str):
            try:
                check_template(config[key])
            except TemplateFailure as exc:
                raise ValidationError(f"{name}: config.{key} — {exc}") from None


register_config_check("ai_agent", check_ai_config)


class AiStep:
    """The ``ai_step`` activity (dependencies come from ``worker.py``)."""

    def __init__(self, db: Database, settings: Any, client: httpx.AsyncClient) -> None:
        self.db = db
        self.settings = settings
        self.client = client

    @activity.defn(name="ai_step")
    @timed_step  # Prometheus wds_step_duration_seconds{kind, status}
    async def ai_step(self, inp: StepInput) -> StepResult:
        base_url = (self.settings.ai_base_url or "").rstrip("/")
        if not base_url:
            raise step_error(NO_PROVIDER)
        config = column_for_step(inp).config or {}
        model = config.get("model") or self.settings.ai_model
        json_mode = config.get("output", "text") == "json"
        key = self.settings.ai_api_key
        # the operator's key is bound to the configured provider's host only
        provider_host = literal_url_host(base_url)
        auth = Credential(name="ai provider", type="bearer", header_name=None, secret=key,
                          hosts=(provider_host,) if provider_host else ()) if key else None
        timeout_s = float(config.get("timeout_s") or max(DEFAULT_TIMEOUT_S, 60.0))
        deadline = activity_deadline()
        try:
            await check_ai_quota(self.db, workspace_id=inp.table.workspace_id, plan_name=inp.caller.plan)
        except PlanLimit as exc:
            raise step_error(f"{exc.code}: {exc.message}") from None
        tokens = credits = 0

        # every record's prompts in one go, off the event loop unless simple (activities/templates.py)
        part: dict[str, Any] = {"prompt": str(config.get("prompt") or "")}
        if isinstance(config.get("system"), str) and config["system"].strip():
            part["system"] = config["system"]
        rids = list(inp.records)
        rendered = dict(zip(rids, await render_many(
            [(part, inp.records[rid], record_extra(inp, rid)) for rid in rids], sandbox(),
            workspace=inp.table.workspace_id), strict=True))

        def job(rid: str, fields: dict[str, Any]) -> Any:
            async def run() -> Outcome:
                nonlocal tokens, credits
                ok, texts = rendered[rid]
                if not ok:
                    return Outcome(error=texts)
                messages = []
                if "system" in texts:
                    messages.append({"role": "system", "content": texts["system"]})
                messages.append({"role": "user", "content": texts["prompt"]})
                req = OutboundRequest(
                    method="POST", url=f"{base_url}/chat/completions", headers={"Content-Type": "application/json"},
                    content=jsontext.dumps(chat_body(messages, model=model, json_mode=json_mode)),
                    idempotency_key=idempotency_key(inp.step_key, rid), credential=auth, timeout_s=timeout_s,
                )
                out = await send(self.client, req, deadline=deadline)
                if out.error is not None:
                    return Outcome(error=f"AI provider: {out.error}")
                try:
                    reply = reply_of(out.value)
                    tokens += reply.tokens
                    credits += credits_for(reply.tokens)
                    return Outcome(value=parse_json_reply(reply.content) if json_mode else reply.content)
                except ValueError as exc:
                    return Outcome(error=str(exc))
            return run

        rids = list(inp.records)
        outcomes = await bounded([job(r, inp.records[r]) for r in rids], limit=AI_CONCURRENCY)
        try:
            await record_ai_usage(self.db, workspace_id=inp.table.workspace_id, credits=credits, tokens=tokens)
        except Exception as exc:  # noqa: BLE001 - failing here would retry the batch and pay for it twice
            activity.logger.warning("AI usage of workspace %s not recorded: %s", inp.table.workspace_id, exc)
        return to_result(rids, outcomes)
