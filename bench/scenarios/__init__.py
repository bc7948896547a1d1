"""Benchmark scenarios. Importing this package registers them all; the import order
below is the run order (cheap reads first, bulk writes after, peers last)."""

from bench.scenarios import records  # noqa: F401,I001  (registration side effect)
from bench.scenarios import query  # noqa: F401
from bench.scenarios import sql  # noqa: F401
from bench.scenarios import mcp  # noqa: F401
from bench.scenarios import limits  # noqa: F401
from bench.scenarios import realtime  # noqa: F401
from bench.scenarios import sdk  # noqa: F401
from bench.scenarios import batch  # noqa: F401
from bench.scenarios import pipelines  # noqa: F401
from bench.scenarios import sandbox  # noqa: F401
from bench.scenarios import outside  # noqa: F401
from bench.scenarios import noisy  # noqa: F401
from bench.scenarios import chat  # noqa: F401
from bench.scenarios import schema  # noqa: F401
from bench.scenarios import sql_analytics  # noqa: F401  (opt-in: --analytics-rows)
from bench.scenarios import scale  # noqa: F401
from bench.scenarios import peers  # noqa: F401
from bench.scenarios.registry import REGISTRY, Scenario, scenario, select

__all__ = ["REGISTRY", "Scenario", "scenario", "select"]
