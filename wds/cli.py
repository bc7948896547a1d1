"""The ``wds`` command line: the embedded runtime, production processes and admin calls."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

import httpx
import typer
from rich.console import Console
from rich.panel import Panel

from wds.runtime import Postgres, Stack, TemporalDev, port_open, spawn_api, spawn_worker, wait_healthy
from wds.server import uvicorn_options

app = typer.Typer(help="Workspace Data Service", no_args_is_help=True, add_completion=False)
admin_app = typer.Typer(help="Operator admin calls (WDS_ADMIN_KEY)", no_args_is_help=True)
workspace_app = typer.Typer(help="Workspaces", no_args_is_help=True)
token_app = typer.Typer(help="Tokens", no_args_is_help=True)
app.add_typer(admin_app, name="admin")
app.add_typer(workspace_app, name="workspace")
app.add_typer(token_app, name="token")
console = Console(stderr=True)


# --------------------------------------------------------------------------- local secrets


def _secrets_file(data_dir: Path) -> Path:
    return data_dir / "secrets.json"


def load_local_secrets(data_dir: Path) -> dict[str, Any]:
    """The dev runtime's generated keys (a 0600 file in the data dir, never committed)."""
    path = _secrets_file(data_dir)
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {}


def save_local_secrets(data_dir: Path, data: dict[str, Any]) -> None:
    path = _secrets_file(data_dir)
    path.write_text(json.dumps(data, indent=2))
    path.chmod(0o600)


# --------------------------------------------------------------------------- admin client


def _admin_client(base_url: str, admin_key: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{base_url.rstrip('/')}/functions/v1/admin",
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=30,
    )


def _call(resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        try:
            body = resp.json()
            msg = f"{body.get('code')}: {body.get('error')}"
        except ValueError:
            msg = resp.text
        console.print(f"[red]error {resp.status_code}[/red] {msg}")
        raise typer.Exit(1)
    return resp.json()


def _bootstrap(base_url: str, admin_key: str, name: str = "default", plan: str = "enterprise") -> dict[str, Any]:
    with _admin_client(base_url, admin_key) as c:
        existing = [w for w in _call(c.get("/workspaces")) if w["name"] == name]
        ws = existing[0] if existing else _call(c.post("/workspaces", json={"name": name, "plan": plan}))
        tok = _call(c.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "builder (wds dev)"}))
    return {"base_url": base_url, "workspace_id": ws["id"], "admin_key": admin_key, "builder_token": tok["token"]}


# --------------------------------------------------------------------------- dev


