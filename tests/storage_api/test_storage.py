"""Storage buckets and objects through the real API (local filesystem backend)."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def _storage(ws, token=None):
    headers = {"Authorization": f"Bearer {token or ws.builder_token}"}
    client = httpx.Client(base_url=f"{ws.base_url}/storage/v1", headers=headers, timeout=60)
    ws.clients.append(client)
    return client


def _anon(ws):
    client = httpx.Client(timeout=60)
    ws.clients.append(client)
    return client


def _bucket(st, name="files", public=False):
    r = st.post("/bucket", json={"name": name, "public": public})
    assert r.status_code == 201, r.text
    return r.json()


def test_buckets_are_created_listed_unique_and_validated(ws):
    st = _storage(ws)
    b = _bucket(st, "docs")
    assert b == {"id": b["id"], "name": "docs", "public": False}
    assert st.post("/bucket", json={"name": "docs"}).json()["code"] == "CONFLICT"
    for bad in ("", "../x", "a/b", "123", "list", "x" * 70):
        r = st.post("/bucket", json={"name": bad})
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", bad
    assert [x["name"] for x in st.get("/bucket").json()] == ["docs"]
    assert st.get(f"/bucket/{b['id']}").json() == b and st.get("/bucket/docs").json() == b
    assert _storage(ws, "wds_rest_nope").get("/bucket").json()["code"] == "UNAUTHORIZED"


def test_a_path_cannot_be_both_an_object_and_a_folder(ws):
    """A file system store cannot hold a file and a folder of one name: the second upload
    answered 503 "object store not reachable" (a permanent clash told as an outage) and
    left a staging file behind. It is 409 CONFLICT, before any byte is stored."""
    st = _storage(ws)
    _bucket(st)
    assert st.post("/object/files/rep", content=b"a").status_code == 201
    assert st.post("/object/files/dd/e/f", content=b"b").status_code == 201
    for path in ("rep/child", "rep/x/y", "dd", "dd/e"):
        for method in ("post", "put"):
            r = getattr(st, method)(f"/object/files/{path}", content=b"c")
            assert r.status_code == 409 and r.json()["code"] == "CONFLICT", (method, path, r.text)
    # siblings and longer names that only start alike are fine
    for path in ("report", "rep2/child", "dd/ef", "dd/e2"):
        assert st.post(f"/object/files/{path}", content=b"d").status_code == 201, path
    listed = sorted(o["path"] for o in st.get("/object/list/files").json()["objects"])
    assert listed == ["dd/e/f", "dd/e2", "dd/ef", "rep", "rep2/child", "report"]
    # once the object is gone, its name may be a folder
    assert st.delete("/object/files/rep").status_code == 200
    assert st.post("/object/files/rep/child", content=b"e").status_code == 201


def test_upload_download_list_and_delete_in_an_authenticated_bucket(ws):
    st = _storage(ws)
    b = _bucket(st)
    r = st.post("/object/files/img/a.png", content=PNG)
    assert r.status_code == 201, r.text
    assert r.json() | {"created_at": None} == {
        "bucket_id": b["id"], "bucket": "files", "path": "img/a.png", "size": len(PNG),
        "content_type": "image/png", "created_at": None,
    }
    st.post("/object/files/img/b.txt", content=b"hello", headers={"Content-Type": "text/plain"})
    st.post("/object/files/other/c.bin", content=b"\x00\x01")
    got = st.get(f"/object/{b['id']}/img/a.png")
    assert got.status_code == 200 and got.content == PNG and got.headers["content-type"] == "image/png"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert st.get("/object/files/img/b.txt").headers["content-type"].startswith("text/plain")
    assert st.get("/object/files/other/c.bin").headers["content-type"] == "application/octet-stream"
    listed = st.get("/object/list/files", params={"prefix": "img/"}).json()["objects"]
    assert [o["path"] for o in listed] == ["img/a.png", "img/b.txt"]
    assert len(st.get("/object/list/files").json()["objects"]) == 3
    # without a token, or through the public door: nothing
    assert _anon(ws).get(f"{ws.base_url}/storage/v1/object/files/img/a.png").status_code == 401
    assert _anon(ws).get(f"{ws.base_url}/storage/v1/object/public/{b['id']}/img/a.png").status_code == 404
    assert st.delete("/object/files/img/a.png").json() == {"path": "img/a.png", "deleted": True}
    assert st.get("/object/files/img/a.png").json()["code"] == "NOT_FOUND"
    assert st.delete("/object/files/img/a.png").status_code == 404


def test_overwrite_needs_upsert_and_bucket_delete_needs_force(ws):
    st = _storage(ws)
    _bucket(st)
    st.post("/object/files/x.txt", content=b"one")
    assert st.post("/object/files/x.txt", content=b"two").json()["code"] == "CONFLICT"
    r = st.post("/object/files/x.txt", content=b"three", headers={"x-upsert": "true"})
    assert r.status_code == 200 and r.json()["size"] == 5
    assert st.put("/object/files/x.txt", content=b"four").status_code == 200
    assert st.get("/object/files/x.txt").content == b"four"
    assert st.delete("/bucket/files").json()["code"] == "CONFLICT"
    assert st.delete("/bucket/files", params={"force": "true"}).json()["deleted"] is True
    assert st.get("/object/files/x.txt").status_code == 404


def test_public_buckets_serve_anonymous_downloads(ws):
    st = _storage(ws)
    b = _bucket(st, "brand", public=True)
    st.post("/object/brand/logo.png", content=PNG)
    r = _anon(ws).get(f"{ws.base_url}/storage/v1/object/public/{b['id']}/logo.png")
    assert r.status_code == 200 and r.content == PNG and "public" in r.headers["cache-control"]
    assert _anon(ws).get(f"{ws.base_url}/storage/v1/object/public/{b['id']}/missing.png").status_code == 404


def test_signed_urls_work_without_a_token_until_they_expire(ws):
    st = _storage(ws)
    _bucket(st)
    st.post("/object/files/report.pdf", content=b"%PDF-1.7 data")
    r = st.post("/object/sign/files/report.pdf", json={"expires_in": 60})
    assert r.status_code == 200, r.text
    url = r.json()["signed_url"]
    got = _anon(ws).get(url)
    assert got.status_code == 200 and got.content == b"%PDF-1.7 data" and got.headers["content-type"] == "application/pdf"
    tampered = url.replace("report.pdf", "other.pdf")
    assert _anon(ws).get(tampered).json()["code"] == "INVALID_SIGNATURE"
    assert _anon(ws).get(url[:-3] + "AAA").status_code == 403
    unicode_digits = url.split("?")[0] + "?token=%C2%B2.AAAA"  # "²": a digit to str.isdigit, not to int()
    r = _anon(ws).get(unicode_digits)
    assert r.status_code == 403 and r.json()["code"] == "INVALID_SIGNATURE", r.text
    short = st.post("/object/sign/files/report.pdf", json={"expires_in": 1}).json()["signed_url"]
    time.sleep(2.1)
    assert _anon(ws).get(short).json()["code"] == "INVALID_SIGNATURE"
    assert st.post("/object/sign/files/missing.pdf", json={"expires_in": 60}).status_code == 404
    default = st.post("/object/sign/files/report.pdf")  # no body: expires_in is 3600
    assert default.status_code == 200, default.text
    assert 3590 <= default.json()["expires_at"] - time.time() <= 3601
    assert st.post("/object/sign/files/report.pdf", json={"expires_in": 0}).status_code == 400


@pytest.mark.parametrize("path", [
    "%2e%2e/secret", "a/%2e%2e/%2e%2e/secret", "a/%2E%2E/b", "%2e/a", "a%5cb", "a%00b", "a//b", "%2fetc/passwd",
])
def test_path_traversal_is_impossible(ws, path):
    st = _storage(ws)
    _bucket(st)
    for method in ("post", "get", "delete"):
        r = getattr(st, method)(f"/object/files/{path}", **({"content": b"x"} if method == "post" else {}))
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", (method, path, r.text)
    assert st.get("/object/list/files").json()["objects"] == []


def test_workspaces_cannot_reach_each_others_buckets(make_workspace):
    a, b = make_workspace(), make_workspace()
    sa, sb = _storage(a), _storage(b)
    bucket = _bucket(sa, "secret")
    sa.post("/object/secret/k.txt", content=b"A's data")
    for ref in (bucket["id"], "secret"):
        assert sb.get(f"/object/{ref}/k.txt").status_code == 404
        assert sb.post(f"/object/{ref}/k.txt", content=b"evil").status_code == 404
        assert sb.delete(f"/object/{ref}/k.txt").status_code == 404
        assert sb.post(f"/object/sign/{ref}/k.txt", json={"expires_in": 60}).status_code == 404
        assert sb.get(f"/object/list/{ref}").status_code == 404
        assert sb.delete(f"/bucket/{ref}").status_code == 404
    assert sb.get("/bucket").json() == []
    # B's own bucket with the same name is a different bucket with different objects
    _bucket(sb, "secret")
    assert sb.get("/object/secret/k.txt").status_code == 404
    assert sa.get("/object/secret/k.txt").content == b"A's data"


def test_uploads_beyond_the_plan_storage_are_refused(make_workspace, services):
    w = make_workspace(plan="free")
    st = _storage(w)
    b = _bucket(st)
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:  # fill the 1 GB quota
        conn.execute(
            "INSERT INTO wds.objects (workspace_id, bucket_id, path, size) VALUES (%s, %s, 'huge', %s)",
            (w.id, b["id"], 1024**3 - 10),
        )
    assert st.post("/object/files/small.txt", content=b"12345").status_code == 201
    r = st.post("/object/files/big.txt", content=b"x" * 100)
    assert r.status_code == 402 and r.json()["code"] == "PLAN_LIMIT_STORAGE" and r.json()["upgrade"] is True
    assert st.get("/object/files/big.txt").status_code == 404


def test_read_only_workspaces_and_read_tokens(ws, admin):
    st = _storage(ws)
    _bucket(st)
    st.post("/object/files/a.txt", content=b"a")
    assert _storage(ws, ws.token("rest_api")["token"]).get("/object/files/a.txt").json()["code"] == "FORBIDDEN"
    r = admin.post(f"/workspaces/{ws.id}/profiles", json={"name": "readers", "bucket_grants": [{"bucket": "files"}]})
    assert r.status_code == 201 and r.json()["bucket_grants"][0] | {"bucket_id": 0} == {
        "bucket_id": 0, "bucket": "files", "read": True, "write": False, "all_paths": False}
    reader = _storage(ws, ws.token("rest_api", profile_id=r.json()["id"])["token"])
    assert reader.get("/object/files/a.txt").content == b"a"
    assert reader.post("/object/files/c.txt", content=b"c").json()["code"] == "FORBIDDEN"  # read grant only
    assert admin.patch(f"/workspaces/{ws.id}", json={"read_only": True}).status_code == 200
    assert st.post("/object/files/b.txt", content=b"b").json()["code"] == "PLAN_READ_ONLY"
    assert st.get("/object/files/a.txt").status_code == 200
    assert _storage(ws, ws.token("user_mcp")["token"]).get("/bucket").json()["code"] == "WRONG_PROTOCOL"


def test_file_columns_store_references_and_return_urls(make_workspace):
    w, other = make_workspace(), make_workspace()
    st = _storage(w)
    pub, priv = _bucket(st, "pub", public=True), _bucket(st, "priv")
    st.post("/object/pub/a.png", content=PNG)
    st.post("/object/priv/b.pdf", content=b"%PDF-1 b")
    _bucket(_storage(other), "theirs")
    _storage(other).post("/object/theirs/x.txt", content=b"x")
    t = w.create_table("Docs", [{"name": "Files", "type": "file"}])
    r = w.api.post(f"/tables/{t['id']}/records", json={"fields": {"Files": [
        {"bucket": "pub", "path": "a.png"}, {"bucket": priv["id"], "path": "b.pdf"}, "https://example.com/x.jpg",
    ]}})
    assert r.status_code == 201, r.text
    public_url, signed_url, external = r.json()["fields"]["Files"]
    assert public_url == f"{w.base_url}/storage/v1/object/public/{pub['id']}/a.png"
    assert urlsplit(signed_url).path == f"/storage/v1/object/sign/{priv['id']}/b.pdf" and "token=" in signed_url
    assert external == "https://example.com/x.jpg"
    assert _anon(w).get(public_url).content == PNG
    assert _anon(w).get(signed_url).content == b"%PDF-1 b"
    # writing back what was read keeps the references
    rid = r.json()["id"]
    again = w.api.patch(f"/tables/{t['id']}/records/{rid}", json={"fields": {"Files": [public_url, signed_url]}})
    assert again.status_code == 200 and again.json()["fields"]["Files"][0] == public_url
    assert "token=" in again.json()["fields"]["Files"][1]
    for bad in ({"bucket": "pub", "path": "missing.png"}, {"bucket": "theirs", "path": "x.txt"},
                {"bucket": "nope", "path": "a.png"}):
        r = w.api.post(f"/tables/{t['id']}/records", json={"fields": {"Files": [bad]}})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_VALUE", bad
    res = w.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [
        {"Files": [{"bucket": "pub", "path": "a.png"}]}, {"Files": [{"bucket": "pub", "path": "zzz"}]},
    ]}).json()["results"]
    assert res[0]["record"]["fields"]["Files"] == [public_url] and res[1]["code"] == "INVALID_VALUE"


@pytest.fixture(scope="module")
def small_api(services):
    """An API process whose objects may be at most 1,000 bytes."""
    from tests.conftest import start_api

    proc = start_api(services, name="api-small", WDS_STORAGE_MAX_OBJECT_BYTES="1000")
    try:
        yield proc
    finally:
        proc.stop()


def test_objects_above_the_size_limit_are_refused_even_when_streamed(ws, small_api):
    h = {"Authorization": f"Bearer {ws.builder_token}"}
    with httpx.Client(base_url=f"{small_api.base_url}/storage/v1", headers=h, timeout=60) as st:
        _bucket(st)
        assert st.post("/object/files/ok.bin", content=b"x" * 1000).status_code == 201
        r = st.post("/object/files/big.bin", content=b"x" * 1001)
        assert r.status_code == 413 and r.json()["code"] == "PAYLOAD_TOO_LARGE"

        def chunks():  # no Content-Length: the limit is enforced while streaming
            for _ in range(10):
                yield b"y" * 300

        r = st.post("/object/files/streamed.bin", content=chunks())
        assert r.status_code == 413 and r.json()["code"] == "PAYLOAD_TOO_LARGE"
        assert [o["path"] for o in st.get("/object/list/files").json()["objects"]] == ["ok.bin"]
        assert st.get("/object/files/streamed.bin").status_code == 404


def test_json_uploads_are_file_bytes_whatever_they_hold(ws):
    """The JSON text guard (api/middleware/textguard.py) leaves object uploads alone: they are bytes
    streamed to the store, so a .json file holding a lone surrogate escape is stored as sent
    (a JSON request body with one is refused, see tests/api/test_errors.py)."""
    st = _storage(ws)
    _bucket(st)
    data = b'{"note": "\\ud800 is \ud800 here"}'
    for headers, status in (({"Content-Type": "application/json"}, 201), ({}, 200)):  # created, then replaced
        r = st.post("/object/files/odd.json", content=data, headers={**headers, "x-upsert": "true"})
        assert r.status_code == status, r.text
        assert st.get("/object/files/odd.json").content == data


def test_concurrent_uploads_to_one_path_have_exactly_one_winner(ws, services):
    """Ten parallel uploads of one new path without x-upsert all answered 201, and the
    stored bytes were whichever came last. Exactly one wins (201); the others are 409
    CONFLICT, and a loser never overwrites the winner's bytes."""
    import concurrent.futures

    _bucket(_storage(ws))
    clients = [_storage(ws) for _ in range(10)]
    bodies = [f"body {i} ".encode() * (2000 + i) for i in range(10)]  # ~16 KB: several chunks each
    barrier = __import__("threading").Barrier(10)

    def upload(i):
        barrier.wait()
        return clients[i].post("/object/files/doc.txt", content=bodies[i])

    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(upload, range(10)))
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [201] + [409] * 9, [(r.status_code, r.text[:100]) for r in answers]
    assert all(r.json()["code"] == "CONFLICT" for r in answers if r.status_code == 409)
    winner = next(i for i, r in enumerate(answers) if r.status_code == 201)
    st = clients[0]
    assert st.get("/object/files/doc.txt").content == bodies[winner]
    listed = st.get("/object/list/files").json()["objects"]
    assert [(o["path"], o["size"]) for o in listed] == [("doc.txt", len(bodies[winner]))]
    # the same race with x-upsert: every upload is stored in turn; the row and the bytes agree
    answers = list(concurrent.futures.ThreadPoolExecutor(10).map(
        lambda i: clients[i].put("/object/files/doc.txt", content=bodies[i]), range(10)))
    assert all(r.status_code == 200 for r in answers), [r.text[:100] for r in answers]
    got = st.get("/object/files/doc.txt").content
    assert got in bodies
    assert st.get("/object/list/files").json()["objects"][0]["size"] == len(got)
    # no upload left its staged bytes behind
    staging = (services.data_dir or services.tmp / "data") / "storage" / str(ws.id) / ".staging"
    assert staging.parent.is_dir() and (not staging.exists() or list(staging.iterdir()) == [])


