"""Semantic-search tests: the AI-enabled API process and the fake provider come from tests.chat.support,
registered once for the session by the root conftest (``pytest_plugins``)."""