@app.command()
def dev(
    host: str = typer.Option("127.0.0.1", help="API listen address"),
    port: int = typer.Option(8000, help="API port"),
    data_dir: Path = typer.Option(Path(".wds"), help="where Postgres, Temporal and files keep their state"),
    pg_port: int = typer.Option(55433, help="embedded PostgreSQL port (loopback)"),
    temporal_port: int = typer.Option(7233, help="Temporal dev server port"),
    ui_port: int = typer.Option(8233, help="Temporal UI port"),
) -> None:
    """Run everything in the foreground on the embedded runtime: PostgreSQL, the Temporal
    dev server, a worker and the API. Ctrl-C stops it all; the next start reuses the data."""
    # Ctrl-C (SIGINT) stops it even when it was started with SIGINT ignored, as a
    # non-interactive shell starts a background job: Python installs its handler only when
    # SIGINT is not ignored, and then the signal would be lost
    signal.signal(signal.SIGINT, signal.default_int_handler)
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    local = load_local_secrets(data_dir)
    admin_key = os.environ.get("WDS_ADMIN_KEY") or local.get("admin_key") or secrets.token_urlsafe(32)
    secret_key = os.environ.get("WDS_SECRET_KEY") or local.get("secret_key") or secrets.token_urlsafe(32)
    local.update(admin_key=admin_key, secret_key=secret_key)
    save_local_secrets(data_dir, local)
    for what, p in (("API", port), ("Temporal", temporal_port), ("PostgreSQL", pg_port)):
        if port_open("127.0.0.1", p):
            console.print(f"[red]port {p} ({what}) is already in use[/red]; pick another with the options")
            raise typer.Exit(1)
    logs = data_dir / "logs"
    logs.mkdir(exist_ok=True)
    stack = Stack(Postgres(data_dir / "pg", port=pg_port),
                  TemporalDev(data_dir / "temporal", port=temporal_port, ui_port=ui_port),
                  logs, admin_key=admin_key, secret_key=secret_key, data_dir=data_dir, log_level=None)
    pg, temporal = stack.pg, stack.temporal
    base_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    env = stack.env(WDS_PUBLIC_BASE_URL=os.environ.get("WDS_PUBLIC_BASE_URL", base_url))
    procs: list[subprocess.Popen[bytes]] = []
    console.print("starting PostgreSQL …")
    pg.start()
    try:
        console.print("starting the Temporal dev server …")
        temporal.start()
        procs.append(spawn_api(env, port=port, host=host, log=logs / "api.log", access_log=True, append=True))
        procs.append(spawn_worker(env, log=logs / "worker.log", append=True))
        wait_healthy(base_url, procs)
        boot = local.get("bootstrap")
        if not boot or boot.get("base_url") != base_url:
            boot = _bootstrap(base_url, admin_key)
            local["bootstrap"] = boot
            save_local_secrets(data_dir, local)
        console.print(Panel.fit(
            f"API            {base_url}  (docs: {base_url}/docs)\n"
            f"Temporal UI    http://127.0.0.1:{ui_port}\n"
            f"MCP server     {base_url}/functions/v1/mcp-server\n"
            f"Workspace      {boot['workspace_id']} (default, enterprise plan)\n"
            f"Builder token  {boot['builder_token']}\n"
            f"Operator key   {admin_key}\n"
            f"Data           {data_dir}  (keys in secrets.json, logs in logs/)\n\n"
            "Ctrl-C stops everything.",
            title="Workspace Data Service is running",
        ))
        stop = {"now": False}

        def _stop(*_: Any) -> None:
            stop["now"] = True

        signal.signal(signal.SIGTERM, _stop)
        while not stop["now"]:
            for p in procs:
                if p.poll() is not None:
                    console.print(f"[red]a process exited ({p.args[2] if len(p.args) > 2 else p.args}); stopping[/red]")
                    stop["now"] = True
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1)
    finally:
        # a second Ctrl-C (or a SIGTERM) during the shutdown must not cut it short: that
        # would leave PostgreSQL and Temporal running in their own sessions, holding the
        # ports the next start needs
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        console.print("stopping …")
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        temporal.stop()
        pg.stop()


# --------------------------------------------------------------------------- production processes


@app.command()
def serve(
    host: str = typer.Option("0.0.0.0"),
    port: int = typer.Option(8000),
    workers: int = typer.Option(1, help="uvicorn worker processes"),
) -> None:
    """Run the API against WDS_DATABASE_URL and WDS_TEMPORAL_ADDRESS (production)."""
    import uvicorn

    # header size/count/timeout, WebSocket message size, keep-alive: wds/server.py
    uvicorn.run("api.app:create_app", factory=True, host=host, port=port, workers=workers,
                log_level=os.environ.get("WDS_LOG_LEVEL", "info"), proxy_headers=True, **uvicorn_options())


@app.command()
def worker() -> None:
    """Run a Temporal worker for the pipelines (production)."""
    import asyncio
    import logging

    from worker import run_worker

    logging.basicConfig(level=logging.INFO)
    asyncio.run(run_worker())


@app.command()
def migrate() -> None:
    """Apply pending metadata migrations to WDS_DATABASE_URL."""
    from service.config import get_settings
    from storage.migrations import migrate as run

    applied = run(get_settings().database_url)
    console.print(f"applied: {', '.join(applied) if applied else 'nothing (up to date)'}")


@app.command()
def bench(args: Optional[list[str]] = typer.Argument(None)) -> None:  # noqa: UP007 (typer)
    """Run the benchmark harness (see bench/)."""
    from bench.runner import main as bench_main

    raise typer.Exit(bench_main(args or []))


# --------------------------------------------------------------------------- admin


def _admin_target(base_url: Optional[str], data_dir: Path) -> tuple[str, str]:  # noqa: UP007
    local = load_local_secrets(data_dir.resolve())
    key = os.environ.get("WDS_ADMIN_KEY") or local.get("admin_key")
    if not key:
        console.print("[red]set WDS_ADMIN_KEY (or run in the folder where `wds dev` keeps .wds)[/red]")
        raise typer.Exit(2)
    url = base_url or os.environ.get("WDS_PUBLIC_BASE_URL") or (local.get("bootstrap") or {}).get("base_url") or "http://127.0.0.1:8000"
    return url, key


