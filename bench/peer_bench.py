#!/usr/bin/env python3
# ruff: noqa  (a copy of the peers' script, kept close to it for an easy diff)
"""Loopback-only benchmark of an Airtable-like data API.

A copy of the peers' script (/work/shared/peers/bench.py) with one change, marked
"WDS_TOKENS": the ``wds`` adapter also takes ``WDS_TOKENS`` (comma-separated) and sends
each request, insert or list, with the next token in turn, so a run with this service's
default rate limits on spreads its load over several tokens (the per-token ceiling is
3,000 requests a minute). With ``WDS_TOKENS`` unset it behaves exactly as the original.

Steps: create table (Name text, Score number, Status single-select a/b/c/d),
insert N rows in batches (rows/s), then list with filter Score>500 AND Status='a',
page size 100, sequentially for D seconds and with C concurrent clients for D seconds
(req/s, p50/p99 latency).  All request loops are bounded by time AND count.

usage: bench.py directus|nocodb|wds [--rows 10000] [--batch 1000] [--dur 10] [--conc 16]
"""
import argparse, asyncio, json, os, random, statistics, sys, time
from urllib.parse import urlparse

import aiohttp

MAX_REQS = 200_000  # hard cap per phase


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float('nan')
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def make_rows(n, seed=42):
    rnd = random.Random(seed)
    return [{"Name": f"row-{i:05d}", "Score": rnd.randint(0, 1000), "Status": rnd.choice("abcd")} for i in range(n)]


def expected_count(rows):
    return sum(1 for r in rows if r["Score"] > 500 and r["Status"] == "a")


# ----------------------------------------------------------------------------- adapters
class Directus:
    base = os.environ.get("DIRECTUS_URL", "http://127.0.0.1:8055")
    token = os.environ.get("DIRECTUS_TOKEN", "peer-admin-static-token")
    coll = "bench"

    def headers(self):
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}

    async def setup(self, s):
        async with s.delete(f"{self.base}/collections/{self.coll}", headers=self.headers()) as r:
            await r.read()
        body = {
            "collection": self.coll,
            "schema": {},
            "meta": {"icon": "table"},
            "fields": [
                {"field": "id", "type": "integer", "meta": {"hidden": True},
                 "schema": {"is_primary_key": True, "has_auto_increment": True}},
                {"field": "Name", "type": "string", "meta": {"interface": "input"}},
                {"field": "Score", "type": "float", "meta": {"interface": "input"}},
                {"field": "Status", "type": "string",
                 "meta": {"interface": "select-dropdown",
                          "options": {"choices": [{"text": c, "value": c} for c in "abcd"]}}},
            ],
        }
        async with s.post(f"{self.base}/collections", json=body, headers=self.headers()) as r:
            t = await r.text()
            assert r.status == 200, (r.status, t[:500])

    async def insert(self, s, batch):
        async with s.post(f"{self.base}/items/{self.coll}", json=batch, headers=self.headers()) as r:
            t = await r.read()
            assert r.status == 200, (r.status, t[:500])

    def list_req(self, count=False):
        url = (f"{self.base}/items/{self.coll}?filter[Score][_gt]=500&filter[Status][_eq]=a"
               f"&limit=100&page=1&sort=id")
        if count:
            url += "&meta=filter_count"
        return url, self.headers()

    def n_from(self, js):
        return len(js["data"]), js.get("meta", {}).get("filter_count")


class NocoDB:
    base = os.environ.get("NOCODB_URL", "http://127.0.0.1:8080")
    token = os.environ.get("NOCODB_TOKEN", "")
    table_id = None
    base_id = os.environ.get("NOCODB_BASE_ID", "")

    def headers(self):
        return {"xc-token": self.token, "Content-Type": "application/json"}

    async def setup(self, s):
        # find base, drop old table, create table
        async with s.get(f"{self.base}/api/v2/meta/bases/{self.base_id}/tables", headers=self.headers()) as r:
            js = await r.json()
        for t in js.get("list", []):
            if t["title"] == "bench":
                async with s.delete(f"{self.base}/api/v2/meta/tables/{t['id']}", headers=self.headers()) as r:
                    await r.read()
        body = {"title": "bench", "table_name": "bench", "columns": [
            {"column_name": "id", "title": "Id", "uidt": "ID"},
            {"column_name": "Name", "title": "Name", "uidt": "SingleLineText"},
            {"column_name": "Score", "title": "Score", "uidt": "Number"},
            {"column_name": "Status", "title": "Status", "uidt": "SingleSelect",
             "colOptions": {"options": [{"title": c} for c in "abcd"]}},
        ]}
        async with s.post(f"{self.base}/api/v2/meta/bases/{self.base_id}/tables", json=body,
                          headers=self.headers()) as r:
            t = await r.text()
            assert r.status == 200, (r.status, t[:800])
            self.table_id = json.loads(t)["id"]

    async def insert(self, s, batch):
        async with s.post(f"{self.base}/api/v2/tables/{self.table_id}/records", json=batch,
                          headers=self.headers()) as r:
            t = await r.read()
            assert r.status == 200, (r.status, t[:500])

    def list_req(self, count=False):
        url = (f"{self.base}/api/v2/tables/{self.table_id}/records"
               f"?where=(Score,gt,500)~and(Status,eq,a)&limit=100&offset=0&sort=Id")
        return url, self.headers()

    def n_from(self, js):
        return len(js["list"]), js.get("pageInfo", {}).get("totalRows")


