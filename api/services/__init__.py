"""Services the operations and doors share: pipelines, backfills, schedules, realtime,
limits and quotas, caches, app users, messaging and AI clients."""
