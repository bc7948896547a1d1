"""The agent webhook (``type=web``): sessions and history, streaming, tools over granted
tables only, limits and errors. The model is the local fake provider (tests.chat.fakes)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import psycopg
import pytest

from tests.chat.fakes import FakeServices
from tests.chat.support import WEBHOOK, make_agent, parse_sse, patch_channel, post, session_of, stream
from tests.conftest import ApiProcess, Workspace


def _tables(ws: Workspace) -> tuple[dict[str, Any], dict[str, Any]]:
    tasks = ws.create_table("Tasks", [{"name": "Title", "type": "text"}, {"name": "Done", "type": "checkbox"}])
    secret = ws.create_table("Secret", [{"name": "Code", "type": "text"}])
    for title in ("water the plants", "file the taxes"):
        assert ws.api.post(f"/tables/{tasks['id']}/records", json={"fields": {"Title": title}}).status_code == 201
    assert ws.api.post(f"/tables/{secret['id']}/records", json={"fields": {"Code": "hunter2"}}).status_code == 201
    return tasks, secret


def _call(name: str, args: dict[str, Any]) -> str:
    return f"CALL {name} {json.dumps(args)}"


def test_a_reply_is_remembered_per_session(cws: Workspace, ai_api: ApiProcess, db: psycopg.Connection[Any]) -> None:
    bot = make_agent(cws, [])
    first = post(ai_api.base_url, bot["token"], {"message": "hello", "session_id": "s-1"})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["reply"] == "You said: hello (history 0)"
    assert body["session_id"] == session_of(bot["token"], "s-1") and body["session_key"]
    assert isinstance(body["message_id"], int) and body["tool_calls"] == []
    again = post(ai_api.base_url, bot["token"], {"message": "again", "session_id": "s-1"}).json()
    assert again["reply"] == "You said: again (history 2)"
    assert again["message_id"] > body["message_id"]
    other = post(ai_api.base_url, bot["token"], {"message": "new", "session_id": "s-2"}).json()
    assert other["reply"] == "You said: new (history 0)"
    rows = db.execute("SELECT role, content FROM wds.chat_messages WHERE channel_id = %s AND session_id = %s"
                      " ORDER BY id", (bot["channel"]["id"], body["session_id"])).fetchall()
    assert rows == [("user", "hello"), ("assistant", "You said: hello (history 0)"),
                    ("user", "again"), ("assistant", "You said: again (history 2)")]


def test_a_session_id_is_made_when_omitted(cws: Workspace, ai_api: ApiProcess) -> None:
    bot = make_agent(cws, [])
    body = post(ai_api.base_url, bot["token"], {"message": "hi"}).json()
    assert len(body["session_id"]) >= 16
    follow = post(ai_api.base_url, bot["token"], {"message": "more", "session_id": body["session_id"],
                                                  "session_key": body["session_key"]}).json()
    assert follow["reply"].endswith("(history 2)")
    # the key may come as a header too
    third = post(ai_api.base_url, bot["token"], {"message": "more", "session_id": body["session_id"]},
                 headers={"X-Chat-Session-Key": body["session_key"]}, raw=True)
    assert third.status_code == 200 and third.json()["reply"].endswith("(history 4)")


def test_a_session_id_without_its_key_is_refused_and_reveals_nothing(
    cws: Workspace, ai_api: ApiProcess, db: psycopg.Connection[Any],
) -> None:
    bot = make_agent(cws, [])
    mine = post(ai_api.base_url, bot["token"], {"message": "my secret plan"}).json()
    sid, key = mine["session_id"], mine["session_key"]
    # another visitor who learnt the id: no key, a wrong key, a key of another session
    other = post(ai_api.base_url, bot["token"], {"message": "x"}).json()
    for extra in ({}, {"session_key": "A" * 43}, {"session_key": other["session_key"]}):
        r = post(ai_api.base_url, bot["token"], {"message": "what did I say?", "session_id": sid, **extra}, raw=True)
        assert (r.status_code, r.json()["code"]) == (403, "CHAT_SESSION_INVALID"), r.text
        assert "my secret plan" not in r.text
    # an id the client made up is refused the same way (the same answer: nothing tells
    # whether a session exists)
    made_up = post(ai_api.base_url, bot["token"], {"message": "hi", "session_id": "my-own-id"}, raw=True)
    assert (made_up.status_code, made_up.json()) == (403, r.json())
    # a key is bound to its channel: the same session id and key on another channel fail
    bot2 = make_agent(cws, [])
    r = post(ai_api.base_url, bot2["token"], {"message": "x", "session_id": sid, "session_key": key}, raw=True)
    assert (r.status_code, r.json()["code"]) == (403, "CHAT_SESSION_INVALID")
    # nothing was stored by the refused messages; the owner still continues
    rows = db.execute("SELECT content FROM wds.chat_messages WHERE channel_id = %s AND session_id = %s ORDER BY id",
                      (bot["channel"]["id"], sid)).fetchall()
    assert [r[0] for r in rows] == ["my secret plan", "You said: my secret plan (history 0)"]
    ok = post(ai_api.base_url, bot["token"], {"message": "go on", "session_id": sid, "session_key": key}, raw=True)
    assert ok.status_code == 200 and ok.json()["reply"] == "You said: go on (history 2)"


@pytest.mark.parametrize("how", ["body", "accept"])
def test_a_streamed_reply_is_tokens_then_done(cws: Workspace, ai_api: ApiProcess,
                                              how: str) -> None:
    bot = make_agent(cws, [])
    if how == "body":
        events = stream(ai_api.base_url, bot["token"], {"message": "stream me", "session_id": "st"})
    else:
        r = post(ai_api.base_url, bot["token"], {"message": "stream me", "session_id": "st"},
                 headers={"Accept": "text/event-stream"})
        assert r.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(r.text)
    names = [n for n, _ in events]
    assert names[-1] == "done" and set(names[:-1]) == {"token"} and len(names) > 3
    assert "".join(d["content"] for n, d in events if n == "token") == "You said: stream me (history 0)"
    done = events[-1][1]
    assert done["session_id"] == session_of(bot["token"], "st") and isinstance(done["message_id"], int)
    assert done["session_key"]


def test_tools_read_granted_tables_and_results_go_back_as_data(
    cws: Workspace, ai_api: ApiProcess, db: psycopg.Connection[Any], fake: FakeServices,
) -> None:
    tasks, _ = _tables(cws)
    bot = make_agent(cws, [tasks["id"]])
    events = stream(ai_api.base_url, bot["token"],
                    {"message": _call("list_records", {"table_id": "Tasks", "order": "id"}), "session_id": "t"})
    names = [n for n, _ in events]
    assert names[:2] == ["tool_call", "tool_result"] and names[-1] == "done"
    assert events[0][1] == {"name": "list_records", "arguments": {"table_id": "Tasks", "order": "id"}}
    assert events[1][1] == {"name": "list_records", "summary": "2 records"}
    reply = "".join(d["content"] for n, d in events if n == "token")
    assert reply.startswith("RESULT list_records true") and "water the plants" in reply
    tool_msg = fake.completions[-1]["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"]
    wrapped = json.loads(tool_msg["content"])
    assert wrapped["ok"] is True and "not instructions" in wrapped["note"]
    stored = db.execute("SELECT tool_calls FROM wds.chat_messages WHERE channel_id = %s AND role = 'assistant'",
                        (bot["channel"]["id"],)).fetchone()
    assert stored[0][0]["name"] == "list_records" and stored[0][0]["result_summary"] == "2 records"


@pytest.mark.parametrize("tool,args", [
    ("list_records", {"table_id": "Secret"}),
    ("get_record", {"table_id": "Secret", "record_id": 1}),
    ("sql_query", {"query": "SELECT * FROM Secret"}),
    ("sql_query", {"query": "SELECT Title FROM Tasks WHERE Title IN (SELECT Code FROM Secret) OR Done"}),
    ("sql_query", {"query": "SELECT Code, COUNT(*) AS n FROM Secret GROUP BY Code"}),
    ("list_columns", {"table_id": "Secret"}),
])
def test_tools_cannot_reach_tables_the_agent_was_not_granted(
    cws: Workspace, ai_api: ApiProcess, tool: str, args: dict[str, Any],
) -> None:
    tasks, _ = _tables(cws)
    bot = make_agent(cws, [tasks["id"]], config={"write": True, "delete": True})
    body = post(ai_api.base_url, bot["token"], {"message": _call(tool, args), "session_id": "x"}).json()
    summary = body["tool_calls"][0]["result_summary"]
    assert summary.split(":")[0] in ("FORBIDDEN", "NOT_FOUND", "INVALID_SQL"), summary
    assert "hunter2" not in body["reply"]


def test_list_tables_shows_only_granted_tables(cws: Workspace, ai_api: ApiProcess) -> None:
    tasks, _ = _tables(cws)
    bot = make_agent(cws, [tasks["id"]])
    body = post(ai_api.base_url, bot["token"], {"message": _call("list_tables", {}), "session_id": "x"}).json()
    assert body["tool_calls"][0]["result_summary"] == "1 tables"
    assert "Tasks" in body["reply"] and "Secret" not in body["reply"]


def test_writes_need_the_agents_write_setting(cws: Workspace, ai_api: ApiProcess,
                                              fake: FakeServices) -> None:
    tasks, secret = _tables(cws)
    reader = make_agent(cws, [tasks["id"]])
    msg = _call("create_record", {"table_id": "Tasks", "fields": {"Title": "from chat"}})
    body = post(ai_api.base_url, reader["token"], {"message": msg, "session_id": "w"}).json()
    assert body["tool_calls"][0]["result_summary"].startswith("UNKNOWN_TOOL")
    offered = {t["function"]["name"] for t in fake.completions[-2]["tools"]}
    assert "create_record" not in offered and "list_records" in offered
    # the SQL tool the agent is offered teaches the analytic grammar
    sql_tool = next(t["function"] for t in fake.completions[-2]["tools"] if t["function"]["name"] == "sql_query")
    assert "GROUP BY" in sql_tool["description"] and "JOIN" in sql_tool["description"]

    writer = make_agent(cws, [tasks["id"]], config={"write": True})
    body = post(ai_api.base_url, writer["token"], {"message": msg, "session_id": "w"}).json()
    assert body["tool_calls"][0]["result_summary"].startswith("record ")
    found = cws.api.get(f"/tables/{tasks['id']}/records", params={"Title": "eq.from chat"}).json()["records"]
    assert len(found) == 1
    refused = _call("create_record", {"table_id": "Secret", "fields": {"Code": "x"}})
    body = post(ai_api.base_url, writer["token"], {"message": refused, "session_id": "w"}).json()
    assert body["tool_calls"][0]["result_summary"].startswith("FORBIDDEN")
    assert cws.api.get(f"/tables/{secret['id']}/records").json()["records"][0]["fields"]["Code"] == "hunter2"
    delete = _call("delete_record", {"table_id": "Tasks", "record_id": found[0]["id"]})
    body = post(ai_api.base_url, writer["token"], {"message": delete, "session_id": "w"}).json()
    assert body["tool_calls"][0]["result_summary"].startswith("UNKNOWN_TOOL")


def test_a_read_only_plan_refuses_agent_writes(cws: Workspace, ai_api: ApiProcess) -> None:
    tasks, _ = _tables(cws)
    writer = make_agent(cws, [tasks["id"]], config={"write": True})
    assert cws.admin.patch(f"/workspaces/{cws.id}", json={"read_only": True}).status_code == 200
    msg = _call("create_record", {"table_id": "Tasks", "fields": {"Title": "nope"}})
    body = post(ai_api.base_url, writer["token"], {"message": msg, "session_id": "ro"}).json()
    assert body["tool_calls"][0]["result_summary"].startswith("PLAN_READ_ONLY")


def test_several_calls_in_one_round_run_in_order(cws: Workspace, ai_api: ApiProcess) -> None:
    tasks, _ = _tables(cws)
    bot = make_agent(cws, [tasks["id"]])
    msg = _call("list_tables", {}) + "\n" + _call("list_columns", {"table_id": "Tasks"})
    events = stream(ai_api.base_url, bot["token"], {"message": msg, "session_id": "m"})
    assert [n for n, _ in events][:4] == ["tool_call", "tool_result", "tool_call", "tool_result"]
    assert [d["name"] for n, d in events if n == "tool_result"] == ["list_tables", "list_columns"]


def test_tool_rounds_are_bounded(cws: Workspace, ai_api: ApiProcess,
                                 fake: FakeServices) -> None:
    bot = make_agent(cws, [])
    before = len(fake.completions)
    body = post(ai_api.base_url, bot["token"], {"message": "LOOP", "session_id": "loop"}).json()
    sent = fake.completions[before:]
    assert len(sent) == 9 and len(body["tool_calls"]) == 8
    assert all("tools" in s for s in sent[:8]) and "tools" not in sent[8]
    assert body["error"]["code"] == "TOOL_ROUNDS_EXCEEDED" and body["reply"] == ""


@pytest.mark.parametrize("case,params,body,status,code", [
    ("no token", {"type": "web"}, {"message": "hi"}, 401, "UNAUTHORIZED"),
    ("unknown token", {"type": "web", "token": "wds_chan_nope"}, {"message": "hi"}, 401, "UNAUTHORIZED"),
    ("bad type", {"type": "fax"}, {"message": "hi"}, 400, "VALIDATION_ERROR"),
])
def test_channel_token_errors(ai_api: ApiProcess, case: str, params: dict[str, str], body: dict[str, Any],
                              status: int, code: str) -> None:
    r = httpx.post(f"{ai_api.base_url}{WEBHOOK}", params=params, json=body, timeout=30)
    assert (r.status_code, r.json()["code"]) == (status, code), case


def test_disabled_mismatched_and_unbuilt_channels(cws: Workspace, ai_api: ApiProcess) -> None:
    web = make_agent(cws, [])
    patch_channel(cws, web, enabled=False)
    r = post(ai_api.base_url, web["token"], {"message": "hi", "session_id": "a"})
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")
    tg = make_agent(cws, [], channel="telegram")
    r = post(ai_api.base_url, tg["token"], {"message": "hi", "session_id": "a"})
    assert (r.status_code, r.json()["code"]) == (400, "CHANNEL_TYPE_MISMATCH")
    slack = make_agent(cws, [], channel="slack")
    r = post(ai_api.base_url, slack["token"], {"type": "event_callback"}, type="slack")
    assert (r.status_code, r.json()["code"]) == (501, "NOT_IMPLEMENTED")


@pytest.mark.parametrize("body,status,code", [
    ({"message": "x" * 8001, "session_id": "s"}, 413, "PAYLOAD_TOO_LARGE"),
    ({"message": "   ", "session_id": "s"}, 400, "VALIDATION_ERROR"),
    ({"message": "hi", "session_id": "has space"}, 400, "VALIDATION_ERROR"),
    ({"message": "hi", "session_id": "x" * 129}, 400, "VALIDATION_ERROR"),
    ({"message": 5, "session_id": "s"}, 400, "VALIDATION_ERROR"),
    ({"message": "hi", "extra": 1}, 400, "VALIDATION_ERROR"),
])
def test_message_checks(cws: Workspace, ai_api: ApiProcess, body: dict[str, Any],
                        status: int, code: str) -> None:
    bot = make_agent(cws, [])
    r = post(ai_api.base_url, bot["token"], body)
    assert (r.status_code, r.json()["code"]) == (status, code)


def test_malformed_json_is_400(cws: Workspace, ai_api: ApiProcess) -> None:
    bot = make_agent(cws, [])
    r = httpx.post(f"{ai_api.base_url}{WEBHOOK}", params={"type": "web", "token": bot["token"]},
                   content=b"{nope", headers={"Content-Type": "application/json"}, timeout=30)
    assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR")


def test_a_provider_failure_is_503_or_an_error_event(cws: Workspace, ai_api: ApiProcess,
                                                    db: psycopg.Connection[Any]) -> None:
    bot = make_agent(cws, [])
    r = post(ai_api.base_url, bot["token"], {"message": "FAIL", "session_id": "f"})
    assert (r.status_code, r.json()["code"]) == (503, "AI_PROVIDER_ERROR")
    events = stream(ai_api.base_url, bot["token"], {"message": "FAIL", "session_id": "f"})
    assert [n for n, _ in events] == ["error", "done"]
    assert events[0][1]["code"] == "AI_PROVIDER_ERROR" and events[1][1]["message_id"] is None
    rows = db.execute("SELECT count(*) FROM wds.chat_messages WHERE channel_id = %s",
                      (bot["channel"]["id"],)).fetchone()
    assert rows == (0,)  # a failed turn stores nothing, not the question without its answer


@pytest.mark.parametrize("kind", ["object", "no-choices", "text", "stream"])
def test_a_provider_answer_that_is_not_a_completion_is_503_or_an_error_event(
    cws: Workspace, ai_api: ApiProcess, db: psycopg.Connection[Any], kind: str,
) -> None:
    # HTTP 200 with {"foo": 1}, {"choices": []}, a text/plain body, or a stream of non-chunks:
    # a provider failure, never an empty reply
    bot = make_agent(cws, [])
    r = post(ai_api.base_url, bot["token"], {"message": f"JUNK {kind}", "session_id": "j"})
    assert (r.status_code, r.json()["code"]) == (503, "AI_PROVIDER_ERROR"), r.text
    assert "not a chat completion" in r.json()["error"]
    events = stream(ai_api.base_url, bot["token"], {"message": f"JUNK {kind}", "session_id": "j"})
    assert [n for n, _ in events] == ["error", "done"], events
    assert events[0][1]["code"] == "AI_PROVIDER_ERROR" and "not a chat completion" in events[0][1]["error"]
    assert events[1][1]["message_id"] is None
    # a turn that failed before any reply or tool call leaves nothing in the history
    stored = db.execute("SELECT count(*) FROM wds.chat_messages WHERE channel_id = %s",
                        (bot["channel"]["id"],)).fetchone()
    assert stored == (0,)
    assert cws.api.get("/usage").json()["quotas"]["ai_credits"]["used"] == 0  # nor charges a credit
    ok = post(ai_api.base_url, bot["token"], {"message": "hello", "session_id": "j"})
    assert ok.status_code == 200 and ok.json()["reply"] == "You said: hello (history 0)"
    assert cws.api.get("/usage").json()["quotas"]["ai_credits"]["used"] == 1


def test_a_completion_the_provider_did_not_stream_is_still_a_reply(cws: Workspace, ai_api: ApiProcess) -> None:
    bot = make_agent(cws, [])
    r = post(ai_api.base_url, bot["token"], {"message": "PLAIN hello there", "session_id": "p"})
    assert r.status_code == 200, r.text
    assert r.json()["reply"] == "hello there" and isinstance(r.json()["message_id"], int)


def test_no_provider_configured_is_503(ws: Workspace, base_url: str) -> None:
    bot = make_agent(ws, [])
    r = post(base_url, bot["token"], {"message": "hi", "session_id": "n"})
    assert (r.status_code, r.json()["code"]) == (503, "UNAVAILABLE")


def test_a_disconnect_stops_generation(cws: Workspace, ai_api: ApiProcess, db: psycopg.Connection[Any],
                                       fake: FakeServices) -> None:
    bot = make_agent(cws, [])
    aborted = fake.streams_aborted
    with httpx.stream("POST", f"{ai_api.base_url}{WEBHOOK}", params={"type": "web", "token": bot["token"]},
                      json={"message": "SLOW 150", "stream": True}, timeout=30) as resp:
        for line in resp.iter_lines():
            if line.startswith(("event: token", "event:token")):
                break
    deadline = time.monotonic() + 5  # the full answer would take 6 s
    while fake.streams_aborted == aborted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.streams_aborted == aborted + 1
    # the turn is kept with what was generated until the client left
    deadline = time.monotonic() + 5
    rows: list[Any] = []
    while len(rows) < 2 and time.monotonic() < deadline:
        rows = db.execute("SELECT role, content FROM wds.chat_messages WHERE channel_id = %s ORDER BY id",
                          (bot["channel"]["id"],)).fetchall()
        time.sleep(0.05)
    assert rows[0] == ("user", "SLOW 150") and rows[1][0] == "assistant" and rows[1][1].startswith("t0 ")
    assert not rows[1][1].rstrip().endswith("t149")


def test_per_session_messages_are_rate_limited(cws: Workspace, ai_api: ApiProcess) -> None:
    bot = make_agent(cws, [])
    codes = [post(ai_api.base_url, bot["token"], {"message": "hi", "session_id": "busy"}).status_code
             for _ in range(30)]
    assert codes == [200] * 30
    r = post(ai_api.base_url, bot["token"], {"message": "hi", "session_id": "busy"})
    assert (r.status_code, r.json()["code"]) == (429, "CHAT_RATE_LIMIT") and int(r.headers["retry-after"]) >= 1
    assert post(ai_api.base_url, bot["token"], {"message": "hi", "session_id": "calm"}).status_code == 200


def test_chat_calls_are_logged_under_usage(cws: Workspace, ai_api: ApiProcess) -> None:
    bot = make_agent(cws, [])
    assert post(ai_api.base_url, bot["token"], {"message": "count me", "session_id": "u"}).status_code == 200
    report = cws.admin.get(f"/workspaces/{cws.id}/usage").json()
    assert "chat" in json.dumps(report)


def test_a_page_on_another_origin_can_use_the_session_headers(cws: Workspace, ai_api: ApiProcess) -> None:
    """A preflight asking for X-Chat-Session-Key was refused (400), and the X-Chat-Session-Id
    / -Key answer headers were not exposed: a page on another origin could not use the
    documented header form of a chat session. Both work now."""
    origin = "https://shop.example"
    bot = make_agent(cws, [])
    url = f"{ai_api.base_url}{WEBHOOK}?type=web&token={bot['token']}"
    pre = httpx.options(url, headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                      "Access-Control-Request-Headers": "content-type, x-chat-session-key"})
    assert pre.status_code == 200, pre.text
    allowed = {h.strip().lower() for h in pre.headers["access-control-allow-headers"].split(",")}
    assert {"content-type", "x-chat-session-key"} <= allowed
    first = httpx.post(url, json={"message": "hi"}, headers={"Origin": origin}, timeout=60)
    assert first.status_code == 200, first.text
    exposed = {h.strip().lower() for h in first.headers["access-control-expose-headers"].split(",")}
    assert {"x-chat-session-id", "x-chat-session-key"} <= exposed
    sid, key = first.headers["x-chat-session-id"], first.headers["x-chat-session-key"]
    again = httpx.post(url, json={"message": "more", "session_id": sid},
                       headers={"Origin": origin, "X-Chat-Session-Key": key}, timeout=60)
    assert again.status_code == 200 and again.json()["reply"].endswith("(history 2)"), again.text
