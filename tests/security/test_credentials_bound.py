"""Credentials are bound to hosts (issue 22).

The probe that started it: a ``rest_api`` token made an ``http_request`` column naming the
workspace's credentials with a URL at its own listener, and one insert delivered
``Authorization: Bearer sk_live_…``, ``X-Api-Key`` and ``?api_key=`` in clear. Now a
credential carries ``hosts`` (required), the proxy attaches it only to a matching host on
every hop, and anything else fails the record with ``CREDENTIAL_HOST_MISMATCH`` before a
byte leaves. The secret never lands in a cell, an error, a realtime event, Temporal
history or a log. Asserted at a local listener that echoes requests back.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import anyio
import anyio.from_thread
import httpx
import orjson
import psycopg
import pytest
from aiohttp import web
from sqlalchemy import create_engine
from temporalio.client import Client

from activities.proxy import Credential, Outcome, OutboundRequest, send
from storage.errors import ValidationError
from storage.migrations import m0008_credential_hosts, sqlalchemy_url
from storage.secrets import check_hosts, host_allowed
from tests.conftest import ROOT, ApiProcess, Services, Workspace
from tests.outside.servers import Received, ServerThread
from wds.runtime import free_port


def listener() -> ServerThread:
    """Echoes ``{authorization, x-api-key, api_key, method, path, query, headers, raw_path}``
    back (``raw_path``: the path and query string exactly as sent) with
    the status asked in ``?status=``;
    ``/redirect?to=URL`` answers a 302 to it."""
    server: ServerThread

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        server.calls.append(Received(request.method, request.path, dict(request.query), dict(request.headers),
                                     await request.read()))
        return await handler(request)

    async def echo(request: web.Request) -> web.Response:
        # what carries a credential first: an error keeps only the first 200 characters
        data = {"authorization": request.headers.get("Authorization"),
                "x-api-key": request.headers.get("X-Api-Key"),
                "api_key": request.query.get("api_key"),
                "method": request.method, "path": request.path, "query": dict(request.query),
                "headers": dict(request.headers), "raw_path": request.raw_path}
        status = int(request.query.get("status", "200"))
        if request.query.get("escape"):  # every character of every string as a JSON \\u escape
            return web.Response(body=_escaped(data).encode(), status=status, content_type="application/json")
        return web.json_response(data, status=status)

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": request.query["to"]})

    app = web.Application(middlewares=[record])
    app.router.add_route("*", "/echo", echo)
    app.router.add_route("*", "/redirect", redirect)
    server = ServerThread(app)
    return server.start()


@pytest.fixture(scope="module")
def echo() -> Iterator[ServerThread]:
    server = listener()
    yield server
    server.stop()


def _escaped(value: Any) -> str:
    """JSON with every character of every string written as ``\\uXXXX``."""
    if isinstance(value, str):
        return '"' + "".join(f"\\u{ord(c):04x}" for c in value) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"{_escaped(k)}:{_escaped(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


@pytest.fixture(scope="module")
def other() -> Iterator[ServerThread]:
    """A second listener: the same host (127.0.0.1), another port, so another origin."""
    server = listener()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def chatty(services: Services) -> Iterator[ApiProcess]:
    """A dev-mode API (loopback allowed) with every logger of the process (ours, httpx,
    httpcore, temporalio, uvicorn and its access log) at DEBUG into its log file, and its
    own task queue so that its in-process worker runs these pipelines and logs there too."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log = services.tmp / f"api-security-{port}.log"
    config = services.tmp / f"log-config-{port}.json"
    config.write_text(json.dumps({
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
        "handlers": {"out": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stdout"}},
        "root": {"level": "DEBUG", "handlers": ["out"]},
    }))
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--host", "127.0.0.1",
         "--port", str(port), "--log-config", str(config), "--log-level", "debug"],
        cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env=services.env(WDS_PUBLIC_BASE_URL=base_url, WDS_LOG_LEVEL="debug",
                         WDS_TASK_QUEUE=f"wds-sec-{secrets.token_hex(4)}"),
    )
    api = ApiProcess(base_url, proc, log)
    try:
        with anyio.from_thread.start_blocking_portal() as portal:
            portal.call(_healthy, base_url, proc)
        yield api
    finally:
        api.stop()


