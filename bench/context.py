"""What every scenario gets: the HTTP session, the psycopg baseline pool, the run's
settings, and helpers to create bench tables and seed them.

The bench table has the peers' shape (``Name`` text, ``Score`` number, ``Status``
single-select a–d) and the peers' rows (same generator, same seed), so our figures and
the peers' are about the same data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from bench.load import Operation, PhaseResult, http_send, run_interleaved, run_phase
from bench.report import Figure, Target
from bench.stack import ApiProcess, Deployment

STATUS_LABELS = ("a", "b", "c", "d")
SETTLE_VACUUM_S = 10.0  # longest wait for autovacuum workers between scenarios
SETTLE_PAUSE_S = 2.0  # then a pause for the API's once-a-second background writers
BENCH_COLUMNS: list[dict[str, Any]] = [
    {"name": "Name", "type": "text"},
    {"name": "Score", "type": "number"},
    {"name": "Status", "type": "single_select",
     "options": [{"label": c, "color": "blue"} for c in STATUS_LABELS]},
]


class BenchError(RuntimeError):
    """A scenario's setup or correctness check failed; its figures would be meaningless."""


class NotMeasurable(RuntimeError):
    """This deployment cannot run the scenario (e.g. ``--url`` cannot start extra API
    processes); the scenario reports "not measured" figures with this reason."""


# Latency figures. A Figure's verdict compares value / baseline (higher is better) with the
# target's floor, so a latency is carried as its inverse: value = 1000 / latency_ms. Then
# value / baseline = baseline latency / our latency, and "p50 <= k x baseline's p50" is the
# floor 1 / k on that ratio. The milliseconds themselves are in the p50 / p99 columns.
LATENCY_UNIT = "/s (1÷p50)"


def inverse_ms(ms: float | None) -> float | None:
    """``1000 / ms`` (a latency as a rate); ``None`` for a missing or non-positive latency.

    >>> inverse_ms(4.0)
    250.0
    >>> inverse_ms(0.0) is None
    True
    """
    if ms is None or ms <= 0:
        return None
    return 1000.0 / ms


def latency_target(max_ratio: float, what: str) -> Target:
    """The target "our p50 ≤ ``max_ratio`` × ``what``'s p50" as a floor on the inverse ratio."""
    return Target(1.0 / max_ratio, f"p50 ≤ {max_ratio:g}× {what}")


def latency_figure(
    scenario: str, name: str, api: PhaseResult, base: PhaseResult | None, *, max_ratio: float | None = None,
    baseline_label: str = "psycopg", note: str = "", tags: dict[str, str] | None = None,
) -> Figure:
    """Compare two phases by their p50 latency (see :data:`LATENCY_UNIT`).

    The note states the plain ratio of the p50s ("p50 1.23× psycopg").
    """
    base_p50 = base.p50_ms if base is not None else None
    notes = []
    if api.p50_ms and base_p50:
        notes.append(f"p50 {api.p50_ms / base_p50:.2f}× {baseline_label}")
    if note:
        notes.append(note)
    if api.first_error:
        notes.append(f"first error: {api.first_error}")
    if base is not None and base.first_error:
        notes.append(f"baseline error: {base.first_error}")
    return Figure(
        scenario=scenario, name=name, unit=LATENCY_UNIT, value=inverse_ms(api.p50_ms),
        baseline=inverse_ms(base_p50), baseline_label=baseline_label,
        target=latency_target(max_ratio, baseline_label) if max_ratio else None,
        p50_ms=api.p50_ms, p99_ms=api.p99_ms,
        baseline_p50_ms=base_p50, baseline_p99_ms=base.p99_ms if base is not None else None,
        errors=api.errors, client_cpu=api.client_cpu, note="; ".join(notes), tags=dict(tags or {}),
    )