BaseUrl = typer.Option(None, "--base-url", help="defaults to WDS_PUBLIC_BASE_URL or the local dev server")
DataDir = typer.Option(Path(".wds"), "--data-dir")


@admin_app.command("bootstrap")
def admin_bootstrap(
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    base_url: Optional[str] = BaseUrl,  # noqa: UP007
    data_dir: Path = DataDir,
) -> None:
    """Print {base_url, workspace_id, admin_key, builder_token} for the default workspace."""
    url, key = _admin_target(base_url, data_dir)
    local = load_local_secrets(data_dir.resolve())
    boot = local.get("bootstrap")
    if not boot or boot.get("base_url") != url:
        boot = _bootstrap(url, key)
    if as_json:
        print(json.dumps(boot))
    else:
        for k, v in boot.items():
            print(f"{k}: {v}")


@workspace_app.command("create")
def workspace_create(name: str, plan: str = typer.Option("free"), base_url: Optional[str] = BaseUrl,  # noqa: UP007
                     data_dir: Path = DataDir) -> None:
    url, key = _admin_target(base_url, data_dir)
    with _admin_client(url, key) as c:
        print(json.dumps(_call(c.post("/workspaces", json={"name": name, "plan": plan}))))


@workspace_app.command("list")
def workspace_list(base_url: Optional[str] = BaseUrl, data_dir: Path = DataDir) -> None:  # noqa: UP007
    url, key = _admin_target(base_url, data_dir)
    with _admin_client(url, key) as c:
        print(json.dumps(_call(c.get("/workspaces")), indent=2))


@workspace_app.command("set")
def workspace_set(workspace_id: int, plan: Optional[str] = typer.Option(None),  # noqa: UP007
                  read_only: Optional[bool] = typer.Option(None),  # noqa: UP007
                  base_url: Optional[str] = BaseUrl, data_dir: Path = DataDir) -> None:  # noqa: UP007
    url, key = _admin_target(base_url, data_dir)
    body = {k: v for k, v in {"plan": plan, "read_only": read_only}.items() if v is not None}
    with _admin_client(url, key) as c:
        print(json.dumps(_call(c.patch(f"/workspaces/{workspace_id}", json=body))))


@token_app.command("create")
def token_create(workspace_id: int, type: str = typer.Option("rest_api"), name: str = typer.Option("cli"),
                 profile_id: Optional[int] = typer.Option(None),  # noqa: UP007
                 expires_in_seconds: Optional[int] = typer.Option(None),  # noqa: UP007
                 base_url: Optional[str] = BaseUrl, data_dir: Path = DataDir) -> None:  # noqa: UP007
    """Create a token; the secret is printed once."""
    url, key = _admin_target(base_url, data_dir)
    body: dict[str, Any] = {"type": type, "name": name}
    if profile_id is not None:
        body["profile_id"] = profile_id
    if expires_in_seconds is not None:
        body["expires_in_seconds"] = expires_in_seconds
    with _admin_client(url, key) as c:
        print(json.dumps(_call(c.post(f"/workspaces/{workspace_id}/tokens", json=body))))


@token_app.command("list")
def token_list(workspace_id: int, base_url: Optional[str] = BaseUrl, data_dir: Path = DataDir) -> None:  # noqa: UP007
    url, key = _admin_target(base_url, data_dir)
    with _admin_client(url, key) as c:
        print(json.dumps(_call(c.get(f"/workspaces/{workspace_id}/tokens")), indent=2))


@token_app.command("rotate")
def token_rotate(workspace_id: int, token_id: int, base_url: Optional[str] = BaseUrl,  # noqa: UP007
                 data_dir: Path = DataDir) -> None:
    url, key = _admin_target(base_url, data_dir)
    with _admin_client(url, key) as c:
        print(json.dumps(_call(c.post(f"/workspaces/{workspace_id}/tokens/{token_id}/rotate"))))


@token_app.command("revoke")
def token_revoke(workspace_id: int, token_id: int, base_url: Optional[str] = BaseUrl,  # noqa: UP007
                 data_dir: Path = DataDir) -> None:
    url, key = _admin_target(base_url, data_dir)
    with _admin_client(url, key) as c:
        print(json.dumps(_call(c.delete(f"/workspaces/{workspace_id}/tokens/{token_id}"))))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
