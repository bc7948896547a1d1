"""The compose stack's database role, for real: deploy/postgres/init-app-role.sh (what the
postgres container runs on first start) against the test PostgreSQL, then an API process
connected as that non-superuser role migrates, creates workspaces and tables, computes
formulas, answers the SQL endpoint (``SET LOCAL ROLE`` to the workspace's read-only role)
and drops a workspace's role."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
from pathlib import Path

import httpx
import psycopg

from storage import ddl
from tests.conftest import ROOT, Services, start_api
from wds.runtime import pg_bin

INIT_SCRIPT = ROOT / "deploy" / "postgres" / "init-app-role.sh"


def _run_init(services: Services, db: str, user: str, password: str) -> None:
    env = {
        "PATH": f"{pg_bin()}{os.pathsep}{os.environ.get('PATH', '')}",
        "PGHOST": services.pg.host, "PGPORT": str(services.pg.port),
        "POSTGRES_USER": "postgres", "POSTGRES_DB": db,
        "APP_DB_USER": user, "APP_DB_PASSWORD": password,
    }
    r = subprocess.run(["sh", str(INIT_SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr


def test_the_service_runs_as_the_non_superuser_role_of_the_init_script(services: Services) -> None:
    suffix = secrets.token_hex(3)
    db, user, password = f"wds_role_{suffix}", f"wds_app_{suffix}", secrets.token_urlsafe(12)
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')  # what the image does for POSTGRES_DB
    _run_init(services, db, user, password)
    _run_init(services, db, user, password)  # idempotent: safe to run by hand on an existing stack
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        role = conn.execute("SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolcanlogin"
                            " FROM pg_roles WHERE rolname = %s", (user,)).fetchone()
        owner = conn.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", (db,)).fetchone()
    assert role == (False, True, False, False, False, True)
    assert owner == (user,)

    host, port = services.pg.host, services.pg.port
    dsn = f"postgresql://{user}:{password}@{host}:{port}/{db}"
    api = start_api(services, name="api-app-role", WDS_DATABASE_URL=dsn, WDS_TASK_QUEUE=f"role-{suffix}")
    try:
        # read-only roles are cluster-wide and named by workspace id: start the ids of this
        # database where the session's own database cannot have used them
        with psycopg.connect(f"host={host} port={port} dbname={db} user=postgres", autocommit=True) as conn:
            conn.execute("SELECT setval(pg_get_serial_sequence('wds.workspaces', 'id'), %s)",
                         (10_000_000 + secrets.randbelow(1_000_000),))
        admin = httpx.Client(base_url=f"{api.base_url}/functions/v1/admin",
                             headers={"Authorization": f"Bearer {services.admin_key}"}, timeout=60)
        ws = admin.post("/workspaces", json={"name": "role", "plan": "pro"})
        assert ws.status_code == 201, ws.text
        ws_id = ws.json()["id"]
        token = admin.post(f"/workspaces/{ws_id}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        c = httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api",
                         headers={"Authorization": f"Bearer {token}"}, timeout=60)
        t = c.post("/tables", json={"name": "R", "columns": [
            {"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 2"}]})
        assert t.status_code == 201, t.text
        r = c.post(f"/tables/{t.json()['id']}/records", json={"fields": {"A": 21}})
        assert r.status_code == 201 and r.json()["fields"]["B"] == 42, r.text
        q = c.post("/sql", json={"query": "SELECT A, B FROM R"})
        assert q.status_code == 200 and q.json()["rows"] == [{"A": 21, "B": 42}], q.text
        # the SQL endpoint's role really is the read-only one
        w = c.post("/sql", json={"query": "DELETE FROM R"})
        assert w.status_code == 400, w.text
    finally:
        api.stop()
    # everything the service made is owned by its role, and it can drop a workspace's role
    with psycopg.connect(f"host={host} port={port} dbname={db} user=postgres") as conn:
        owners = {r[0] for r in conn.execute(
            "SELECT DISTINCT pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', 'public')")}
    assert owners == {user}

    async def drop() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await ddl.drop_workspace_schema(conn, ws_id)
            assert await (await conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                                             (ddl.ro_role(ws_id),))).fetchone() is None

    asyncio.run(drop())


def test_the_init_script_adopts_a_database_an_older_stack_ran_as_superuser(services: Services) -> None:
    suffix = secrets.token_hex(3)
    db, user, password = f"wds_old_{suffix}", f"wds_app_{suffix}", secrets.token_urlsafe(12)
    host, port = services.pg.host, services.pg.port
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    # the old stack: everything made by the superuser
    old = start_api(services, name="api-superuser", WDS_DATABASE_URL=f"postgresql://postgres@{host}:{port}/{db}",
                    WDS_TASK_QUEUE=f"old-{suffix}")
    try:
        with psycopg.connect(f"host={host} port={port} dbname={db} user=postgres", autocommit=True) as conn:
            conn.execute("SELECT setval(pg_get_serial_sequence('wds.workspaces', 'id'), %s)",
                         (20_000_000 + secrets.randbelow(1_000_000),))
        admin = httpx.Client(base_url=f"{old.base_url}/functions/v1/admin",
                             headers={"Authorization": f"Bearer {services.admin_key}"}, timeout=60)
        ws_id = admin.post("/workspaces", json={"name": "old", "plan": "pro"}).json()["id"]
        token = admin.post(f"/workspaces/{ws_id}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
        with httpx.Client(base_url=f"{old.base_url}/functions/v1/rest-api",
                          headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            t = c.post("/tables", json={"name": "Old", "columns": [{"name": "A", "type": "number"}]}).json()
            assert c.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).status_code == 201
    finally:
        old.stop()

    _run_init(services, db, user, password)
    dsn = f"postgresql://{user}:{password}@{host}:{port}/{db}"
    api = start_api(services, name="api-adopted", WDS_DATABASE_URL=dsn, WDS_TASK_QUEUE=f"adopted-{suffix}")
    try:
        with httpx.Client(base_url=f"{api.base_url}/functions/v1/rest-api",
                          headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            # the old table can change shape (owner), take writes, and be read through SQL
            r = c.post(f"/tables/{t['id']}/columns", json={"name": "B", "type": "formula", "formula": "{A} + 1"})
            assert r.status_code == 201, r.text
            assert c.post(f"/tables/{t['id']}/records", json={"fields": {"A": 5}}).json()["fields"]["B"] == 6
            q = c.post("/sql", json={"query": "SELECT A FROM Old ORDER BY A"})
            assert q.status_code == 200 and q.json()["rows"] == [{"A": 1}, {"A": 5}], q.text
    finally:
        api.stop()

    async def drop() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await ddl.drop_workspace_schema(conn, ws_id)

    asyncio.run(drop())


def test_the_init_script_is_the_one_compose_mounts() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "./deploy/postgres/init-app-role.sh:/docker-entrypoint-initdb.d/" in text
    assert Path(INIT_SCRIPT).exists()
