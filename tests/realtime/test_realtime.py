"""The realtime change feed end to end: real API processes, real PostgreSQL triggers."""

from __future__ import annotations

import json
import time

import psycopg
import pytest
from websockets.exceptions import ConnectionClosed

from tests.realtime.conftest import changes, open_ws, recv, subscribe


def _table(ws, name="RT"):
    return ws.create_table(name, [{"name": "Name", "type": "text"}, {"name": "Score", "type": "number"},
                                  {"name": "When", "type": "date"}])


def test_insert_update_delete_arrive_with_record_and_old_record(ws):
    t = _table(ws)
    with open_ws(ws.base_url, ws.builder_token) as conn:
        ack = subscribe(conn, t["name"])
        assert ack["table_id"] == t["id"] and ack["events"] == ["DELETE", "INSERT", "UPDATE"]
        rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "a", "Score": 1, "When": "2024-03-01"}}).json()
        ws.api.patch(f"/tables/{t['id']}/records/{rec['id']}", json={"fields": {"Score": 2}})
        ws.api.delete(f"/tables/{t['id']}/records/{rec['id']}")
        ins, upd, dele = changes(conn, 3)
    assert ins["event"] == "INSERT" and ins["old_record"] is None
    assert ins["record"] == {k: rec[k] for k in ("id", "fields", "created_at", "updated_at")}
    assert upd["event"] == "UPDATE" and upd["record"]["fields"]["Score"] == 2 and upd["old_record"]["fields"]["Score"] == 1
    assert dele["event"] == "DELETE" and dele["record"] is None and dele["old_record"]["id"] == rec["id"]
    assert ins["seq"] < upd["seq"] < dele["seq"] and ins["table_id"] == t["id"]


def test_batch_insert_emits_one_event_per_row_in_order(ws):
    t = _table(ws)
    with open_ws(ws.base_url, ws.builder_token) as conn:
        subscribe(conn, t["id"], events=["INSERT"])
        r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"Score": i} for i in range(20)]})
        assert r.status_code == 200
        got = changes(conn, 20)
    assert [c["record"]["fields"]["Score"] for c in got] == list(range(20))
    assert [c["seq"] for c in got] == sorted(c["seq"] for c in got)


def test_event_written_through_one_api_reaches_a_client_of_another(ws, tuned_api):
    t = _table(ws)
    with open_ws(tuned_api.base_url, ws.builder_token) as conn:
        subscribe(conn, t["id"])
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "cross"}})
        (got,) = changes(conn, 1)
    assert got["record"]["fields"]["Name"] == "cross"


@pytest.mark.parametrize("flt,expected", [
    ({"Score": "gt.5"}, [7, 9]),
    ({"Name": "ilike.B*"}, [7]),
    ({"Score": "in.(1,9)"}, [1, 9]),
    ({"Name": "is.null"}, [9]),
    ({"Score": "not.gt.5"}, [1]),
])
@pytest.mark.parametrize("form", ["object", "list"])  # the list form views, run-actions and MCP take too
def test_filters_select_the_events_a_list_would_return(ws, flt, expected, form):
    t = _table(ws)
    (column, text), = flt.items()
    negate, rest = (True, text[4:]) if text.startswith("not.") else (False, text)
    op, value = rest.split(".", 1)
    sent = flt if form == "object" else [{"column": column, "op": ("not." if negate else "") + op, "value": value}]
    with open_ws(ws.base_url, ws.builder_token) as conn:
        subscribe(conn, t["id"], events=["INSERT"], filter=sent)
        for name, score in (("alpha", 1), ("beta", 7), (None, 9)):
            ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": name, "Score": score}})
        got = changes(conn, len(expected))
        with pytest.raises(TimeoutError):
            recv(conn, timeout=0.7)
    assert [c["record"]["fields"]["Score"] for c in got] == expected
    listed = ws.api.get(f"/tables/{t['id']}/records", params={**flt, "order": "Score.asc"}).json()["records"]
    assert [r["fields"]["Score"] for r in listed] == expected