def budget_figure(
    scenario: str, name: str, measured_ms: float | None, budget_ms: float, *, reference_ms: float = 0.0,
    what: str = "p50", p50_ms: float | None = None, p99_ms: float | None = None, errors: int = 0,
    note: str = "", tags: dict[str, str] | None = None,
) -> Figure:
    """An absolute target: ``measured_ms ≤ budget_ms``.

    ``measured_ms`` may be an overhead over a ``reference_ms`` measured beside it (the
    SDK over a bare fetch, the webhook over the provider); then value = 1000 /
    (reference + overhead) and baseline = 1000 / (reference + budget), so the ratio is
    ≥ 1 exactly when the overhead is within budget, even for a zero or negative overhead.

    >>> budget_figure("s", "n", 5.0, 10.0).ratio
    2.0
    >>> budget_figure("s", "n", -0.1, 0.2, reference_ms=1.0).verdict.value
    'pass'
    >>> budget_figure("s", "n", None, 10.0).verdict.value
    'not measured'
    """
    value = None if measured_ms is None else inverse_ms(reference_ms + measured_ms)
    label = f"{budget_ms:g} ms budget"
    notes = [] if measured_ms is None else [f"{what} {measured_ms:.2f} ms (budget {budget_ms:g} ms)"]
    if note:
        notes.append(note)
    return Figure(
        scenario=scenario, name=name, unit=LATENCY_UNIT, value=value, baseline=inverse_ms(reference_ms + budget_ms),
        baseline_label=label, target=Target(1.0, f"{what} ≤ {budget_ms:g} ms"), p50_ms=p50_ms, p99_ms=p99_ms,
        errors=errors, note="; ".join(notes), tags=dict(tags or {}),
    )


def not_measured(scenario: str, name: str, reason: str, *, target: Target | None = None, unit: str = "") -> Figure:
    """A figure that could not be taken in this run, with the reason (never a made-up number)."""
    return Figure(scenario=scenario, name=name, unit=unit, value=None, target=target, note=f"not run: {reason}")


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Knobs of one run (see ``python -m bench --help``)."""

    duration_s: float = 5.0
    warmup_s: float = 1.0
    rounds: int = 5  # service and baseline alternate in this many slices per phase
    max_ops: int = 200_000
    concurrency: int = 16
    rows: int = 10_000
    quick: bool = False
    peers_bench: str = "/work/shared/peers/bench.py"
    analytics_rows: int = 0  # sql.analytics: rows of its Deals table (0: not run; opt-in)


def make_rows(n: int, seed: int = 42) -> list[dict[str, Any]]:
    """The peers' rows: ``row-00000`` names, scores 0–1000, statuses a–d (same seed)."""
    rnd = random.Random(seed)
    return [
        {"Name": f"row-{i:05d}", "Score": rnd.randint(0, 1000), "Status": rnd.choice("abcd")}
        for i in range(n)
    ]


@dataclass(slots=True)
class BenchTable:
    """A table created through the API, with what the baselines need to reach it in SQL."""

    id: int
    schema: str  # ws_<workspace_id>
    physical: dict[str, str]  # column name → c_<column_id>
    options: dict[str, str]  # Status label → option id (what the cell stores)
    record_ids: list[int] = field(default_factory=list)

    @property
    def qualified(self) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(f"t_{self.id}"))

    def col(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.physical[name])

    def encode(self, row: dict[str, Any]) -> tuple[str, float, str]:
        """A bench row as the physical values the API would store."""
        return row["Name"], float(row["Score"]), self.options[row["Status"]]


