"""Credential encryption at rest (storage/secrets.py), used by the credential tools."""

from __future__ import annotations

import pytest

from storage import secrets
from storage.errors import ServiceError


def test_secrets_round_trip_and_are_not_stored_in_clear():
    box = secrets.SecretBox("service-key")
    sealed = box.encrypt("tok_123")
    assert b"tok_123" not in sealed
    assert box.decrypt(sealed) == "tok_123"
    assert secrets.SecretBox("service-key").decrypt(sealed) == "tok_123"  # the key is derived, not random


def test_another_service_key_cannot_open_a_secret():
    sealed = secrets.SecretBox("key-a").encrypt("x")
    with pytest.raises(ServiceError) as exc:
        secrets.SecretBox("key-b").decrypt(sealed)
    assert exc.value.code == "CREDENTIAL_UNREADABLE"


@pytest.mark.parametrize("key", [None, ""])
def test_no_service_key_means_credentials_are_not_configured(key):
    with pytest.raises(ServiceError) as exc:
        secrets.SecretBox(key)
    assert exc.value.code == "NOT_CONFIGURED"


@pytest.mark.parametrize("kw,ok", [
    ({"name": "a", "type": "bearer", "secret": "s", "header_name": None}, True),
    ({"name": "a", "type": "header", "secret": "s", "header_name": "X-Key"}, True),
    ({"name": "a", "type": "query", "secret": "s", "header_name": "api_key"}, True),
    ({"name": "a", "type": "basic", "secret": "u:p", "header_name": None}, True),
    ({"name": "a", "type": "basic", "secret": "nocolon", "header_name": None}, False),
    ({"name": "a", "type": "header", "secret": "s", "header_name": None}, False),
    ({"name": "a", "type": "bearer", "secret": "s", "header_name": "X"}, False),
    ({"name": "a", "type": "oauth", "secret": "s", "header_name": None}, False),
    ({"name": " ", "type": "bearer", "secret": "s", "header_name": None}, False),
    ({"name": "a", "type": "bearer", "secret": "", "header_name": None}, False),
])
def test_credential_definitions_are_checked(kw, ok):
    if ok:
        assert secrets.check_credential(**kw, hosts=["api.example.com"])[1] == kw["type"]
    else:
        with pytest.raises(ServiceError) as exc:
            secrets.check_credential(**kw, hosts=["api.example.com"])
        assert exc.value.code == "VALIDATION_ERROR"
