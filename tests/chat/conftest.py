"""Chat tests: the AI-enabled API process and the fake provider (see tests.chat.support)."""

from tests.chat.support import ai_admin, ai_api, cws, db, fake  # noqa: F401  (fixtures)