class BenchContext:
    """Shared state of one pass (one API worker count) over the selected scenarios."""

    def __init__(self, deployment: Deployment, config: BenchConfig, session: aiohttp.ClientSession) -> None:
        self.deployment = deployment
        self.config = config
        self.session = session
        self.rest = f"{deployment.base_url}/functions/v1/rest-api"
        self.headers = {"Authorization": f"Bearer {deployment.token}", "Content-Type": "application/json"}
        self._pool: AsyncConnectionPool | None = None
        self._seeded: BenchTable | None = None
        self._seed_lock = asyncio.Lock()
        self.rows = make_rows(config.rows)

    # ------------------------------------------------------------------ baseline pool
    async def settle(self) -> None:
        """Let the previous scenario's leftovers finish before the next one measures: a
        ``CHECKPOINT`` writes out the pages it dirtied (no checkpoint lands mid-phase), the
        autovacuum workers its writes woke are awaited (up to ``SETTLE_VACUUM_S``), and a
        pause covers the API's once-a-second background writers (usage log, quotas). Both
        sides of every comparison run after it, so it favours neither."""
        pool = await self.pool()
        if pool is not None:
            with contextlib.suppress(psycopg.Error):  # a deployment's role may not checkpoint
                async with pool.connection() as conn:
                    await conn.execute("CHECKPOINT")
                    deadline = time.monotonic() + SETTLE_VACUUM_S
                    while time.monotonic() < deadline:
                        cur = await conn.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'")
                        row = await cur.fetchone()
                        if row is None or row[0] == 0:
                            break
                        await asyncio.sleep(0.2)
        await asyncio.sleep(SETTLE_PAUSE_S)

    async def pool(self) -> AsyncConnectionPool | None:
        """The psycopg pool of the baselines (``None`` without a DSN).

        Sized to the highest concurrency so no baseline client waits for a connection;
        autocommit, like the API's pool, so one statement is one round trip.
        """
        if self.deployment.dsn is None:
            return None
        if self._pool is None:
            size = self.config.concurrency
            self._pool = AsyncConnectionPool(
                self.deployment.dsn, min_size=size, max_size=size, open=False,
                kwargs={"autocommit": True},
            )
            await self._pool.open(wait=True, timeout=30)
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    # ------------------------------------------------------------------ helpers
    @property
    def tags(self) -> dict[str, str]:
        return {"workers": str(self.deployment.workers or "?")}

    async def call(self, method: str, url: str, body: Any = None, *, expect: tuple[int, ...] = (200, 201),
                   headers: dict[str, str] | None = None) -> Any:
        """One JSON request (setup and checks, not timed loops); returns the parsed body."""
        payload = b"" if body is None else json.dumps(body).encode()
        raw = await http_send(self.session, method, url, headers or self.headers, payload, expect=expect)
        return json.loads(raw) if raw else None

    async def new_workspace(self, name: str, *, plan: str = "enterprise", tokens: int = 1) -> tuple[int, list[str]]:
        """A fresh workspace and ``tokens`` builder tokens, through the operator API.

        Raises:
            NotMeasurable: the deployment was reached without an operator key.
        """
        key = self.deployment.admin_key
        if key is None:
            raise NotMeasurable("needs the operator key (embedded stack or --admin-key)")
        admin = f"{self.deployment.base_url}/functions/v1/admin"
        auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        ws = await self.call("POST", f"{admin}/workspaces", {"name": f"{name}-{secrets.token_hex(3)}", "plan": plan},
                             expect=(201,), headers=auth)
        made = [await self.call("POST", f"{admin}/workspaces/{ws['id']}/tokens",
                                {"type": "vibe_mcp", "name": f"bench-{i}"}, expect=(201,), headers=auth)
                for i in range(tokens)]
        return int(ws["id"]), [str(t["token"]) for t in made]

    @contextlib.asynccontextmanager
    async def extra_api(self, name: str, *, workers: int | None = None, **env: str) -> AsyncIterator[ApiProcess]:
        """Another API process on the same database and Temporal with ``env`` on top of the
        main API's environment; stopped on exit.

        Raises:
            NotMeasurable: not an embedded stack (``--url``).
        """
        stack = self.deployment.stack
        if stack is None:
            raise NotMeasurable("needs the embedded stack to start another API process (not --url)")
        count = workers or self.deployment.workers or 1
        proc = await asyncio.to_thread(stack.start_extra_api, name, count, env)
        try:
            yield proc
        finally:
            await asyncio.to_thread(proc.stop)

    async def interleave(self, ops: list[Operation], concurrency: int, *, longer: int = 1) -> list[PhaseResult]:
        """Measure several operations in alternating slices (this run's duration and rounds,
        both times ``longer`` for a figure whose effect is near the noise of a short one)."""
        cfg = self.config
        return await run_interleaved(ops, concurrency=concurrency, duration_s=cfg.duration_s * longer,
                                     max_ops=cfg.max_ops * longer, rounds=cfg.rounds * longer,
                                     warmup_s=cfg.warmup_s)

    # ------------------------------------------------------------------ tables
    async def create_table(self, purpose: str) -> BenchTable:
        """Create a fresh bench table through the API and find its physical name.

        Raises:
            BenchError: the API refused, or (with a DSN) the physical table is missing.
        """
        body = {"name": f"bench-{purpose}-{secrets.token_hex(3)}", "icon": "table", "columns": BENCH_COLUMNS}
        raw = await http_send(self.session, "POST", f"{self.rest}/tables", self.headers,
                              json.dumps(body).encode(), expect=(200, 201))
        table = json.loads(raw)
        cols = {c["name"]: c for c in table["columns"]}
        physical = {name: f"c_{c['id']}" for name, c in cols.items()}
        options = {o["label"]: o["id"] for o in cols["Status"]["options"]}
        schema = await self._schema_of(int(table["id"]))
        return BenchTable(int(table["id"]), schema, physical, options)

    async def _schema_of(self, table_id: int) -> str:
        # the API does not expose workspace ids to tokens; the catalog names the schema
        pool = await self.pool()
        if pool is None:
            return ""
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relname = %s AND n.nspname LIKE 'ws\\_%%' AND c.relkind = 'r'",
                (f"t_{table_id}",),
            )
            found = await cur.fetchall()
        if len(found) != 1:
            raise BenchError(f"physical table t_{table_id} not found exactly once (found {len(found)})")
        return str(found[0][0])

    async def insert_batch_api(self, table: BenchTable, rows: list[dict[str, Any]]) -> list[int]:
        """Insert rows with one batch call (no pipeline); returns their ids in order."""
        payload = batch_payload(rows)
        raw = await http_send(self.session, "POST", f"{self.rest}/tables/{table.id}/records/batch",
                              self.headers, payload, expect=(200, 201))
        results = json.loads(raw)["results"]
        bad = [r for r in results if "record" not in r]
        if bad:
            raise BenchError(f"batch insert rejected rows: {bad[:3]}")
        return [int(r["record"]["id"]) for r in results]

    async def seeded_table(self) -> BenchTable:
        """The shared read table: ``config.rows`` rows inserted through the API (batches of 500)."""
        async with self._seed_lock:
            if self._seeded is None:
                table = await self.create_table("read")
                for start in range(0, len(self.rows), 500):
                    table.record_ids += await self.insert_batch_api(table, self.rows[start:start + 500])
                pool = await self.pool()
                if pool is not None:
                    async with pool.connection() as conn:
                        # fresh statistics, as autovacuum would give a table in steady use
                        await conn.execute(sql.SQL("ANALYZE {}").format(table.qualified))
                self._seeded = table
            return self._seeded

    # ------------------------------------------------------------------ measuring
    async def phase(self, op: Operation, concurrency: int) -> PhaseResult:
        cfg = self.config
        return await run_phase(op, concurrency=concurrency, duration_s=cfg.duration_s,
                               max_ops=cfg.max_ops, warmup_s=cfg.warmup_s)

    async def compare(
        self, scenario: str, name: str, api_op: Operation, pg_op: Operation | None, concurrency: int, *,
        target: Target | None = None, note: str = "",
    ) -> Figure:
        """Measure the service's operation and its psycopg baseline at one concurrency,
        in alternating slices (see :func:`bench.load.run_interleaved`)."""
        ops = [api_op] if pg_op is None else [api_op, pg_op]
        results = await self.interleave(ops, concurrency)
        base = results[1] if pg_op is not None else None
        return self.figure(scenario, name, results[0], base, target=target, note=note)

    def figure(
        self, scenario: str, name: str, api: PhaseResult, base: PhaseResult | None, *,
        unit: str = "req/s", scale: float = 1.0, target: Target | None = None, note: str = "",
        baseline_label: str = "psycopg",
    ) -> Figure:
        """A figure from the service's phase and its baseline phase (rates × ``scale``)."""
        notes = [note] if note else []
        if api.first_error:
            notes.append(f"first error: {api.first_error}")
        if base is not None and base.first_error:
            notes.append(f"baseline error: {base.first_error}")
        if base is None:
            notes.append("no --dsn: baseline not measured")
        return Figure(
            scenario=scenario, name=name, unit=unit, value=api.rate * scale,
            baseline=None if base is None or base.ops == 0 else base.rate * scale,
            baseline_label=baseline_label, target=target, p50_ms=api.p50_ms, p99_ms=api.p99_ms,
            baseline_p50_ms=base.p50_ms if base else None,
            baseline_p99_ms=base.p99_ms if base else None,
            errors=api.errors, client_cpu=api.client_cpu, note="; ".join(notes),
            tags=self.tags,
        )


def batch_payload(rows: list[dict[str, Any]]) -> bytes:
    """The body of one batch call, encoded once up front (not inside the timed loop)."""
    return json.dumps({"rows": [{"fields": r} for r in rows], "run_pipeline": False}).encode()
