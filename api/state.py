"""Process-wide state of an API process: settings, pool, caches, Temporal client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api.services.cache import Caches
from service.config import Settings
from storage import meta
from storage.db import Database
from storage.reads import RecordReader
from storage.schema import WorkspaceSchema


@dataclass
class AppState:
    settings: Settings
    db: Database
    caches: Caches = field(default_factory=Caches)
    temporal: Any = None  # temporalio.client.Client once connected
    worker: Any = None  # in-process temporalio.worker.Worker
    extras: dict[str, Any] = field(default_factory=dict)
    reader: RecordReader = field(init=False)  # concurrent reads by id, coalesced per table

    def __post_init__(self) -> None:
        self.reader = RecordReader(self.db)

    async def schema(self, workspace_id: int) -> WorkspaceSchema:
        async def load() -> WorkspaceSchema:
            async with self.db.connection() as conn:
                return await meta.load_schema(conn, workspace_id=workspace_id)

        return await self.caches.schema(workspace_id, load)
