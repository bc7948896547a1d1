"""The system under test: either an embedded stack the harness starts itself (PostgreSQL,
the Temporal dev server and the API under uvicorn, in a temp dir), or an existing
deployment named by ``--url`` / ``--token`` / ``--dsn``.

The embedded API runs exactly as in production (``uvicorn api.app:create_app --factory``
with N worker processes), on a workspace of the ``enterprise`` plan with rate limiting
off, so the harness measures the request path and not the limiter's 429s.

Scenarios that need an API configured differently (rate limits on, an AI provider) start
an extra API process on the same PostgreSQL and Temporal with
:meth:`EmbeddedStack.start_extra_api`; an existing deployment (``--url``) cannot, and
those scenarios report "not measured".
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from wds.runtime import Postgres, TemporalDev, free_port

ROOT = Path(__file__).resolve().parents[1]


class StackError(RuntimeError):
    """The system under test could not be started or reached."""


@dataclass(frozen=True, slots=True)
class Deployment:
    """Where the harness sends load: the API base URL, a token, and (for the baselines)
    a DSN of the same PostgreSQL the API uses."""

    base_url: str
    token: str
    dsn: str | None
    workers: int | None  # None: an existing deployment of unknown shape
    embedded: bool
    admin_key: str | None = None  # operator key: lets scenarios make their own workspaces and tokens
    temporal_address: str | None = None  # the same Temporal the API uses (the pipeline floor)
    stack: EmbeddedStack | None = field(default=None, repr=False, compare=False)  # for extra API processes


class ApiProcess:
    """One ``uvicorn`` API process (with its workers) started by the harness."""

    def __init__(self, proc: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
        self.proc = proc
        self.base_url = base_url
        self.log = log

    def log_tail(self, chars: int = 4000) -> str:
        if not self.log.exists():
            return ""
        return self.log.read_text(errors="replace")[-chars:]

    def wait_healthy(self, timeout_s: float = 120) -> None:
        """Poll ``/healthz`` until it answers 200.

        Raises:
            StackError: the process exited or stayed unhealthy for ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise StackError(f"the API exited early:\n{self.log_tail()}")
            try:
                r = httpx.get(f"{self.base_url}/healthz", timeout=2)
                if r.status_code == 200:
                    return
                last = f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise StackError(f"the API was not healthy within {timeout_s:.0f}s ({last}):\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        # uvicorn's supervisor forwards SIGTERM to its workers and waits for them
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


class EmbeddedStack:
    """PostgreSQL + Temporal in a temp dir; API processes started and stopped per pass."""

    def __init__(self, *, keep: bool = False, rate_limits: bool = False) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="wds-bench-"))
        self.keep = keep
        self.rate_limits = rate_limits
        self.admin_key = secrets.token_urlsafe(24)
        self.secret_key = secrets.token_urlsafe(32)
        # durable settings (fsync on) as in production; the API and the baseline share them
        self.pg = Postgres(self.tmp / "pg", port=free_port())
        self.temporal = TemporalDev(self.tmp / "temporal", port=free_port(), headless=True)
        self.api: ApiProcess | None = None
        self.extras: list[ApiProcess] = []

    @property
    def api_log(self) -> Path | None:
        return None if self.api is None else self.api.log

    def start(self) -> None:
        self.pg.start()
        self.temporal.start()

    def env(self, base_url: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "WDS_DATABASE_URL": self.pg.dsn,
            "WDS_TEMPORAL_ADDRESS": self.temporal.address,
            "WDS_ADMIN_KEY": self.admin_key,
            "WDS_SECRET_KEY": self.secret_key,
            "WDS_DEV_MODE": "true",
            "WDS_DATA_DIR": str(self.tmp / "data"),
            "WDS_LOG_LEVEL": "warning",
            "WDS_PUBLIC_BASE_URL": base_url,
            "WDS_RATE_LIMITS": "true" if self.rate_limits else "false",
        })
        return env

    def _spawn(self, name: str, workers: int, extra_env: Mapping[str, str] | None = None, *,
               app: tuple[str, ...] = ("api.app:create_app", "--factory")) -> ApiProcess:
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        log = self.tmp / f"api-{name}-{port}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", *app,
             "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
             "--log-level", "warning", "--no-access-log"],
            cwd=ROOT, env={**self.env(base_url), **(extra_env or {})}, stdout=log.open("wb"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        api = ApiProcess(proc, base_url, log)
        try:
            api.wait_healthy()
        except StackError:
            api.stop()
            raise
        return api

    def start_api(self, workers: int) -> Deployment:
        """Start ``uvicorn`` with ``workers`` processes, wait for /healthz, make a workspace."""
        self.stop_api()
        self.api = self._spawn(f"w{workers}", workers)
        token = create_workspace_token(self.api.base_url, self.admin_key, name=f"bench-w{workers}")
        return Deployment(self.api.base_url, token, self.pg.dsn, workers, embedded=True,
                          admin_key=self.admin_key, temporal_address=self.temporal.address, stack=self)

    def start_extra_api(self, name: str, workers: int = 1, extra_env: Mapping[str, str] | None = None) -> ApiProcess:
        """Another API process on the same PostgreSQL and Temporal, with ``extra_env`` on top
        of the main API's environment (e.g. ``WDS_RATE_LIMITS=true``). The caller stops it;
        :meth:`stop` stops any left over.

        Raises:
            StackError: it did not become healthy.
        """
        api = self._spawn(name, workers, extra_env)
        self.extras.append(api)
        return api

    def start_bare(self, workers: int) -> ApiProcess:
        """``bench.hello:app`` (a fixed answer, no routing, middleware or database) on the
        same uvicorn with ``workers`` processes: the ceiling of an HTTP read here. The
        caller stops it; :meth:`stop` stops any left over."""
        bare = self._spawn("bare", workers, app=("bench.hello:app",))
        self.extras.append(bare)
        return bare

    def log_tail(self, chars: int = 4000) -> str:
        return "" if self.api is None else self.api.log_tail(chars)

    def stop_api(self) -> None:
        if self.api is None:
            return
        self.api.stop()
        self.api = None

    def stop(self) -> None:
        for extra in self.extras:
            with contextlib.suppress(Exception):
                extra.stop()
        self.extras.clear()
        self.stop_api()
        with contextlib.suppress(Exception):
            self.temporal.stop()
        with contextlib.suppress(Exception):
            self.pg.stop()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def create_workspace_token(base_url: str, admin_key: str, *, name: str, plan: str = "enterprise") -> str:
    """Create a workspace through the operator admin API and return a builder token.

    Raises:
        StackError: the admin API refused (wrong key, unknown plan, ...).
    """
    with httpx.Client(
        base_url=f"{base_url}/functions/v1/admin",
        headers={"Authorization": f"Bearer {admin_key}"}, timeout=60,
    ) as admin:
        r = admin.post("/workspaces", json={"name": f"{name}-{secrets.token_hex(3)}", "plan": plan})
        if r.status_code != 201:
            raise StackError(f"creating the bench workspace failed: {r.status_code} {r.text[:300]}")
        ws_id = r.json()["id"]
        t = admin.post(f"/workspaces/{ws_id}/tokens", json={"type": "vibe_mcp", "name": "bench"})
        if t.status_code != 201:
            raise StackError(f"creating the bench token failed: {t.status_code} {t.text[:300]}")
        return str(t.json()["token"])


def check_loopback(url: str) -> None:
    """The harness only ever loads loopback addresses (it must not hammer a network).

    Raises:
        StackError: ``url`` is not on 127.0.0.1 / localhost / ::1.
    """
    host = httpx.URL(url).host
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise StackError(f"the bench only targets loopback addresses, not {host!r}")
