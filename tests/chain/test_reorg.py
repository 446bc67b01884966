"""A node that loses its last blocks after the indexer folded them (a crashed anvil restarting from
its last state dump, a reorganised chain): the indexer follows the chain it reads.

Blocks are dropped with anvil's `evm_revert`, different evaluations are mined at the same heights,
and after indexing again the audit agrees with the chain and every served board matches it.
"""

from __future__ import annotations

import pytest

from apps.chain import indexer
from apps.chain.audit import run_audit
from apps.chain.evidence import LocalBlobStore
from apps.chain.ledger import Ledger
from apps.chain.models import LedgerInteraction, Reputation, ReputationChange
from apps.leaderboard.models import BoardEntry
from apps.leaderboard.verify import CidReader, SiteBoards, rebuild_from_chain, verify_boards
from lib import records
from tests.support import Driver, new_account

pytestmark = [pytest.mark.chain, pytest.mark.django_db]
WAD = 10**18
DAY = 86_400
CONTEXT = b"\xc1" * 32
ALPHA, BETA = b"\xa1" * 32, b"\xb1" * 32


@pytest.fixture
def chain(fresh_chain, settings, tmp_path, admin):
    """Accounts, a context and two models on-chain and folded, on the session's automining anvil (one
    block per transaction, and `evm_mine` for empty ones: heights are exact, so the replacement blocks
    land at the very heights the indexer folded); `fresh_chain` takes the chain back to the bare
    deployment afterwards (the database is rolled back by the test's transaction)."""
    settings.LLMCHAIN_FINALITY = "0"  # every block is final: the indexer folds the blocks that are then lost
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    d: Driver = fresh_chain
    store = LocalBlobStore(settings.LLMCHAIN_IPFS_DIR)
    dev, users = new_account(), [new_account() for _ in range(3)]
    d.transact(admin, "identity", "register", dev.address, 2, "")
    for u in users:
        d.transact(admin, "identity", "register", u.address, 1, "")
    d.transact(admin, "reputation", "addContext", CONTEXT, "reasoning")
    for model, name in ((ALPHA, "alpha-7b"), (BETA, "beta-13b")):
        cid = store.put(records.canonical(records.model_metadata(name=name, provider="test", owner=dev.address,
                                                                 endpoint_kind="replay")))
        d.transact(dev, "reputation", "addModel", model, cid)
    ledger = Ledger(d.client, d.deployment)
    indexer.index_until_head(ledger)
    return {"driver": d, "ledger": ledger, "users": users, "store": store}


def evaluate(d: Driver, oracle, user, model: bytes, iid: bytes, sa: int, likert=None) -> int:
    """autoEval, then (with `likert`) humEval and updateReputation: one block each. Returns the blocks mined."""
    d.transact(oracle, "reputation", "autoEval", iid, model, CONTEXT, user.address, True, sa, WAD // 2,
               "bafy" + iid.hex()[:16])
    if likert is None:
        return 1
    d.set_next_timestamp(d.latest_timestamp() + DAY)  # a full weight: D is capped at a day
    d.transact(user, "reputation", "humEval", iid, *likert)
    d.transact(oracle, "reputation", "updateReputation", iid)
    return 3


def mine_to(d: Driver, height: int) -> None:
    while d.client.block_number() < height:
        d.client.request("evm_mine", [])


def board_differences(ledger: Ledger, store: LocalBlobStore) -> list:
    reports = verify_boards(rebuild_from_chain(ledger, CidReader(store)), SiteBoards())
    return [(r.title, r.verdict) for r in reports if not r.ok]


def ids(*raw: bytes) -> set[str]:
    return {"0x" + r.hex() for r in raw}


@pytest.mark.parametrize("replacement", ["as many blocks", "fewer blocks"])
def test_blocks_lost_after_indexing_are_unfolded_and_their_replacements_folded(chain, oracle, replacement):
    d, ledger, users, store = chain["driver"], chain["ledger"], chain["users"], chain["store"]
    fork = d.snapshot()
    fork_height = d.client.block_number()

    # The blocks that will be lost: alpha rated three times, beta evaluated once; all folded.
    lost = [bytes([0x10 + k]) * 32 for k in range(4)]
    for k, user in enumerate(users):
        evaluate(d, oracle, user, ALPHA, lost[k], 6 * 10**17 + k, likert=(5, 4, 4, 3, 4, 2))
    evaluate(d, oracle, users[0], BETA, lost[3], WAD // 3)
    lost_head = d.client.block_number()
    indexer.index_until_head(ledger)
    assert set(LedgerInteraction.objects.values_list("interaction_id", flat=True)) == ids(*lost)
    assert BoardEntry.objects.filter(model_id="0x" + ALPHA.hex(), context_id="0x" + CONTEXT.hex()).exists()
    assert run_audit(ledger).ok

    # The node loses them and mines different evaluations at the same heights: beta rated twice,
    # alpha only auto-evaluated; then, as a live chain does, it goes on past the lost head.
    d.revert_to(fork)
    assert d.client.block_number() == fork_height
    kept = [bytes([0x20 + k]) * 32 for k in range(3)]
    evaluate(d, oracle, users[1], BETA, kept[0], WAD // 4, likert=(1, 2, 1, 5, 2, 4))
    if replacement == "as many blocks":
        evaluate(d, oracle, users[2], BETA, kept[1], WAD // 5, likert=(3, 3, 3, 3, 3, 3))
        evaluate(d, oracle, users[0], ALPHA, kept[2], 7 * 10**17)
        mine_to(d, lost_head)
        assert d.client.block_number() == lost_head
    else:
        evaluate(d, oracle, users[2], ALPHA, kept[1], 7 * 10**17)
        kept = kept[:2]
        assert d.client.block_number() < lost_head
        indexer.index_until_head(ledger)  # the node is behind the folded head for a while: no harm done
    mine_to(d, lost_head + 1)

    indexer.index_until_head(ledger)

    audit = run_audit(ledger)
    assert audit.ok, audit.summary() | {"db": audit.db_mismatches[:3], "chain": audit.contract_mismatches[:3]}
    assert set(LedgerInteraction.objects.values_list("interaction_id", flat=True)) == ids(*kept)
    assert not ReputationChange.objects.filter(interaction_id__in=ids(*lost)).exists()
    assert {(r.model_id, r.context_id, r.n_auto, r.n_human)
            for r in Reputation.objects.filter(context_id="0x" + CONTEXT.hex())} == {
        ("0x" + m.hex(), "0x" + CONTEXT.hex(), *ledger.reputation(m, CONTEXT)[3:]) for m in (ALPHA, BETA)}
    assert board_differences(ledger, store) == []
