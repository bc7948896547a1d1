"""ai_agent columns against a local OpenAI-compatible server (on the production-settings
API process, which has a provider configured), and the no-provider error (dev API)."""

from __future__ import annotations

import asyncio

import httpx
import psycopg
import pytest

from activities.ai_agent import chat_body
from activities.openai_stream import Finished, Text, stream_completion
from tests.outside.conftest import AI_KEY


def ai_table(client, **config) -> dict:
    r = client.post("/tables", json={"name": "AI", "columns": [
        {"name": "Topic", "type": "text"}, {"name": "Out", "type": "ai_agent", "config": config}]})
    assert r.status_code == 201, r.text
    return r.json()


def test_text_output_renders_the_prompt_and_system_over_the_record(prod, chat):
    t = ai_table(prod, prompt="Summarise {{ Topic }}", system="You are terse about {{ Topic }}.")
    rec = prod.post(f"/tables/{t['id']}/records", json={"fields": {"Topic": "owls"}}).json()
    assert rec["fields"]["Out"] == "echo: Summarise owls", rec
    sent = chat.bodies["completions"][-1]
    assert sent["messages"][0] == {"role": "system", "content": "You are terse about owls."}
    assert "response_format" not in sent and chat.calls[-1].headers["Authorization"] == f"Bearer {AI_KEY}"


def test_json_output_is_parsed_and_the_model_can_be_overridden(prod, chat):
    t = ai_table(prod, prompt="{{ Topic }}", output="json", model="tiny-model")
    rec = prod.post(f"/tables/{t['id']}/records", json={"fields": {"Topic": "cats"}}).json()
    assert rec["fields"]["Out"] == {"echo": "cats", "model": "tiny-model"}
    assert chat.bodies["completions"][-1]["response_format"] == {"type": "json_object"}


def test_a_reply_that_is_not_json_is_a_step_error(prod):
    t = ai_table(prod, prompt="{{ Topic }}", output="json")
    rec = prod.post(f"/tables/{t['id']}/records", json={"fields": {"Topic": "BROKEN"}}).json()
    assert rec["fields"]["Out"] is None and "not valid JSON" in rec["pipeline"]["errors"]["Out"]


def test_token_usage_is_counted_as_ai_credits(prod, ws, services):
    t = ai_table(prod, prompt="{{ Topic }}")
    prod.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"Topic": "a"}, {"Topic": "b"}], "run_pipeline": True})
    with psycopg.connect(services.pg.dsn) as conn:
        rows = dict(conn.execute("SELECT kind, used FROM wds.quota_counters WHERE workspace_id = %s"
                                 " AND kind IN ('ai_credits', 'ai_tokens')", (ws.id,)).fetchall())
    assert rows == {"ai_credits": 4, "ai_tokens": 3000}  # 1,500 tokens each: 2 credits per completion


def test_without_a_provider_the_step_fails_clearly_and_the_write_succeeds(ws):
    t = ws.create_table("AI", [{"name": "Topic", "type": "text"},
                               {"name": "Out", "type": "ai_agent", "config": {"prompt": "{{ Topic }}"}},
                               {"name": "Len", "type": "formula", "formula": "LEN({Topic})"}])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Topic": "abc"}})
    assert r.status_code == 201
    rec = r.json()
    assert "WDS_AI_BASE_URL" in rec["pipeline"]["errors"]["Out"] and rec["fields"]["Len"] == 3


@pytest.mark.parametrize("config", [{}, {"prompt": "x", "output": "xml"}, {"prompt": "{{ x"}, {"prompt": "x", "model": ""}])
def test_bad_ai_configs_are_refused_at_column_creation(ws, config):
    t = ws.create_table("AI", [{"name": "Topic", "type": "text"}])
    r = ws.api.post(f"/tables/{t['id']}/columns", json={"name": "Out", "type": "ai_agent", "config": config})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


def test_streaming_chat_yields_deltas_and_usage(chat):
    async def collect() -> list[Text | Finished]:
        async with httpx.AsyncClient() as client:
            body = chat_body([{"role": "user", "content": "stream me"}], model="m", json_mode=False, stream=True)
            return [e async for e in stream_completion(client, chat.url + "/v1", AI_KEY, body)]

    events = asyncio.run(collect())
    assert "".join(e.content for e in events if isinstance(e, Text)) == "echo: stream me"
    assert events[-1] == Finished(tokens=1500)
    assert chat.calls[-1].headers["Authorization"] == f"Bearer {AI_KEY}"