def test_bad_subscriptions_answer_errors_and_keep_the_socket(ws):
    t = _table(ws)
    with open_ws(ws.base_url, ws.builder_token) as conn:
        for msg, code in (
            ({"type": "subscribe", "table": "nope"}, "NOT_FOUND"),
            ({"type": "subscribe", "table": t["id"], "filter": {"Missing": "eq.1"}}, "UNKNOWN_COLUMN"),
            ({"type": "subscribe", "table": t["id"], "events": ["TRUNCATE"]}, "VALIDATION_ERROR"),
            ({"type": "subscribe", "table": t["id"], "filter": "Score=gt.1"}, "VALIDATION_ERROR"),
            ({"type": "subscribe", "table": t["id"], "filter": [{"column": "Score", "op": "gt"}]}, "VALIDATION_ERROR"),
            ({"type": "dance"}, "VALIDATION_ERROR"),
            # both spellings at once: one would be ignored (an empty filter let filters through)
            ({"type": "subscribe", "table": t["id"], "filter": {}, "filters": {"Score": "gt.1"}}, "VALIDATION_ERROR"),
        ):
            conn.send(json.dumps(msg))
            got = recv(conn)
            assert got["type"] == "error" and got["code"] == code, got
        conn.send(b"\x00\x01")  # a binary frame: an error, and the socket stays (it was dropped)
        got = recv(conn)
        assert got["type"] == "error" and got["code"] == "VALIDATION_ERROR" and "text" in got["error"], got
        conn.send(json.dumps({"type": "ping"}))
        assert recv(conn) == {"type": "pong"}


def test_only_readable_tables_and_grant_removal_stops_delivery(ws, admin):
    a, b = _table(ws, "A"), _table(ws, "B")
    profile = ws.profile([{"table_id": a["id"], "read": True}])
    token = ws.token("rest_api", profile_id=profile["id"])["token"]
    with open_ws(ws.base_url, token) as conn:
        conn.send(json.dumps({"type": "subscribe", "table": b["id"]}))
        assert recv(conn)["code"] == "FORBIDDEN"
        subscribe(conn, a["id"])
        ws.api.post(f"/tables/{a['id']}/records", json={"fields": {"Name": "seen"}})
        assert changes(conn, 1)[0]["record"]["fields"]["Name"] == "seen"
        r = admin.put(f"/workspaces/{ws.id}/profiles/{profile['id']}/grants", json=[{"table_id": b["id"], "read": True}])
        assert r.status_code == 200, r.text
        time.sleep(0.3)  # the grant change reaches the token cache by NOTIFY
        ws.api.post(f"/tables/{a['id']}/records", json={"fields": {"Name": "hidden"}})
        got = recv(conn)
        assert got["type"] == "error" and got["code"] == "FORBIDDEN" and got["table_id"] == a["id"]
        with pytest.raises(TimeoutError):
            recv(conn, timeout=0.7)


def test_resume_with_since_replays_what_was_missed(ws):
    t = _table(ws)
    with open_ws(ws.base_url, ws.builder_token) as conn:
        subscribe(conn, t["id"])
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "first"}})
        last = changes(conn, 1)[0]["seq"]
    ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "missed-1"}})
    ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "missed-2"}})
    with open_ws(ws.base_url, ws.builder_token, since=last) as conn:
        ack = subscribe(conn, t["id"])
        assert ack["since"] == last
        replayed = changes(conn, 2)
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "live"}})
        live = changes(conn, 1)
    assert [c["record"]["fields"]["Name"] for c in replayed + live] == ["missed-1", "missed-2", "live"]
    with open_ws(ws.base_url, ws.builder_token) as conn:  # since in the subscribe message
        subscribe(conn, t["id"], since=last, events=["INSERT"], filter={"Name": "eq.missed-2"})
        assert changes(conn, 1)[0]["record"]["fields"]["Name"] == "missed-2"


def test_auth_by_query_or_first_message_and_refusals(ws):
    t = _table(ws)
    with open_ws(ws.base_url) as conn:
        conn.send(json.dumps({"type": "auth", "token": ws.builder_token}))
        subscribe(conn, t["id"])
    with open_ws(ws.base_url) as conn:  # a binary first message: refused as a missing auth message
        conn.send(b"\x00\x01")
        assert recv(conn)["code"] == "UNAUTHORIZED"
        with pytest.raises(ConnectionClosed) as info:
            conn.recv(timeout=5)
        assert info.value.rcvd.code == 1008
    for token, code in (("wds_rest_nope", "UNAUTHORIZED"), (ws.token("user_mcp")["token"], "WRONG_PROTOCOL")):
        with open_ws(ws.base_url, token) as conn:
            assert recv(conn)["code"] == code
            with pytest.raises(ConnectionClosed) as info:
                conn.recv(timeout=5)
            assert info.value.rcvd.code == 1008


