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
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from wds.runtime import API_APP, ApiProcess, Stack, StackError, create_workspace

__all__ = ["ApiProcess", "Deployment", "EmbeddedStack", "StackError", "check_loopback", "create_workspace_token"]


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


class EmbeddedStack:
    """PostgreSQL + Temporal in a temp dir (a :class:`wds.runtime.Stack`); API processes
    started and stopped per pass."""

    def __init__(self, *, keep: bool = False, rate_limits: bool = False) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="wds-bench-"))
        self.keep = keep
        self.rate_limits = rate_limits
        # durable settings (fsync on) as in production; the API and the baseline share them
        self.stack = Stack.in_dir(self.tmp, fast=False)
        self.pg, self.temporal = self.stack.pg, self.stack.temporal
        self.admin_key = self.stack.admin_key
        self.api: ApiProcess | None = None
        self.extras: list[ApiProcess] = []

    @property
    def api_log(self) -> Path | None:
        return None if self.api is None else self.api.log

    def start(self) -> None:
        self.stack.start()

    def _spawn(self, name: str, workers: int, extra_env: Mapping[str, str] | None = None, *,
               app: tuple[str, ...] = API_APP) -> ApiProcess:
        env = {"WDS_RATE_LIMITS": "true" if self.rate_limits else "false", **(extra_env or {})}
        return self.stack.start_api(f"api-{name}", workers=workers, app=app, own_session=True, **env)

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
        self.stack.stop()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def create_workspace_token(base_url: str, admin_key: str, *, name: str, plan: str = "enterprise") -> str:
    """Create a workspace through the operator admin API and return a builder token.

    Raises:
        StackError: the admin API refused (wrong key, unknown plan, ...).
    """
    return create_workspace(base_url, admin_key, name=f"{name}-{secrets.token_hex(3)}", plan=plan,
                            token_name="bench")[1]


def check_loopback(url: str) -> None:
    """The harness only ever loads loopback addresses (it must not hammer a network).

    Raises:
        StackError: ``url`` is not on 127.0.0.1 / localhost / ::1.
    """
    host = httpx.URL(url).host
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise StackError(f"the bench only targets loopback addresses, not {host!r}")