class WDS:
    """This project's REST API (spec/service.md): WDS_URL is the base_url, WDS_TOKEN a rest_api
    or builder token of a workspace whose plan does not rate-limit the run (pro or above)."""
    base = os.environ.get("WDS_URL", "http://127.0.0.1:8000")
    token = os.environ.get("WDS_TOKEN", "")
    table_id = None

    def __init__(self):  # WDS_TOKENS: the tokens taken in turn, one per request
        self.tokens = [t for t in os.environ.get("WDS_TOKENS", "").split(",") if t] or [self.token]
        self._turn = 0

    @property
    def rest(self):
        return f"{self.base}/functions/v1/rest-api"

    def headers(self):  # WDS_TOKENS: the next token in turn
        token = self.tokens[self._turn % len(self.tokens)]
        self._turn += 1
        return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    async def setup(self, s):
        body = {"name": f"bench-{int(time.time())}", "icon": "table", "columns": [
            {"name": "Name", "type": "text"},
            {"name": "Score", "type": "number"},
            {"name": "Status", "type": "single_select",
             "options": [{"label": c, "color": "blue"} for c in "abcd"]},
        ]}
        async with s.post(f"{self.rest}/tables", json=body, headers=self.headers()) as r:
            t = await r.text()
            assert r.status in (200, 201), (r.status, t[:800])
            self.table_id = json.loads(t)["id"]

    async def insert(self, s, batch):
        body = {"rows": [{"fields": row} for row in batch], "run_pipeline": False}
        async with s.post(f"{self.rest}/tables/{self.table_id}/records/batch", json=body,
                          headers=self.headers()) as r:
            t = await r.read()
            assert r.status in (200, 201, 207), (r.status, t[:500])

    def list_req(self, count=False):
        url = (f"{self.rest}/tables/{self.table_id}/records"
               f"?Score=gt.500&Status=eq.a&limit=100&offset=0&order=id.asc")
        extra = {"Prefer": "count=exact"} if count else {}
        if len(self.tokens) > 1:  # WDS_TOKENS: headers made per request (see run_load)
            return url, lambda: {**self.headers(), **extra}
        return url, {**self.headers(), **extra}

    def n_from(self, js):
        return len(js["records"]), None


ADAPTERS = {"directus": Directus, "nocodb": NocoDB, "wds": WDS}


# ----------------------------------------------------------------------------- phases
async def run_load(s, url, headers, dur, conc):
    lat, errs = [], 0
    deadline = time.perf_counter() + dur
    counter = {"n": 0}

    async def worker():
        nonlocal errs
        while time.perf_counter() < deadline and counter["n"] < MAX_REQS:
            counter["n"] += 1
            t0 = time.perf_counter()
            try:  # WDS_TOKENS: headers may be a callable giving each request's headers
                async with s.get(url, headers=headers() if callable(headers) else headers) as r:
                    await r.read()
                    ok = r.status == 200
            except Exception:
                ok = False
            dt = time.perf_counter() - t0
            if ok:
                lat.append(dt)
            else:
                errs += 1

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(conc)])
    el = time.perf_counter() - t0
    return {"conc": conc, "reqs": len(lat), "errors": errs, "secs": round(el, 2),
            "req_per_s": round(len(lat) / el, 1),
            "p50_ms": round(pct(lat, 50) * 1000, 2), "p99_ms": round(pct(lat, 99) * 1000, 2)}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target", choices=ADAPTERS)
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--dur", type=float, default=10.0)
    ap.add_argument("--conc", type=int, default=16)
    ap.add_argument("--count", action="store_true", help="also ask for total filtered count (Directus meta=filter_count)")
    a = ap.parse_args()
    for u in (Directus.base, NocoDB.base, WDS.base):
        assert urlparse(u).hostname in ("127.0.0.1", "localhost", "::1"), "loopback only"
    ad = ADAPTERS[a.target]()
    rows = make_rows(a.rows)
    exp = expected_count(rows)
    res = {"target": a.target, "rows": a.rows, "batch": a.batch}
    conn = aiohttp.TCPConnector(limit=max(a.conc, 1) + 4)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as s:
        t0 = time.perf_counter()
        await ad.setup(s)
        res["create_table_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        for i in range(0, a.rows, a.batch):
            await ad.insert(s, rows[i:i + a.batch])
        el = time.perf_counter() - t0
        res["insert_s"] = round(el, 3)
        res["insert_rows_per_s"] = round(a.rows / el, 1)
        url, hdr = ad.list_req(count=a.count)
        async with s.get(url, headers=hdr() if callable(hdr) else hdr) as r:  # WDS_TOKENS
            js = await r.json()
        n, total = ad.n_from(js)
        res["check"] = {"page_rows": n, "reported_total": total, "expected_total": exp}
        assert n == min(100, exp), res
        res["list_url"] = url
        res["seq"] = await run_load(s, url, hdr, a.dur, 1)
        res["c%d" % a.conc] = await run_load(s, url, hdr, a.dur, a.conc)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
