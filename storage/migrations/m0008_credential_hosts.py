"""Credentials bound to hosts; Telegram webhook secrets (issue 22).

* ``wds.credentials.hosts`` (jsonb list of host patterns, see ``storage/secrets.py``).
  Each existing credential is bound to the literal hosts of the URLs that already name it:
  ``http_request`` columns (``config.url`` with ``config.credential``), loop sub-steps of
  that kind, and ``action`` columns (the hosts of their literal URL parameters, e.g.
  ``params.base_url``; the catalogue's request URLs all start with a parameter). A URL
  whose scheme or host is templated cannot be bound: a credential named only by such
  URLs (or by none) keeps an empty list, which matches nothing — the proxy sends it
  nowhere until an operator sets its hosts (docs/operations.md, upgrade notes).
* ``wds.channels.webhook_secret_hash``: SHA-256 of the ``secret_token`` registered with
  Telegram's ``setWebhook``; updates without the matching header are refused.
"""

from __future__ import annotations

from collections import defaultdict

import orjson
from sqlalchemy import Connection, text

from storage.secrets import credential_targets, pattern_of


def upgrade(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE wds.credentials ADD COLUMN IF NOT EXISTS hosts jsonb NOT NULL DEFAULT '[]'::jsonb"))
    conn.execute(text("ALTER TABLE wds.channels ADD COLUMN IF NOT EXISTS webhook_secret_hash text"))
    bound: dict[tuple[int, str], set[str]] = defaultdict(set)
    rows = conn.execute(text(
        "SELECT workspace_id, type, config FROM wds.columns WHERE type IN ('http_request', 'action', 'loop')"))
    for workspace_id, kind, config in rows:
        found = credential_targets(kind, config if isinstance(config, dict) else {})
        if found is not None:
            bound[(workspace_id, found[0])] |= {pattern_of(o) for o in found[1]}
    for (workspace_id, name), hosts in bound.items():
        if hosts:
            conn.execute(
                text("UPDATE wds.credentials SET hosts = CAST(:hosts AS jsonb)"
                     " WHERE workspace_id = :ws AND name = :name AND hosts = '[]'::jsonb"),
                {"hosts": orjson.dumps(sorted(hosts)).decode(), "ws": workspace_id, "name": name},
            )