def test_unknown_or_mistyped_bucket_and_sign_body_keys_are_refused(ws):
    """{"name": "k1", "pubic": true} made a private bucket (the typo was ignored) and
    "public": "yes" was read as true. Both are 400 VALIDATION_ERROR and make no bucket;
    the sign body refuses unknown keys too."""
    st = _storage(ws)
    for body, key in (({"name": "k1", "public": False, "bogus": 1}, "bogus"), ({"name": "k1", "pubic": True}, "pubic"),
                      ({"name": "k1", "public": "yes"}, "public"), ({"name": "k1", "public": 1}, "public")):
        r = st.post("/bucket", json=body)
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", (body, r.text)
        assert key in r.json()["error"], r.text
    assert st.get("/bucket").json() == []
    assert _bucket(st, "k1", public=True)["public"] is True
    st.post("/object/k1/a.txt", content=b"a")
    r = st.post("/object/sign/k1/a.txt", json={"expires_in": 60, "bogus": 1})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR" and "bogus" in r.json()["error"], r.text
    assert st.post("/object/sign/k1/a.txt", json={"expires_in": 60}).status_code == 200


def test_uploads_still_streaming_count_against_the_room_of_the_plan(make_workspace, services):
    """Each upload's room was read when it started, and the plan's storage was checked
    again only once its bytes were staged: on a 1 GB plan, eight parallel 900 MB uploads
    staged 6.7 GB of the shared disk before seven were refused. Now the bytes this process
    is staging for the workspace count against every other upload's room as they stream."""
    import threading

    w = make_workspace(plan="free")
    st = _storage(w)
    b = _bucket(st)
    mb = 1024 * 1024
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:  # 4 MiB of room left
        conn.execute(
            "INSERT INTO wds.objects (workspace_id, bucket_id, path, size) VALUES (%s, %s, 'huge', %s)",
            (w.id, b["id"], 1024**3 - 4 * mb),
        )
    halfway, finish = threading.Event(), threading.Event()

    def slow():
        yield b"a" * mb
        yield b"a" * mb
        halfway.set()
        assert finish.wait(30)
        yield b"a" * mb

    first: dict[str, httpx.Response] = {}
    uploader = threading.Thread(target=lambda: first.setdefault("r", st.post("/object/files/one.bin", content=slow())))
    uploader.start()
    assert halfway.wait(30)
    time.sleep(0.5)  # its 2 MiB have reached the API
    second = _storage(w).post("/object/files/two.bin", content=b"b" * (3 * mb))  # fits the room alone
    finish.set()
    uploader.join(60)
    assert second.status_code == 402 and second.json()["code"] == "PLAN_LIMIT_STORAGE", second.text
    assert first["r"].status_code == 201, first["r"].text
    assert st.get("/object/files/two.bin").status_code == 404
    # the first upload's bytes no longer count as staging: what is left of the room is usable
    assert st.post("/object/files/three.bin", content=b"c" * mb).status_code == 201
    staging = (services.data_dir or services.tmp / "data") / "storage" / str(w.id) / ".staging"
    assert not staging.exists() or list(staging.iterdir()) == []
