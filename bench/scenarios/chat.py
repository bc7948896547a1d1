"""Chat and semantic search (issue 9), against a local OpenAI-compatible provider.

The provider runs in the bench process (aiohttp): ``POST /chat/completions`` streams a
short answer as server-sent events, the first content chunk at once; ``POST
/embeddings`` answers deterministic bag-of-words vectors (each word hashed into one of
384 dimensions, unit length), so ranking is meaningful and costs almost nothing. An
extra API process is started with ``WDS_AI_BASE_URL`` pointing at it (its own task
queue), on the same database.

* ``chat.first_token``: time to the first ``token`` event of a streamed webhook turn
  (``POST /functions/v1/agent-webhook?type=web``) minus the provider's own time to its
  first content chunk, measured by this process calling the provider directly, pair by
  pair, alternating; the figure is the median of the per-pair differences (≤ 15 ms).
* ``search.semantic``: ``POST {rest}/tables/{id}/search`` over every bench row (10,000
  in a full run) minus the query's embedding, i.e. a direct ``/embeddings`` call for the
  same query made beside each search; median of the per-pair differences (≤ 30 ms).
"""

from __future__ import annotations

import contextlib
import random
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bench.context import BenchContext, BenchError, NotMeasurable, budget_figure, not_measured
from bench.fakes import LocalServer, embeddings_response, stream_chat
from bench.load import OperationFailed
from bench.report import Figure, percentile
from bench.scenarios.registry import scenario

ANSWER = "Hello there, this is a short answer from the bench provider."
CHAT_BUDGET_MS = 15.0
SEARCH_BUDGET_MS = 30.0
PAIRS_FULL, PAIRS_QUICK = 150, 30
WARM_PAIRS = 5
VOCAB = [f"{a}{b}" for a in ("red", "blue", "green", "gold", "grey", "pink", "teal", "navy")
         for b in ("fox", "owl", "elk", "cod", "yak", "emu", "bee", "ant", "cat", "dog",
                   "hen", "bat", "ram", "eel", "jay", "koi")]  # 128 words
EMBED_MODEL = "bench-embed"


def pair_differences(first: list[float], second: list[float]) -> list[float]:
    """``first[i] - second[i]`` for each measured pair.

    >>> pair_differences([3.0, 5.0], [1.0, 1.5])
    [2.0, 3.5]
    """
    if len(first) != len(second):
        raise ValueError("unpaired measurements")
    return [a - b for a, b in zip(first, second)]


class Provider(LocalServer):
    """The local OpenAI-compatible provider (chat streaming and embeddings), served in the
    bench's loop (``async with Provider()``)."""

    def __init__(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_post("/embeddings", self._embeddings)
        super().__init__(app)
        self.chats = 0

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.chats += 1
        words = ANSWER.split(" ")
        deltas: list[dict[str, Any]] = [{"content": w + (" " if i < len(words) - 1 else "")} for i, w in enumerate(words)]
        deltas[0]["role"] = "assistant"
        return await stream_chat(request, deltas, usage={"prompt_tokens": 10, "completion_tokens": len(words),
                                                         "total_tokens": 10 + len(words)})

    async def _embeddings(self, request: web.Request) -> web.Response:
        return embeddings_response(orjson.loads(await request.read()))


@contextlib.asynccontextmanager
async def ai_stack(ctx: BenchContext) -> AsyncIterator[tuple[Provider, str]]:
    """The provider and an API process using it: yields ``(provider, api base URL)``."""
    async with Provider() as provider, ctx.extra_api(
        "ai", WDS_AI_BASE_URL=provider.url, WDS_AI_API_KEY="sk-bench", WDS_AI_MODEL="bench-model",
        WDS_EMBEDDINGS="openai", WDS_EMBEDDINGS_MODEL=EMBED_MODEL,
        WDS_TASK_QUEUE=f"wds-bench-ai-{secrets.token_hex(4)}",
    ) as api:
        yield provider, api.base_url


async def _first_event(session: aiohttp.ClientSession, url: str, body: bytes, marker: bytes,
                       headers: dict[str, str]) -> float:
    """Seconds from sending ``body`` to the first line starting with ``marker``; the rest
    of the stream is read to its end (a turn cut short would be a different workload)."""
    t0 = time.perf_counter()
    first: float | None = None
    async with session.post(url, data=body, headers=headers) as resp:
        if resp.status != 200:
            raise OperationFailed(f"HTTP {resp.status}: {(await resp.read())[:300]!r}")
        async for line in resp.content:
            if first is None and line.startswith(marker):
                first = time.perf_counter() - t0
    if first is None:
        raise OperationFailed(f"no {marker!r} line in the stream")
    return first


CHAT_NAME = "webhook first token − provider first token, streamed, sequential"


@scenario("chat.first_token", title="time to first streamed token through the webhook, over the provider's own",
          target=f"≤ {CHAT_BUDGET_MS:g} ms p50")
async def chat_first_token(ctx: BenchContext) -> list[Figure]:
    pairs = PAIRS_QUICK if ctx.config.quick else PAIRS_FULL
    try:
        async with ai_stack(ctx) as (provider, api_url):
            agent = await ctx.call("POST", f"{ctx.rest}/agents",
                                   {"name": f"bench-{secrets.token_hex(3)}", "instructions": "Be brief.",
                                    "table_ids": []}, expect=(201,))
            channel = await ctx.call("POST", f"{ctx.rest}/agents/{agent['id']}/channels", {"type": "web"},
                                     expect=(201,))
            hook = f"{api_url}/functions/v1/agent-webhook?type=web&token={channel['token']}"
            direct = f"{provider.url}/chat/completions"
            json_h = {"Content-Type": "application/json"}
            # a fresh session per turn: history stays one message, as in a first message
            turn = orjson.dumps({"message": "hello", "stream": True})
            direct_body = orjson.dumps({"model": "bench-model", "stream": True,
                                        "messages": [{"role": "user", "content": "hello"}]})
            via, own = [], []
            for i in range(WARM_PAIRS + pairs):
                a = await _first_event(ctx.session, hook, turn, b"event: token", json_h)
                b = await _first_event(ctx.session, direct, direct_body, b"data:", json_h)
                if i >= WARM_PAIRS:
                    via.append(a * 1000)
                    own.append(b * 1000)
    except NotMeasurable as exc:
        return [not_measured("chat.first_token", CHAT_NAME, str(exc))]
    diffs = pair_differences(via, own)
    overhead = percentile(diffs, 50)
    return [budget_figure(
        "chat.first_token", CHAT_NAME, overhead, CHAT_BUDGET_MS, reference_ms=percentile(own, 50) or 0.0,
        what="overhead p50", p50_ms=percentile(via, 50), p99_ms=percentile(via, 99), tags=ctx.tags,
        note=(f"{pairs} pairs; provider's own first token p50 {percentile(own, 50):.2f} ms; "
              f"overhead p99 {percentile(diffs, 99):.1f} ms; p50/p99 column: through the webhook"),
    )]


SEARCH_NAME = "semantic search, limit 10 − query embedding, sequential"


def _titles(n: int, seed: int = 9) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.sample(VOCAB, 6)) for _ in range(n)]