async def _healthy(base_url: str, proc: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(90):
        async with httpx.AsyncClient() as client:
            while proc.poll() is None:
                try:
                    if (await client.get(f"{base_url}/healthz", timeout=2)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await anyio.sleep(0.2)
    raise RuntimeError("the API exited early")


@pytest.fixture
def rest(ws: Workspace, chatty: ApiProcess) -> Iterator[httpx.Client]:
    """The builder token of ``ws`` on the debug-logging API."""
    with httpx.Client(base_url=f"{chatty.base_url}/functions/v1/rest-api",
                      headers={"Authorization": f"Bearer {ws.builder_token}"}, timeout=60) as client:
        yield client


def credential(ws: Workspace, name: str, type: str, secret: str, hosts: list[str] | None,
               header_name: str | None = None) -> httpx.Response:
    body: dict[str, Any] = {"name": name, "type": type, "secret": secret}
    if hosts is not None:
        body["hosts"] = hosts
    if header_name is not None:
        body["header_name"] = header_name
    return ws.admin.post(f"/workspaces/{ws.id}/credentials", json=body)


def bound(ws: Workspace, name: str, type: str, secret: str, hosts: list[str], header_name: str | None = None) -> None:
    r = credential(ws, name, type, secret, hosts, header_name)
    assert r.status_code == 201, r.text


def call(url: str, **config: Any) -> dict[str, Any]:
    return {"name": "Call", "type": "http_request", "config": {"url": url, **config}}


def table(client: httpx.Client, columns: list[dict[str, Any]]) -> dict[str, Any]:
    r = client.post("/tables", json={"name": f"t-{secrets.token_hex(3)}", "columns": columns})
    assert r.status_code == 201, r.text
    return r.json()


def write(client: httpx.Client, t: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    r = client.post(f"/tables/{t['id']}/records", json={"fields": fields})
    assert r.status_code == 201, r.text
    return r.json()


def tagged(server: ServerThread, tag: str, path: str = "/echo") -> list[Received]:
    return [c for c in server.calls if c.path == path and c.query.get("tag") == tag]


KINDS = [("bearer", None), ("header", "X-Api-Key"), ("query", "api_key"), ("basic", None)]


def secret_for(kind: str) -> str:
    return ("user:" if kind == "basic" else "") + "sk_live_" + secrets.token_hex(16)


# --------------------------------------------------------------------------- creation


@pytest.mark.parametrize(("hosts", "code"), [
    (None, "CREDENTIAL_HOSTS_REQUIRED"),
    ([], "CREDENTIAL_HOSTS_REQUIRED"),
    (["https://api.stripe.com"], "INVALID_HOST_PATTERN"),
    (["api.stripe.com/v1"], "INVALID_HOST_PATTERN"),
    (["*"], "INVALID_HOST_PATTERN"),
    (["*.com"], "INVALID_HOST_PATTERN"),
    (["api.*.example.com"], "INVALID_HOST_PATTERN"),
    (["*.127.0.0.1"], "INVALID_HOST_PATTERN"),
    (["api.stripe.com:0"], "INVALID_HOST_PATTERN"),
    (["api.stripe.com:70000"], "INVALID_HOST_PATTERN"),
    (["[::1"], "INVALID_HOST_PATTERN"),
    (["::1:8443x"], "INVALID_HOST_PATTERN"),
    ([""], "INVALID_HOST_PATTERN"),
    ([5], "INVALID_HOST_PATTERN"),
    ("api.stripe.com", "INVALID_HOST_PATTERN"),
])
def test_a_credential_needs_valid_hosts(ws, hosts, code):
    r = credential(ws, "stripe", "bearer", "sk_live_x", hosts)
    assert r.status_code == 400 and r.json()["code"] == code, r.text
    assert ws.admin.get(f"/workspaces/{ws.id}/credentials").json() == []


def test_hosts_are_listed_normalised_and_replaced_never_with_the_secret(ws):
    secret = secret_for("bearer")
    bound(ws, "crm", "bearer", secret, ["API.Example.com.", "*.Example.com:8443", "[0::1]", "127.0.0.1",
                                        "api.example.com", "bücher.example"])
    listed = ws.admin.get(f"/workspaces/{ws.id}/credentials")
    assert listed.json()[0]["hosts"] == ["api.example.com", "*.example.com:8443", "[::1]", "127.0.0.1",
                                         "xn--bcher-kva.example"]
    assert secret not in listed.text
    path = f"/workspaces/{ws.id}/credentials"
    r = ws.admin.patch(f"{path}/crm", json={"hosts": ["other.example"]})
    assert r.status_code == 200 and r.json()["hosts"] == ["other.example"] and secret not in r.text
    cid = r.json()["id"]
    for body, code in (({"hosts": []}, "CREDENTIAL_HOSTS_REQUIRED"), ({}, "CREDENTIAL_HOSTS_REQUIRED"),
                       ({"hosts": ["a/b"]}, "INVALID_HOST_PATTERN"), ({"hosts": ["a.example"], "secret": "x"},
                                                                      "VALIDATION_ERROR")):
        r = ws.admin.patch(f"{path}/{cid}", json=body)
        assert r.status_code == 400 and r.json()["code"] == code
    assert ws.admin.get(path).json()[0]["hosts"] == ["other.example"]
    assert ws.admin.patch(f"{path}/nope", json={"hosts": ["a.example"]}).json()["code"] == "NOT_FOUND"


@pytest.mark.parametrize(("patterns", "url", "ok"), [
    (["api.stripe.com"], "https://api.stripe.com/v1/charges", True),
    (["api.stripe.com"], "https://API.STRIPE.COM./v1", True),
    (["api.stripe.com"], "http://api.stripe.com:8080/", True),  # no port in the pattern: any port
    (["api.stripe.com"], "https://api.stripe.com.evil.example/", False),
    (["api.stripe.com"], "https://evilapi.stripe.com/", False),
    (["api.stripe.com"], "https://api.stripe.com@evil.example/", False),  # user info is not the host
    (["api.stripe.com"], "https://evil.example/#@api.stripe.com", False),
    (["api.stripe.com"], "https://evil.example/?u=https://api.stripe.com/", False),
    (["*.example.com"], "https://a.example.com/", True),
    (["*.example.com"], "https://a.b.example.com/", True),
    (["*.example.com"], "https://example.com/", False),  # not the apex
    (["*.example.com"], "https://badexample.com/", False),
    (["example.com", "*.example.com"], "https://example.com/", True),
    (["127.0.0.1:8443"], "http://127.0.0.1:8443/x", True),
    (["127.0.0.1:8443"], "http://127.0.0.1:8444/x", False),
    (["api.x.com:443"], "https://api.x.com/", True),  # the scheme's default port counts
    (["api.x.com:443"], "http://api.x.com/", False),
    (["[::1]"], "http://[::1]:9000/", True),
    (["127.0.0.1"], "http://localhost/", False),  # names, not resolved addresses
    (["localhost"], "http://127.0.0.1/", False),
    ([], "https://api.stripe.com/", False),  # an empty list matches nothing
])
def test_host_patterns_match_the_url_host_name(patterns, url, ok):
    assert host_allowed(check_hosts(patterns) if patterns else [], httpx.URL(url)) is ok


def test_check_hosts_refuses_too_many_patterns():
    with pytest.raises(ValidationError) as exc:
        check_hosts([f"h{i}.example" for i in range(51)])
    assert exc.value.code == "INVALID_HOST_PATTERN"


# --------------------------------------------------------------------------- the probe


def test_the_probe_a_column_calling_another_host_is_refused_at_creation(ws, echo):
    """The issue's probe, with a rest_api token: a literal URL at the tenant's own listener."""
    for kind, header_name in KINDS[:3]:
        bound(ws, f"live-{kind}", kind, secret_for(kind), ["api.stripe.example"], header_name)
    token = ws.token("rest_api")["token"]
    attacker = ws.client(token)
    for kind, _ in KINDS[:3]:
        r = attacker.post("/tables", json={"name": f"probe-{kind}", "columns": [
            {"name": "A", "type": "text"}, call(echo.url + "/echo?tag=probe", credential=f"live-{kind}")]})
        assert r.status_code == 400 and r.json()["code"] == "CREDENTIAL_HOST_MISMATCH", r.text
    # a loop sub-step, an action's literal URL parameter and a column edit are checked too
    t = ws.create_table(columns=[{"name": "A", "type": "text"}, {"name": "P", "type": "json_parser",
                                                                  "config": {"source_column": "A", "path": "@"}}])
    refused = [
        {"name": "Each", "type": "loop", "config": {"source_column": "P", "step": {
            "type": "http_request", "config": {"url": echo.url + "/echo", "credential": "live-bearer"}}}},
        {"name": "Hook", "type": "action", "config": {"group_id": "webhook", "request_id": "post_json",
                                                      "credential": "live-header",
                                                      "params": {"url": echo.url + "/echo", "payload": "{}"}}},
    ]
    for column in refused:
        r = ws.api.post(f"/tables/{t['id']}/columns", json=column)
        assert r.status_code == 400 and r.json()["code"] == "CREDENTIAL_HOST_MISMATCH", r.text
    ok = ws.api.post(f"/tables/{t['id']}/columns", json=call("https://api.stripe.example/v1", credential="live-query"))
    assert ok.status_code == 201, ok.text
    r = ws.api.patch(f"/tables/{t['id']}/columns/{ok.json()['id']}",
                     json={"config": {"url": echo.url + "/echo", "credential": "live-query"}})
    assert r.status_code == 400 and r.json()["code"] == "CREDENTIAL_HOST_MISMATCH"
    assert [c for c in echo.calls if c.query.get("tag") == "probe"] == []


@pytest.mark.parametrize(("kind", "header_name"), KINDS)
def test_a_templated_host_outside_the_binding_is_sent_nothing(ws, rest, echo, kind, header_name):
    secret = secret_for(kind)
    bound(ws, "live", kind, secret, ["api.stripe.example"], header_name)
    t = table(rest, [{"name": "Host", "type": "text"}, {"name": "Tag", "type": "text"},
                     call("http://{{ Host }}/echo?tag={{ Tag }}", credential="live")])
    tag = secrets.token_hex(4)
    rec = write(rest, t, {"Host": f"127.0.0.1:{echo.port}", "Tag": tag})
    error = rec["pipeline"]["errors"]["Call"]
    assert error.startswith("CREDENTIAL_HOST_MISMATCH") and "127.0.0.1" in error, rec["pipeline"]
    assert tagged(echo, tag) == []
    assert secret not in str(rec)


def test_redirects_are_checked_against_the_hosts_on_every_hop(ws, rest, echo, other):
    secret = secret_for("header")
    bound(ws, "svc", "header", secret, ["127.0.0.1"], "X-Api-Key")
    t = table(rest, [{"name": "To", "type": "text"},
                     call(echo.url + "/redirect?to={{ To | urlencode }}", credential="svc",
                          headers={"Cookie": "session=user-set"})])
    # to another host name (the same machine): refused, and the hop is never made
    tag = secrets.token_hex(4)
    rec = write(rest, t, {"To": f"http://localhost:{echo.port}/echo?tag={tag}"})
    assert rec["pipeline"]["errors"]["Call"].startswith("CREDENTIAL_HOST_MISMATCH"), rec["pipeline"]
    assert tagged(echo, tag) == []
    # to a bound host on another port (another origin): the credential goes, the step's own
    # Cookie header does not (the same-origin strip stays)
    tag = secrets.token_hex(4)
    rec = write(rest, t, {"To": f"{other.url}/echo?tag={tag}"})
    assert rec["pipeline"]["status"] == "ok", rec["pipeline"]
    [got] = tagged(other, tag)
    assert got.headers["X-Api-Key"] == secret and "Cookie" not in got.headers
    assert rec["fields"]["Call"]["headers"]["X-Api-Key"] == "[redacted]"


# --------------------------------------------------------------------------- never recorded


async def _history(address: str, workflow_id: str) -> bytes:
    client = await Client.connect(address)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return b"".join(event.SerializeToString() for event in history.events)


@pytest.mark.parametrize(("kind", "header_name"), KINDS)
def test_the_secret_is_never_recorded(ws, rest, echo, services, chatty, kind, header_name):
    secret = secret_for(kind)
    bound(ws, "live", kind, secret, ["127.0.0.1"], header_name)
    t = table(rest, [{"name": "Status", "type": "text"}, {"name": "Tag", "type": "text"},
                     call(echo.url + "/echo?status={{ Status }}&tag={{ Tag }}", credential="live")])
    ok_tag, err_tag = secrets.token_hex(4), secrets.token_hex(4)
    ok = write(rest, t, {"Status": "200", "Tag": ok_tag})
    failed = write(rest, t, {"Status": "418", "Tag": err_tag})
    # it was sent (the listener got it, in the header or the query string)...
    [got] = tagged(echo, ok_tag)
    sent = got.headers.get("Authorization", "") + got.headers.get(header_name or "", "") + got.query.get(
        header_name or "", "")
    assert (secret if kind != "basic" else "Basic ") in sent
    # ...and echoed back in headers and query string: never stored or returned
    assert ok["pipeline"]["status"] == "ok" and "[redacted]" in str(ok["fields"]["Call"])
    assert failed["pipeline"]["errors"]["Call"].startswith("HTTP 418") and "[redacted]" in str(failed["pipeline"])
    for rec in (ok, failed):
        assert secret not in str(rec)
        stored = rest.get(f"/tables/{t['id']}/records/{rec['id']}")
        assert stored.status_code == 200 and secret not in stored.text
    with psycopg.connect(services.pg.dsn) as conn:
        events = conn.execute(
            "SELECT coalesce(string_agg(coalesce(record::text, '') || coalesce(old_record::text, ''), ''), '')"
            " FROM wds.events WHERE workspace_id = %s", (ws.id,)).fetchone()[0]
    # the realtime events of both writes (inserts, then the computed cells' updates)
    assert ok_tag in events and secret not in events and "[redacted]" in events
    for rec in (ok, failed):
        history = asyncio.run(_history(services.temporal.address, rec["pipeline"]["run_id"]))
        assert ok_tag.encode() in history or err_tag.encode() in history
        assert secret.encode() not in history
    log = chatty.log.read_text(errors="replace")
    # the process logged at DEBUG (the worker's activities among it): the check is not vacuous
    assert "DEBUG" in log and "http_step" in log
    assert secret not in log


def test_a_secret_echoed_in_json_escapes_is_redacted_too(ws, rest, echo):
    """The bytes of ``"\\u0042\\u0065…"`` do not show the secret, its parsed value does:
    the proxy redacts the parsed body as well, in the cell and in an error's snippet."""
    secret = secret_for("bearer")
    bound(ws, "esc", "bearer", secret, ["127.0.0.1"])
    t = table(rest, [{"name": "Status", "type": "text"}, {"name": "Tag", "type": "text"},
                     call(echo.url + "/echo?escape=1&status={{ Status }}&tag={{ Tag }}", credential="esc")])
    escaped = "".join(f"\\u{ord(c):04x}" for c in secret)
    ok = write(rest, t, {"Status": "200", "Tag": secrets.token_hex(4)})
    failed = write(rest, t, {"Status": "418", "Tag": secrets.token_hex(4)})
    assert ok["pipeline"]["status"] == "ok" and ok["fields"]["Call"]["authorization"] == "Bearer [redacted]", ok
    assert failed["pipeline"]["errors"]["Call"].startswith("HTTP 418") and "[redacted]" in str(failed["pipeline"])
    for rec in (ok, failed):
        stored = rest.get(f"/tables/{t['id']}/records/{rec['id']}")
        assert stored.status_code == 200
        for text in (stored.text, str(stored.json())):
            assert secret not in text and escaped not in text and escaped.lower() not in text.lower()
    listed = rest.post("/sql", json={"query": f"SELECT Call FROM \"{t['name']}\""})
    assert listed.status_code == 200 and secret not in str(listed.json())


def test_a_query_secret_with_a_space_is_redacted_from_the_echoed_query_string(ws, rest, echo):
    """The hostile-tenant probe: httpx writes a space in a query parameter as ``+`` (and
    ``+`` as ``%2B``), a form the redaction did not know; the receiver echoed the query
    string as sent and the cell kept ``api_key=SECRET+QUERY%2B456``."""
    secret = "SECRET QUERY+456 " + secrets.token_hex(4)
    bound(ws, "cq", "query", secret, [f"127.0.0.1:{echo.port}"], "api_key")
    t = table(rest, [{"name": "Tag", "type": "text"},
                     call(echo.url + "/echo?tag={{ Tag }}", method="GET", credential="cq")])
    tag = secrets.token_hex(4)
    rec = write(rest, t, {"Tag": tag})
    [got] = tagged(echo, tag)
    assert got.query["api_key"] == secret  # it was sent...
    assert rec["pipeline"]["status"] == "ok", rec["pipeline"]
    cell = rec["fields"]["Call"]
    assert cell["raw_path"] == f"/echo?tag={tag}&api_key=[redacted]", cell  # ...and echoed, redacted
    stored = rest.get(f"/tables/{t['id']}/records/{rec['id']}")
    assert stored.status_code == 200
    for text in (json.dumps(rec), stored.text):
        for form in (secret, quote_plus(secret), quote(secret, safe=""), quote(secret)):
            assert form not in text, form


# every printable ASCII character and a few beyond (Latin-1, a 3-byte and a 4-byte UTF-8
# character, a no-break space)
SECRET_CHARS = [chr(i) for i in range(0x20, 0x7F)] + ["é", "ß", "\u00a0", "€", "😀"]


def _encodings(secret: str) -> set[str]:
    """Every form of ``secret`` a request built by httpx can carry: as is, each
    percent-encoding (``+`` or ``%20`` for a space), and the query value httpx writes."""
    built = httpx.URL("http://h/e").copy_merge_params([("k", secret)]).raw_path.decode().split("k=", 1)[1]
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret), quote_plus(secret, safe="/"), built}
    return forms | {f.lower() for f in forms if "%" in f}


@pytest.mark.parametrize(("kind", "header_name"), [("query", "api_key"), ("header", "X-Api-Key")])
def test_no_character_lets_an_echoed_secret_past_the_redaction(echo, kind, header_name):
    """The proxy itself (``activities.proxy.send``, as every step calls it) against the
    listener, once per character: the echoed secret is in no cell in any encoding.
    A header secret httpx cannot send (not ASCII) fails the record, without the secret."""
    async def run() -> list[tuple[str, Outcome]]:
        out = []
        async with httpx.AsyncClient() as client:
            for ch in SECRET_CHARS:
                secret = f"sk {ch}+{ch}x{ch}z"
                cred = Credential(name="c", type=kind, header_name=header_name, secret=secret,
                                  hosts=(f"127.0.0.1:{echo.port}",))
                req = OutboundRequest(method="GET", url=f"{echo.url}/echo?status=200", headers={},
                                      content=None, idempotency_key="k", credential=cred)
                out.append((secret, await send(client, req, deadline=time.monotonic() + 10, max_attempts=1)))
        return out

    sent = 0
    for secret, outcome in asyncio.run(run()):
        text = orjson.dumps({"value": outcome.value, "error": outcome.error}).decode()
        # the cell as stored, and the same JSON with every escape undone
        for shown in (text, json.dumps(json.loads(text), ensure_ascii=False)):
            for form in _encodings(secret):
                assert form not in shown, (secret, form, shown)
        if outcome.value is not None:
            sent += 1
            assert "[redacted]" in text, (secret, text)
            if kind == "query":
                assert outcome.value["query"]["api_key"] == "[redacted]"
                assert outcome.value["raw_path"].endswith("api_key=[redacted]"), (secret, outcome.value)
            else:
                assert outcome.value["x-api-key"] == "[redacted]", (secret, outcome.value)
        else:
            assert kind == "header" and not secret.isascii(), (secret, outcome)
    # every query secret was sent and echoed; every ASCII header secret too
    assert sent == (len(SECRET_CHARS) if kind == "query" else sum(ch.isascii() for ch in SECRET_CHARS))


# --------------------------------------------------------------------------- upgrade


def test_the_migration_binds_credentials_to_the_literal_hosts_their_columns_call(ws, rest, echo, services):
    bound(ws, "lit", "bearer", "sk_live_lit_" + secrets.token_hex(8), ["x.invalid"])
    bound(ws, "tpl", "bearer", "sk_live_tpl_" + secrets.token_hex(8), ["x.invalid"])
    bound(ws, "act", "bearer", "sk_live_act_" + secrets.token_hex(8), ["x.invalid"])
    bound(ws, "unused", "bearer", "sk_live_un_" + secrets.token_hex(8), ["x.invalid"])
    # columns made while the hosts were open (as before the upgrade): widen, create, reset
    for name in ("lit", "tpl", "act"):
        ws.admin.patch(f"/workspaces/{ws.id}/credentials/{name}",
                       json={"hosts": ["*.example.com", "api.openai.com", "127.0.0.1"]})
    t = table(rest, [
        {"name": "Host", "type": "text"},
        {"name": "P", "type": "json_parser", "config": {"source_column": "Host", "path": "@"}},
        call("https://API.a.example.com/v1/{{ Host }}", credential="lit"),
        {"name": "Each", "type": "loop", "config": {"source_column": "P", "step": {
            "type": "http_request", "config": {"url": "http://127.0.0.1:8443/x?i={{ item }}", "credential": "lit"}}}},
        {"name": "Tpl", "type": "http_request", "config": {"url": "http://{{ Host }}/echo", "credential": "tpl"}},
        {"name": "Ai", "type": "action", "config": {"group_id": "openai", "request_id": "chat_completion",
                                                    "credential": "act", "params": {"prompt": "{{ Host }}"}}},
    ])
    with psycopg.connect(services.pg.dsn) as conn:
        conn.execute("UPDATE wds.credentials SET hosts = '[]'::jsonb WHERE workspace_id = %s", (ws.id,))
    engine = create_engine(sqlalchemy_url(services.pg.dsn))
    try:
        with engine.begin() as conn:
            m0008_credential_hosts.upgrade(conn)
    finally:
        engine.dispose()
    hosts = {c["name"]: c["hosts"] for c in ws.admin.get(f"/workspaces/{ws.id}/credentials").json()}
    assert hosts == {"lit": ["127.0.0.1:8443", "api.a.example.com"], "tpl": [], "act": ["api.openai.com"],
                     "unused": []}
    # an unbound credential (empty list) goes nowhere
    t2 = table(rest, [{"name": "Host", "type": "text"}, {"name": "Tag", "type": "text"},
                      call("http://{{ Host }}/echo?tag={{ Tag }}", credential="tpl")])
    tag = secrets.token_hex(4)
    rec = write(rest, t2, {"Host": f"127.0.0.1:{echo.port}", "Tag": tag})
    assert rec["pipeline"]["errors"]["Call"].startswith("CREDENTIAL_HOST_MISMATCH")
    assert "no host" in rec["pipeline"]["errors"]["Call"]
    assert tagged(echo, tag) == [] and t["id"]
