"""Several oracle keys side by side (LLMCHAIN_ORACLE_KEY with commas), as relayers are: each holds
ORACLE_ROLE (granted at deployment, or by `up` when the key was added later), an interaction's autoEval
goes through the key its id picks, and submitters run with `--shard` each take their own oracle lane."""

from __future__ import annotations

import io

import pytest
from django.core.management.base import CommandError
from eth_account import Account

from apps.chain import indexer, outbox
from apps.chain.audit import run_audit
from apps.chain.deploy import has_role
from apps.chain.keys import oracle_address, oracle_addresses
from apps.chain.models import ChainTransaction, OutboxItem
from apps.chain.node import DEV_KEYS
from lib.ids import b32
from ops.management.commands.up import Command as Up

from .conftest import drain_sharded, rand_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db(transaction=True)]


def _is_oracle(ledger, address: str) -> bool:
    return has_role(ledger.client, ledger.deployment, "ORACLE_ROLE", address)


def _second_oracle(settings) -> Account:
    """A key whose address falls to the other shard of two than the first oracle's; configured second."""
    first = Account.from_key(DEV_KEYS[1])
    second = next(a for a in iter(Account.create, None) if int(a.address, 16) % 2 != int(first.address, 16) % 2)
    settings.LLMCHAIN_ORACLE_KEY = f"{DEV_KEYS[1]}, 0x{bytes(second.key).hex()}"
    return second


def test_up_grants_the_oracle_role_to_a_key_added_since_the_deployment_and_says_so(ledger, settings):
    second = _second_oracle(settings)
    assert not _is_oracle(ledger, second.address)
    out = io.StringIO()
    Up(stdout=out)._ensure_deployment()
    assert f"ORACLE_ROLE granted to {second.address}" in out.getvalue()
    assert _is_oracle(ledger, second.address) and _is_oracle(ledger, oracle_address())
    out = io.StringIO()
    Up(stdout=out)._ensure_deployment()
    assert "granted" not in out.getvalue(), "nothing to grant the second time"
    # An admin key that is not the deployment's admin cannot grant a new key: a clear error.
    third = Account.create()
    settings.LLMCHAIN_ORACLE_KEY += f",0x{bytes(third.key).hex()}"
    settings.LLMCHAIN_ADMIN_KEY = DEV_KEYS[3]
    with pytest.raises(CommandError, match="lacks ORACLE_ROLE .* LLMCHAIN_ADMIN_KEY cannot grant it"):
        Up(stdout=io.StringIO())._ensure_deployment()
    assert not _is_oracle(ledger, third.address)


def test_two_oracle_keys_and_two_submitters_side_by_side_each_send_their_own_interactions(world, settings):
    second = _second_oracle(settings)
    first = oracle_addresses()[0]
    Up(stdout=io.StringIO())._ensure_deployment()  # ORACLE_ROLE for the second key
    iids = [rand_id() for _ in range(24)]
    for iid in iids:
        outbox.enqueue("autoEval", oracle_address(iid), {
            "interactionId": iid, "modelId": world.model, "contextId": world.context, "user": world.users[0],
            "hasReference": True, "sA": str(6 * 10**17), "wA": str(5 * 10**17), "evidenceCid": f"bafy{iid[2:14]}"})
    by_sender = {a: OutboxItem.objects.filter(function="autoEval", sender_address=a).count()
                 for a in (first, second.address)}
    assert sum(by_sender.values()) == len(iids)
    for iid in iids:
        assert OutboxItem.objects.get(key=f"autoEval:{iid}").sender_address == [first, second.address][
            int(iid, 16) % 2]
    drain_sharded(world.ledger, [first, second.address])
    for oracle in by_sender:  # 24 random ids: both keys carry some (all on one: a chance of 2**-23)
        assert by_sender[oracle] and ChainTransaction.objects.filter(
            sender__address=oracle, function__startswith="autoEval", status="confirmed").exists(), by_sender
    assert all(world.ledger.view("reputation", "interactionExists", b32(iid))[0] for iid in iids)
    indexer.index_until_head(world.ledger)
    report = run_audit(world.ledger)
    assert report.ok, report.summary()
