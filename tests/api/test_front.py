"""What the front layer (api/middleware/front.py) adds to every answer, pinned: CORS
headers only for requests with an Origin (and Starlette's preflight), ``Vary: Origin``
on every answer that went past the body limit, none on a body refused before it, and
the same headers on the fast path and through FastAPI."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx

ORIGIN = "https://app.example"


def _names(r: httpx.Response) -> list[str]:
    return [k.decode().lower() for k, _ in r.headers.raw]


def test_every_answer_varies_on_origin_once(ws, base_url):
    t = ws.create_table("F", [{"name": "A", "type": "text"}])
    made = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "x"}})
    assert made.status_code == 201
    answers = [
        made,
        ws.api.get(f"/tables/{t['id']}/records"),  # fast path
        ws.api.get(f"/tables/{t['id']}/records/{made.json()['id']}"),  # fast path
        ws.api.get("/tables"),  # FastAPI
        ws.api.get(f"/tables/{t['id']}/records/999999"),  # fast path's 404
        httpx.get(f"{base_url}/healthz"),  # not an API door
        httpx.get(f"{base_url}/functions/v1/rest-api/nope"),  # no route
        ws.api.post(f"/tables/{t['id']}/records", content=b'{"fields": {"A": "\\ud800"}}',
                    headers={"Content-Type": "application/json"}),  # the text guard's 400
    ]
    for r in answers:
        assert r.headers.get_list("vary") == ["Origin"], (r.request.url, r.headers)
        assert _names(r).count("vary") == 1
        assert "access-control-allow-origin" not in r.headers


def test_a_request_with_an_origin_gets_the_cors_headers(ws):
    t = ws.create_table("F", [{"name": "A", "type": "text"}])
    for r in (ws.api.get(f"/tables/{t['id']}/records", headers={"Origin": ORIGIN}),
              ws.api.get("/tables", headers={"Origin": ORIGIN}),
              ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "y"}}, headers={"Origin": ORIGIN})):
        assert r.status_code in (200, 201)
        assert r.headers["access-control-allow-origin"] == "*"
        exposed = {h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")}
        assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-total-count",
                "idempotent-replayed"} <= exposed
        assert r.headers.get_list("vary") == ["Origin"]


def test_a_preflight_is_answered_before_auth(base_url):
    r = httpx.options(f"{base_url}/functions/v1/rest-api/tables/1/records", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, idempotency-key"})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == "*"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-max-age"] == "600"


def test_a_body_refused_before_cors_and_auth_has_none_of_their_headers(base_url):
    url = urlsplit(base_url)
    for extra in ("", f"Origin: {ORIGIN}\r\n"):
        with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
            # 1 GB announced, nothing sent: answered at once, before CORS, auth and the usage log
            sock.sendall((f"POST /functions/v1/rest-api/tables/1/records HTTP/1.1\r\nHost: {url.netloc}\r\n"
                          f"Content-Type: application/json\r\nContent-Length: 999999999\r\n{extra}\r\n").encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                assert chunk, data
                data += chunk
        head = data.partition(b"\r\n\r\n")[0].decode("latin-1").lower().split("\r\n")
        names = [line.partition(":")[0] for line in head[1:]]
        assert head[0].split()[1] == "413", head
        assert "vary" not in names and "access-control-allow-origin" not in names, head


def test_an_idempotent_create_replays_through_the_front_layer(ws):
    t = ws.create_table("F", [{"name": "A", "type": "text"}])
    key = {"Idempotency-Key": "front-1"}
    first = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "once"}}, headers=key)
    again = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "once"}}, headers=key)
    other = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "twice"}}, headers=key)
    assert first.status_code == 201 and first.headers["idempotent-replayed"] == "false"
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert other.status_code == 409 and other.json()["code"] == "CONFLICT"
    assert first.headers.get_list("vary") == ["Origin"]
    listed = ws.api.get(f"/tables/{t['id']}/records").json()["records"]
    assert [r["fields"]["A"] for r in listed] == ["once"]
