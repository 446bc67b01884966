"""Each account gets its own key at sign-up, never stored in clear nor logged; an operator can
rotate the secret that encrypts keys (signing keys and model API keys alike)."""

import logging

import pytest
from django.apps import apps as django_apps

from apps.chain.keys import account_for
from apps.chain.models import OutboxItem
from apps.chat.models import RegisteredModel
from apps.chat.providers import decrypt_api_key
from apps.chat.registry import ModelFields, register_model
from ops.keys import rekey
from tests.personas import developer, user

pytestmark = pytest.mark.django_db


def every_stored_value() -> bytes:
    """Every value of every row of every table, as bytes."""
    out = []
    for model in django_apps.get_models():
        for row in model.objects.all().values_list():
            for value in row:
                out.append(bytes(value) if isinstance(value, (bytes, memoryview)) else str(value).encode())
    return b"\n".join(out)


def test_sign_up_gives_an_own_address_registered_by_the_registrar_and_the_key_is_never_stored_or_logged(caplog):
    caplog.set_level(logging.DEBUG)
    alice = user("alice")
    account = account_for(alice.profile.address)
    register = OutboxItem.objects.get(key=f"register:{alice.profile.address}")
    assert register.payload["account"] == alice.profile.address and register.payload["role"] == 1
    key = bytes(account.key)
    stored = every_stored_value()
    for form in (key, key.hex().encode(), ("0x" + key.hex()).encode(), key.hex().upper().encode()):
        assert form not in stored
        assert form.decode("latin-1") not in caplog.text
    assert user("bob").profile.address != alice.profile.address


def test_rekey_re_encrypts_signing_keys_and_model_api_keys(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    settings.LLMCHAIN_KEY_SECRETS = ["old secret"]
    dave = developer()
    model = register_model(dave, ModelFields(name="m", provider="p", endpoint_url="http://127.0.0.1:9/v1",
                                             endpoint_model="m", api_key="sk-keep-me"))
    address = dave.profile.address
    settings.LLMCHAIN_KEY_SECRETS = ["new secret", "old secret"]
    assert rekey() >= 2
    settings.LLMCHAIN_KEY_SECRETS = ["new secret"]  # the old secret is gone
    account_for.__globals__["_decrypt"].cache_clear()
    assert account_for(address).address == address
    assert decrypt_api_key(RegisteredModel.objects.get(pk=model.pk).api_key_encrypted) == "sk-keep-me"
