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
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Connection, text

from storage.secrets import credential_targets, pattern_of


# the integration catalogue is data beside the activities: read the parameter defaults
# (e.g. params.base_url) from the file rather than importing another layer
_CATALOGUE = Path(__file__).resolve().parents[2] / "activities" / "catalogue.json"


def _catalogue_defaults() -> dict[tuple[str, str], dict[str, Any]]:
    try:
        data = orjson.loads(_CATALOGUE.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return {
        (str(g.get("id")), str(r.get("id"))): {p["name"]: p["default"] for p in r.get("params", [])
                                               if isinstance(p, dict) and p.get("default") is not None}
        for g in data.get("groups", []) for r in g.get("requests", [])
    }


def upgrade(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE wds.credentials ADD COLUMN IF NOT EXISTS hosts jsonb NOT NULL DEFAULT '[]'::jsonb"))
    conn.execute(text("ALTER TABLE wds.channels ADD COLUMN IF NOT EXISTS webhook_secret_hash text"))
    catalogue = _catalogue_defaults()
    bound: dict[tuple[int, str], set[str]] = defaultdict(set)
    rows = conn.execute(text(
        "SELECT workspace_id, type, config FROM wds.columns WHERE type IN ('http_request', 'action', 'loop')"))
    for workspace_id, kind, config in rows:
        found = credential_targets(kind, config if isinstance(config, dict) else {},
                                   lambda g, r: catalogue.get((g, r), {}))
        if found is not None:
            bound[(workspace_id, found[0])] |= {pattern_of(o) for o in found[1]}
    for (workspace_id, name), hosts in bound.items():
        if hosts:
            conn.execute(
                text("UPDATE wds.credentials SET hosts = CAST(:hosts AS jsonb)"
                     " WHERE workspace_id = :ws AND name = :name AND hosts = '[]'::jsonb"),
                {"hosts": orjson.dumps(sorted(hosts)).decode(), "ws": workspace_id, "name": name},
            )
