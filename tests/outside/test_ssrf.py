"""The SSRF guard under production settings (a second API process, dev mode off, only
``localhost`` allow-listed): private, loopback, link-local and metadata targets are
refused, also behind a redirect; the allow-listed host works."""

from __future__ import annotations

import secrets

import pytest


def make(client, url: str) -> dict:
    r = client.post("/tables", json={"name": f"S-{secrets.token_hex(3)}", "columns": [
        {"name": "A", "type": "text"}, {"name": "Call", "type": "http_request", "config": {"url": url}}]})
    assert r.status_code == 201, r.text
    return r.json()


def run(client, table: dict) -> dict:
    r = client.post(f"/tables/{table['id']}/records", json={"fields": {"A": "x"}})
    assert r.status_code == 201, r.text
    return r.json()


@pytest.mark.parametrize("target", [
    "http://127.0.0.1:{port}/echo",
    "http://10.0.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:{port}/echo",
    "http://0.0.0.0:{port}/echo",
    "http://metadata.google.internal/computeMetadata/v1/",
])
def test_private_and_metadata_targets_are_refused(prod, echo, target):
    before = len(echo.calls)
    rec = run(prod, make(prod, target.format(port=echo.port)))
    assert rec["fields"]["Call"] is None and rec["pipeline"]["errors"]["Call"].startswith("refused")
    assert len(echo.calls) == before


def test_a_redirect_to_a_private_address_is_refused(prod, echo):
    url = f"http://localhost:{echo.port}/redirect?to=http://127.0.0.1:{echo.port}/echo%3Fsneaky%3D1"
    rec = run(prod, make(prod, url))
    assert rec["pipeline"]["errors"]["Call"].startswith("refused")
    assert not [c for c in echo.calls_to("/echo") if c.query.get("sneaky")]


def test_a_redirect_to_the_metadata_address_is_refused(prod, echo):
    url = f"http://localhost:{echo.port}/redirect?to=http://169.254.169.254/latest/meta-data/"
    rec = run(prod, make(prod, url))
    assert rec["pipeline"]["errors"]["Call"].startswith("refused")


def test_an_allow_listed_host_is_reachable(prod, echo):
    rec = run(prod, make(prod, f"http://localhost:{echo.port}/echo?ok=1"))
    assert rec["pipeline"]["status"] == "ok" and rec["fields"]["Call"]["query"] == {"ok": "1"}