@scenario("search.semantic", title="semantic search over every bench row, excluding the query's embedding",
          target=f"p50 ≤ {SEARCH_BUDGET_MS:g} ms")
async def semantic_search(ctx: BenchContext) -> list[Figure]:
    rows = ctx.config.rows
    pairs = PAIRS_QUICK if ctx.config.quick else PAIRS_FULL
    try:
        async with ai_stack(ctx) as (provider, api_url):
            rest = f"{api_url}/functions/v1/rest-api"
            table = await ctx.call("POST", f"{rest}/tables", {
                "name": f"bench-search-{secrets.token_hex(3)}", "icon": "table",
                "columns": [{"name": "Title", "type": "text"}, {"name": "N", "type": "number"}],
                "semantic_search": {"columns": ["Title"]}}, expect=(201,))
            titles = _titles(rows)
            for start in range(0, rows, 500):
                body = {"rows": [{"fields": {"Title": t, "N": start + i}}
                                 for i, t in enumerate(titles[start:start + 500])]}
                out = await ctx.call("POST", f"{rest}/tables/{table['id']}/records/batch", body, expect=(200,))
                errors = (out.get("pipeline") or {}).get("errors") or {}
                if any("record" not in r for r in out["results"]) or "_embedding" in errors:
                    raise BenchError(f"inserting searchable rows failed: {str(out)[:300]}")
            queries = [" ".join(random.Random(i).sample(VOCAB, 3)) for i in range(WARM_PAIRS + pairs)]
            url = f"{rest}/tables/{table['id']}/search"
            json_h = {**ctx.headers}
            searched, embedded = [], []
            for i, q in enumerate(queries):
                t0 = time.perf_counter()
                hits = await ctx.call("POST", url, {"query": q, "limit": 10}, expect=(200,), headers=json_h)
                t1 = time.perf_counter()
                await ctx.call("POST", f"{provider.url}/embeddings", {"model": EMBED_MODEL, "input": [q]},
                               expect=(200,), headers={"Content-Type": "application/json"})
                t2 = time.perf_counter()
                if len(hits["results"]) != 10:
                    raise BenchError(f"search returned {len(hits['results'])} hits, expected 10")
                if i >= WARM_PAIRS:
                    searched.append((t1 - t0) * 1000)
                    embedded.append((t2 - t1) * 1000)
    except NotMeasurable as exc:
        return [not_measured("search.semantic", SEARCH_NAME, str(exc))]
    diffs = pair_differences(searched, embedded)
    return [budget_figure(
        "search.semantic", f"{SEARCH_NAME}, {rows:,} rows", percentile(diffs, 50), SEARCH_BUDGET_MS,
        reference_ms=percentile(embedded, 50) or 0.0, what="p50 without embedding",
        p50_ms=percentile(searched, 50), p99_ms=percentile(searched, 99), tags=ctx.tags,
        note=(f"{pairs} queries; query embedding (direct /embeddings call beside each search) p50 "
              f"{percentile(embedded, 50):.2f} ms; p50/p99 column: the whole search call"),
    )]
