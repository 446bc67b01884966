"""Private keys the site signs with: the operator's (from settings) and per-account keys
stored encrypted at rest (Fernet, keys derived from LLMCHAIN_KEY_SECRETS)."""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from eth_account import Account
from eth_account.signers.local import LocalAccount

from .models import SigningKey


class KeyError_(LookupError):
    pass


def _fernet(secret: str) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest()))


def cipher() -> MultiFernet:
    """The first secret encrypts; every listed secret decrypts (rotation: prepend a new one)."""
    secrets = [s for s in settings.LLMCHAIN_KEY_SECRETS if s]
    return MultiFernet([_fernet(s) for s in secrets])


def store_key(private_key: bytes | str, label: str = "") -> SigningKey:
    account = Account.from_key(private_key)
    token = cipher().encrypt(bytes(account.key))
    row, _ = SigningKey.objects.get_or_create(
        address=account.address, defaults={"label": label, "encrypted_key": token})
    return row


def new_key(label: str = "") -> SigningKey:
    return store_key(Account.create().key, label)


def operator_accounts() -> dict[str, LocalAccount]:
    accounts = [Account.from_key(k) for k in (settings.LLMCHAIN_ADMIN_KEY, *oracle_keys(), *relayer_keys())]
    return {a.address: a for a in accounts}


@lru_cache(maxsize=4096)
def _decrypt(address: str, token: bytes) -> LocalAccount:
    try:
        return Account.from_key(cipher().decrypt(token))
    except InvalidToken as exc:
        raise KeyError_(f"the key of {address} cannot be decrypted with the configured secrets") from exc


def account_for(address: str) -> LocalAccount:
    """The local account that signs for `address`."""
    ops = operator_accounts()
    if address in ops:
        return ops[address]
    row = SigningKey.objects.filter(address=address).first()
    if row is None:
        raise KeyError_(f"no signing key for {address}")
    return _decrypt(address, bytes(row.encrypted_key))


def admin_address() -> str:
    return Account.from_key(settings.LLMCHAIN_ADMIN_KEY).address


def key_list(value: str | None) -> list[str]:
    """The keys a setting names: one, or several separated by commas."""
    return [k.strip() for k in (value or "").split(",") if k.strip()]


def oracle_keys() -> list[str]:
    """The oracle's keys (LLMCHAIN_ORACLE_KEY: one, or several separated by commas), each granted
    ORACLE_ROLE."""
    return key_list(settings.LLMCHAIN_ORACLE_KEY)


def oracle_addresses() -> tuple[str, ...]:
    return _addresses(tuple(oracle_keys()))


def oracle_address(record_id: str | None = None) -> str:
    """The oracle key that sends the call about `record_id` (an interaction's autoEval, a battle's
    openBattle): with several oracle keys, the one the id picks (keys.address_slot of the id), so that
    the oracle's calls spread over as many sender lanes, which submitters run with `--shard` take side by
    side; the first key's without an id."""
    return _picked(oracle_addresses(), record_id)


def configured_relayer_keys() -> list[str]:
    """The keys LLMCHAIN_RELAYER_KEY names (one, or several separated by commas); none when unset."""
    return key_list(settings.LLMCHAIN_RELAYER_KEY)


def relayer_keys() -> list[str]:
    """The relayers' keys: those configured, or, when none is, one derived from the oracle's first key
    (default_relayer_key), so that relayed requests have a lane of their own and trouble there (a
    request the node refuses, a backlog) never holds up the oracle's calls."""
    return configured_relayer_keys() or [default_relayer_key()]


RELAYER_KEY_LABEL = b"LLMChain relayer key\x00"


def default_relayer_key() -> str:
    """keccak256(label || the oracle's first key): a key of its own, the same on every machine that has
    the oracle's key, which tells nothing about the oracle's key. It holds no role; on a chain that
    prices gas its address (`chain status`) must be funded like any relayer's."""
    from eth_utils import keccak

    oracle = bytes.fromhex(oracle_keys()[0].strip().removeprefix("0x").removeprefix("0X"))
    return "0x" + keccak(RELAYER_KEY_LABEL + oracle).hex()


def address_slot(address: str, count: int) -> int:
    """Which of `count` an address (or a 0x-hex id) falls to, its number modulo `count`: a signer's
    relayer, an interaction's oracle key, a lane's submitter shard."""
    return int(address, 16) % count


def _picked(addresses: tuple[str, ...], by: str | None) -> str:
    """The address `by` (an address or a 0x-hex id) falls to, keys.address_slot; the first without one."""
    return addresses[0] if by is None else addresses[address_slot(by, len(addresses))]


@lru_cache(maxsize=64)
def _addresses(keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(Account.from_key(k).address for k in keys)


def relayer_address(signer: str | None = None) -> str:
    """The relayer of `signer`'s requests (and of the updateReputation that follows each): with
    several relayers, always the same one for one signer, chosen by its address, so that a signer's
    requests reach the forwarder in nonce order through one sender lane; the first relayer's
    without a signer. Each relayer is a lane of its own: submitters run with `--shard` take
    different lanes side by side."""
    return _picked(relayer_addresses(), signer)


def relayer_addresses() -> tuple[str, ...]:
    """The relayers' addresses, one sender lane each (relayer_keys)."""
    return _addresses(tuple(relayer_keys()))


def rekey_signing_keys() -> int:
    """Re-encrypt every stored signing key with the first configured secret; returns how many.
    The other secrets under the same cipher (model API keys) are chat's: `ops.keys.rekey` does both."""
    f = cipher()
    rows = list(SigningKey.objects.all())
    for row in rows:
        row.encrypted_key = f.rotate(bytes(row.encrypted_key))
    SigningKey.objects.bulk_update(rows, ["encrypted_key"], batch_size=500)
    _decrypt.cache_clear()
    return len(rows)