def test_heartbeats_and_pings(ws, tuned_api):
    with open_ws(tuned_api.base_url, ws.builder_token) as conn:
        assert recv(conn, timeout=5, skip=()) == {"type": "heartbeat"}
        conn.send(json.dumps({"type": "ping"}))
        assert recv(conn) == {"type": "pong"}
        conn.ping().wait(5)  # protocol-level pings are answered too


def test_slow_consumer_is_disconnected_with_a_reason(ws, tuned_api):
    t = _table(ws)
    big = "x" * 200_000
    with open_ws(tuned_api.base_url, ws.builder_token, max_queue=1) as conn:
        subscribe(conn, t["id"])
        for _ in range(4):  # ~16 MB of events while the client reads nothing
            r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"Name": big}] * 20})
            assert r.status_code == 200
        with pytest.raises(ConnectionClosed) as info:
            while True:
                conn.recv(timeout=20)
    assert info.value.rcvd is not None and info.value.rcvd.code == 4000
    assert "slow consumer" in info.value.rcvd.reason


def test_computed_values_arrive_with_the_insert_and_as_updates_after_an_edit(ws, services):
    """A create computes its formulas before its INSERT: one event, complete. An edit's
    recomputed values are written by its run: an UPDATE of the edit, then one of the run."""
    t = ws.create_table("P", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 3"}])
    with open_ws(ws.base_url, ws.builder_token) as conn:
        subscribe(conn, t["id"])
        r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 4}})
        assert r.json()["fields"]["B"] == 12
        (ins,) = changes(conn, 1)
        assert ins["event"] == "INSERT" and ins["record"]["fields"]["B"] == 12
        r = ws.api.patch(f"/tables/{t['id']}/records/{ins['record']['id']}", json={"fields": {"A": 5}})
        assert r.json()["fields"]["B"] == 15
        edit, upd = changes(conn, 2)
    assert edit["event"] == "UPDATE" and edit["record"]["fields"] == {"A": 5, "B": 12}
    assert upd["event"] == "UPDATE" and upd["record"]["fields"]["B"] == 15 and upd["old_record"]["fields"]["B"] == 12
    with psycopg.connect(services.pg.dsn) as conn:  # internal columns never reach events
        stored = [conn.execute("SELECT record FROM wds.events WHERE workspace_id = %s AND seq = %s",
                               (ws.id, e["seq"])).fetchone()[0] for e in (ins, upd)]
    assert all("_pipeline" not in s and s["id"] == ins["record"]["id"] for s in stored)


def test_subscribed_carries_the_current_seq_so_a_quiet_client_can_resume(ws):
    t = _table(ws)
    ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "before"}})
    with open_ws(ws.base_url, ws.builder_token) as conn:
        ack = subscribe(conn, t["id"])  # has seen no event yet
    assert ack["seq"] >= 1
    ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "while away"}})
    with open_ws(ws.base_url, ws.builder_token, since=ack["seq"]) as conn:
        subscribe(conn, t["id"])
        assert [c["record"]["fields"]["Name"] for c in changes(conn, 1)] == ["while away"]


