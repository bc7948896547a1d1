"""Process configuration, read only from the environment (``WDS_*``) by pydantic-settings."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from limits import parse as parse_rate
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the API and worker processes.

    ``wds dev`` fills in the embedded database and Temporal addresses; in production all of
    these come from the environment (see docs/operations.md).
    """

    model_config = SettingsConfigDict(env_prefix="WDS_", extra="ignore")

    database_url: str = "postgresql://postgres@127.0.0.1:5432/wds"
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    task_queue: str = "wds-pipelines"
    redis_url: str | None = None

    admin_key: str | None = Field(default=None, description="operator key for /functions/v1/admin")
    secret_key: str | None = Field(default=None, description="key encrypting stored credentials")
    public_base_url: str = "http://127.0.0.1:8000"
    data_dir: Path = Path(".wds")

    # dev mode relaxes the SSRF guard (pipelines may call loopback) and prints secrets once
    dev_mode: bool = False
    http_allowed_hosts: str = ""

    db_pool_min: int = 2
    db_pool_max: int = 20
    db_timeout_s: float = 5.0
    # every statement's deadline (503 QUERY_TIMEOUT past it; /sql uses the plan's own) and
    # how many pooled connections one workspace may hold at once (503 WORKSPACE_BUSY after
    # waiting db_timeout_s); docs/security.md
    statement_timeout_ms: int = 5_000
    db_connections_per_workspace: int = 8
    # a fair share of each API process's event loop: at most this many REST/SQL/MCP requests
    # of one workspace run at once, the rest wait their turn (503 WORKSPACE_BUSY after
    # request_queue_timeout_s); 0 turns it off. docs/security.md
    requests_in_flight_per_workspace: int = Field(default=8, ge=0)
    request_queue_timeout_s: float = Field(default=30.0, gt=0)
    # a workspace's share of pipeline runs a second in each API process while that process
    # is short of CPU (its event loop waited more than fair_cpu_pressure of the time for a
    # CPU) and another workspace is active: past it, its writes wait their turn (at most
    # 5 s); 0 turns it off. docs/security.md, "Pipeline runs under CPU pressure"
    # (3 and 0.04: measured against the noisy-neighbour bench, docs/security.md)
    fair_pipeline_runs_per_s: int = Field(default=3, ge=0)
    # the share, under the same conditions, of a workspace whose last sandbox batch burned
    # past its demotion threshold (activities/sandbox.py): hostile formulas or templates
    # (at most fair_pipeline_runs_per_s; 0: treated as any other workspace)
    fair_heavy_runs_per_s: int = Field(default=1, ge=0)
    fair_cpu_pressure: float = Field(default=0.04, ge=0, le=1)
    # how long another thread of the API process (Temporal's workflow threads, thread-pool
    # work) may hold the GIL before the event loop gets it back: CPython's 5 ms default is
    # a 5 ms stall for every request queued behind it (docs/security.md)
    gil_switch_interval_ms: float = Field(default=1.0, gt=0, le=100)
    # run a Temporal worker inside each API process (lowest pipeline latency; eager start)
    inprocess_worker: bool = True
    # typed search attributes on pipeline workflows (WdsWorkspace, WdsTable, WdsMode,
    # WdsRecords); `wds dev` registers them, production registers them once (operations.md)
    temporal_search_attributes: bool = True
    # deadline of each Temporal call the API makes for run-actions and schedules (start a
    # run, create/update/pause/trigger/delete/describe a schedule): past it 503 UNAVAILABLE
    temporal_rpc_timeout_s: float = Field(default=5.0, gt=0)
    # observability: /metrics bearer token (unset: 401 outside dev mode unless metrics_public),
    # the worker's own metrics endpoint, OpenTelemetry tracing (the standard OTEL_* variables
    # configure the exporter; OTEL_EXPORTER_OTLP_ENDPOINT alone also turns it on)
    metrics_token: str | None = None
    metrics_public: bool = False
    worker_metrics_port: int | None = None
    worker_metrics_addr: str = "0.0.0.0"
    otel: bool = False
    # run workflows in Temporal's sandbox (off by default: it costs ~19 ms per pipeline run;
    # tests replay real histories under the sandbox instead, see docs/decisions.md)
    workflow_sandbox: bool = False

    ai_base_url: str | None = None
    ai_api_key: str | None = None
    ai_model: str = "gpt-4o-mini"
    embeddings: str | None = None
    embeddings_model: str = "text-embedding-3-small"

    # agent chat (issue 9): message cap, history budget, tool rounds, per-channel limits
    chat_max_message_chars: int = 8_000
    chat_history_messages: int = 40
    chat_history_chars: int = 24_000
    chat_max_tool_rounds: int = 8
    chat_session_per_minute: int = 30  # messages per channel + session
    chat_channel_per_minute: int = 300  # messages per channel, all sessions
    # messaging channels reply through these APIs (tests point them at local servers)
    telegram_api_base: str = "https://api.telegram.org"

    # storage buckets (issue 10): local files under data_dir/storage unless a URL is set
    # (s3://bucket[/prefix] with AWS_* credentials from the environment, file:///dir, memory:///)
    storage_url: str | None = None
    storage_max_object_bytes: int = 5 * 1024**3
    storage_signed_url_ttl_s: int = 3600  # URLs of files in authenticated buckets
    # chunks one bulk run's workflow (backfill, run-action, schedule) starts before it
    # continues as new: ~12 history events and ~9 KB a 200-row chunk (17 KB a 1,000-row
    # formula chunk), so 500 keep a run's history far from Temporal's 51,200 events and
    # 50 MB; without it a backfill of an http/AI/record-step column stopped near 870k rows
    bulk_chunks_per_run: int = Field(default=500, ge=1)
    # realtime (issue 10)
    realtime_retention_s: int = 86_400
    realtime_queue_max: int = 1_000
    realtime_heartbeat_s: float = 15.0
    # the most one ``since`` replay reads, as the events' JSON: past it REPLAY_TRUNCATED
    # (a replay of 10,000 events of 1.8 MB records read 18 GB into the API process)
    realtime_replay_max_bytes: int = Field(default=8 * 1024**2, ge=1024)
    # an event whose record and old record render to more JSON than this is sent cut to the
    # records' ids and timestamps, "truncated": true (200 sockets not reading held a whole
    # 1.8 MB record each: 604 MB in the API process)
    realtime_event_max_bytes: int = Field(default=256 * 1024, ge=1024)
    # events' bytes queued for one socket, and for all of one workspace's sockets in one API
    # process: past either, the socket holding the most is closed as a slow consumer (4000)
    realtime_socket_max_bytes: int = Field(default=16 * 1024**2, ge=1024)
    realtime_workspace_max_bytes: int = Field(default=64 * 1024**2, ge=1024)
    # realtime sockets one workspace may hold open in one API process (0: no cap)
    realtime_connections_per_workspace: int = Field(default=200, ge=0)
    # app users (issue 10)
    app_access_ttl_s: int = 900
    app_refresh_ttl_s: int = 30 * 86_400
    # app-user brute force and sign-up floods (issue 22): ``limits`` strings ("5/15 minutes"),
    # moving windows in the shared limiter store (Redis with WDS_REDIS_URL). Failed sign-ins
    # count per account+IP and per account (all IPs); sign-ups per client IP and per workspace
    signin_fails_per_account_ip: str = "5/15 minutes"
    signin_fails_per_account: str = "50/15 minutes"
    signups_per_ip: str = "30/10 minutes"
    signups_per_workspace: str = "300/10 minutes"
    # argon2 hashing runs on a pool of this many threads (never the event loop)
    password_hash_threads: int = Field(default=2, ge=1, le=64)
    # hashes of one workspace on that pool at once, and how long the others wait their
    # turn before 503 WORKSPACE_BUSY: one workspace's flood no longer queues every other
    # workspace's sign-ins behind it (a flood of 400 made another's sign-in wait 25 s)
    password_hashes_per_workspace: int = Field(default=1, ge=1, le=64)
    password_hash_wait_s: float = Field(default=10.0, gt=0)

    # request bodies, headers and WebSocket messages (issue 22, docs/security.md):
    # a body over the limit is refused with 413 while it streams, before auth or parsing;
    # object uploads are limited by storage_max_object_bytes instead
    max_body_bytes: int = Field(default=10 * 1024**2, ge=1024)
    max_header_bytes: int = Field(default=64 * 1024, ge=4096)  # request line + header block
    max_headers: int = Field(default=100, ge=10)
    ws_max_message_bytes: int = Field(default=64 * 1024, ge=1024)  # realtime messages are small JSON
    # seconds a request's head may take to arrive (408), a body between two chunks (408),
    # and an idle keep-alive connection stays open
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=30.0, gt=0)
    keep_alive_s: int = Field(default=5, ge=1)
    # POST /sql and the MCP sql_query tool: the most one answer's rows may take as JSON
    # (storage/sqlquery/build.py MAX_ANSWER_BYTES); a page past it is 400 RESULT_TOO_LARGE,
    # stopped inside PostgreSQL at the row that passes it (docs/sql.md)
    sql_max_answer_bytes: int = Field(default=16 * 1024**2, ge=1024)

    # REST: answer GET record / GET records list / POST sql / POST one record / batch without
    # FastAPI's router (api/doors/fastpath.py, same handler functions); off = every request via FastAPI
    fast_reads: bool = True
    # MCP: serve tools/call POSTs through the SDK's single-request kernel without its
    # per-request stateless transport (api/doors/mcp/fastpath.py); off = every request via the SDK
    mcp_fast_path: bool = True
    # pipelines: a batch create whose computed columns are all formulas/parsers has them
    # computed by its run (in-process worker) before its one INSERT, instead of inserting
    # and then updating every row (api/services/pipelines.py create_computed); off = insert, then run
    pipeline_precompute: bool = True
    # pipelines: such a create whose formulas are all plain arithmetic over number columns
    # (+ - * and / by a constant of numbers and references; storage/formula/insql.py) has PostgreSQL compute them
    # in its INSERT, value for value as the Python evaluator; off = evaluated in Python
    pipeline_sql_arithmetic: bool = True
    # rate limiting on/off (bench compares both); quotas are always on
    rate_limits: bool = True
    # quota leasing (memory or Redis store): a process takes up to 32 hits of a window in one
    # call to the store when it has headroom and serves them for at most 1 s (with Redis,
    # busy windows' next leases are prefetched, many windows a round trip);
    # off = exact mode, one call per request and window (docs/operations.md)
    rate_limit_leases: bool = True
    log_level: str = "info"
    # tests only, honoured in dev mode: pretend today is this ISO date (quota months)
    clock_override: str | None = None

    @field_validator("signin_fails_per_account_ip", "signin_fails_per_account", "signups_per_ip",
                     "signups_per_workspace")
    @classmethod
    def _rate(cls, value: str) -> str:
        parse_rate(value)  # "N/period" or "N per M minutes"; a typo fails at start, not at sign-in
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
