import pytest
from eth_account import Account

from apps.chain.keys import KeyError_, account_for, new_key
from apps.chain.models import SigningKey
from ops.keys import rekey

pytestmark = pytest.mark.django_db


def test_signing_keys_are_encrypted_at_rest(settings):
    settings.LLMCHAIN_KEY_SECRETS = ["first secret"]
    row = new_key("alice")
    account = account_for(row.address)
    stored = bytes(SigningKey.objects.get(pk=row.pk).encrypted_key)
    assert account.address == row.address
    assert bytes(account.key) not in stored and bytes(account.key).hex().encode() not in stored


def test_rotating_the_secret_keeps_every_key_usable(settings):
    settings.LLMCHAIN_KEY_SECRETS = ["old secret"]
    key = Account.create()
    from apps.chain.keys import store_key

    row = store_key(key.key, "bob")
    settings.LLMCHAIN_KEY_SECRETS = ["new secret", "old secret"]
    assert rekey() == 1
    settings.LLMCHAIN_KEY_SECRETS = ["new secret"]
    account_for.__globals__["_decrypt"].cache_clear()
    assert account_for(row.address).key == key.key


def test_a_key_encrypted_with_an_unknown_secret_is_refused(settings):
    settings.LLMCHAIN_KEY_SECRETS = ["one"]
    row = new_key("charlie")
    settings.LLMCHAIN_KEY_SECRETS = ["another"]
    account_for.__globals__["_decrypt"].cache_clear()
    with pytest.raises(KeyError_):
        account_for(row.address)