def test_a_filter_follows_its_column_through_a_rename_and_a_conversion_and_ends_said_when_deleted(ws):
    """A subscription's filter names its column by id: a rename keeps it, a conversion
    plans it again for the new type (what a list with the same filter returns), and a
    column deleted or converted to a type the filter does not fit ends the subscription
    with ``SUBSCRIPTION_ENDED``, never silence. A filtered subscription whose filter still
    applies, on the same table, and an unfiltered one keep receiving throughout."""
    t = _table(ws)
    score = next(c["id"] for c in t["columns"] if c["name"] == "Score")
    name = next(c["id"] for c in t["columns"] if c["name"] == "Name")
    with (open_ws(ws.base_url, ws.builder_token) as filtered, open_ws(ws.base_url, ws.builder_token) as other,
          open_ws(ws.base_url, ws.builder_token) as everything):
        subscribe(filtered, t["id"], events=["INSERT"], filter={"Score": "gt.5"})
        subscribe(other, t["id"], events=["INSERT"], filter={"Name": "like.keep*"})
        subscribe(everything, t["id"], events=["INSERT"])

        def insert(fields):
            r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": fields})
            assert r.status_code == 201, r.text

        insert({"Score": 7, "Name": "keep1"})
        assert ws.api.patch(f"/tables/{t['id']}/columns/{score}", json={"name": "Points"}).status_code == 200
        insert({"Points": 9, "Name": "keep2"})
        insert({"Points": 1, "Name": "drop"})
        # number → text: "gt.5" compares text now, as a list with it does ("7" > "5", "10" < "5")
        assert ws.api.patch(f"/tables/{t['id']}/columns/{score}", json={"type": "text"}).status_code == 200
        insert({"Points": "8", "Name": "keep3"})
        insert({"Points": "10", "Name": "x"})
        listed = ws.api.get(f"/tables/{t['id']}/records", params={"Points": "gt.5", "order": "id.asc"}).json()
        assert [r["fields"]["Points"] for r in listed["records"]] == ["7", "9", "8"]
        # (an event is shown with the names, and types, of its delivery)
        got = [c["record"]["fields"].get("Points", c["record"]["fields"].get("Score")) for c in changes(filtered, 3)]
        assert [str(v) for v in got] == ["7", "9", "8"]
        # deleted: the filter cannot apply any more, and the client is told
        r = ws.api.delete(f"/tables/{t['id']}/columns/{score}", params={"force": "true"})
        assert r.status_code == 200, r.text
        insert({"Name": "keep4"})
        ended = recv(filtered)
        assert ended["type"] == "error" and ended["code"] == "SUBSCRIPTION_ENDED" and ended["table_id"] == t["id"]
        with pytest.raises(TimeoutError):
            recv(filtered, timeout=0.7)
        # a filter that no longer fits the column's new type ends too: like on a number
        assert ws.api.patch(f"/tables/{t['id']}/columns/{name}", json={"type": "number", "allow_loss": True}).status_code == 200
        insert({"Name": 5})
        assert recv(other)["record"]["fields"]["Name"] == "keep1"
        assert [c["record"]["fields"]["Name"] for c in changes(other, 3)] == ["keep2", "keep3", "keep4"]
        ended = recv(other)
        assert ended["type"] == "error" and ended["code"] == "SUBSCRIPTION_ENDED", ended
        seen = [c["record"]["fields"].get("Name") for c in changes(everything, 7)]
    assert seen == ["keep1", "keep2", "drop", "keep3", "x", "keep4", 5]


def test_a_replay_across_a_lossy_conversion_still_judges_filters_on_other_columns(ws):
    """Events stored before a column's lossy conversion hold values its new type cannot
    read ("abc" in a column now a number). A filter on another column judges them all the
    same (only the columns a filter reads are turned back into the row type), and the
    replayed records show such a value as it was stored (they are history) instead of
    failing to decode, which dropped the socket."""
    t = _table(ws)
    name = next(c["id"] for c in t["columns"] if c["name"] == "Name")
    with open_ws(ws.base_url, ws.builder_token) as conn:
        start = subscribe(conn, t["id"], events=["INSERT"])["seq"]
    for text, score in (("abc", 1), ("12", 7), ("xyz", 9)):
        r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": text, "Score": score}})
        assert r.status_code == 201, r.text
    r = ws.api.patch(f"/tables/{t['id']}/columns/{name}", json={"type": "number", "allow_loss": True})
    assert r.status_code == 200 and r.json()["conversion"]["lost"] == 2, r.text
    with open_ws(ws.base_url, ws.builder_token) as conn:
        subscribe(conn, t["id"], events=["INSERT"], filter={"Score": "gt.5"}, since=start)
        got = changes(conn, 2)
        with pytest.raises(TimeoutError):
            recv(conn, timeout=0.7)
    assert [(c["record"]["fields"]["Score"], c["record"]["fields"]["Name"]) for c in got] == [(7, "12"), (9, "xyz")]
