"""A model owner's metadata update goes through the outbox, the submitter and the indexer: the
LedgerModel row shows the latest CID, the model keeps its id, owner and scores, and a refused
update (not the owner) fails in the outbox and changes no row."""

import pytest

from apps.chain import indexer, outbox
from apps.chain.audit import run_audit
from apps.chain.models import LedgerModel, OutboxItem, Reputation
from apps.chain.submitter import Submitter

from .conftest import drain, rand_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db(transaction=True)]
CID = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"


def update(world, cid, sender=None, **kwargs) -> OutboxItem:
    return outbox.enqueue("updateModelMetadata", sender or world.developer,
                          {"modelId": world.model, "metadataCid": cid}, **kwargs)


def row(world) -> LedgerModel:
    return LedgerModel.objects.get(model_id=world.model)


def test_an_update_through_the_outbox_becomes_the_models_metadata_cid(world):
    indexer.index_until_head(world.ledger)
    added = row(world)
    assert added.metadata_cid == "bafymodel"
    item = update(world, CID)
    drain(Submitter(world.ledger))
    item.refresh_from_db()
    assert (item.status, item.duplicate) == ("confirmed", False)
    assert item.transaction.function == "updateModelMetadata" and item.transaction.gas_used < 40_000
    indexer.index_until_head(world.ledger)
    now = row(world)
    assert now.metadata_cid == CID
    assert (now.pk, now.owner, now.block_number) == (added.pk, added.owner, added.block_number)
    assert LedgerModel.objects.count() == 1


def test_the_latest_update_wins_when_all_are_folded_in_one_chunk(world):
    """ModelAdded and three updates (the last one republishing the first CID) folded together."""
    first = update(world, CID)
    second = update(world, "bafysecond", depends_on=first)
    update(world, CID, depends_on=second, key=f"updateModelMetadata:{world.model}:{CID}:again")
    drain(Submitter(world.ledger))
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    assert not LedgerModel.objects.exists()
    indexer.index_until_head(world.ledger)
    assert row(world).metadata_cid == CID


def test_updates_folded_chunk_by_chunk_and_rebuilt_from_scratch_agree(world):
    for cid in ("bafyone", "bafytwo"):
        update(world, cid)
        drain(Submitter(world.ledger))
        indexer.index_until_head(world.ledger)
        assert row(world).metadata_cid == cid
    before = list(LedgerModel.objects.values_list("model_id", "owner", "metadata_cid", "block_number"))
    indexer.reset()
    assert not LedgerModel.objects.exists()
    indexer.index_until_head(world.ledger)
    assert list(LedgerModel.objects.values_list("model_id", "owner", "metadata_cid", "block_number")) == before


def test_an_update_by_anyone_but_the_owner_fails_and_changes_nothing(world):
    stranger_item = update(world, "bafystranger", sender=world.users[0])
    drain(Submitter(world.ledger))
    stranger_item.refresh_from_db()
    assert stranger_item.status == "failed" and "NotModelOwner" in stranger_item.last_error
    assert not stranger_item.duplicate
    indexer.index_until_head(world.ledger)
    assert row(world).metadata_cid == "bafymodel"


def test_an_update_of_an_unknown_model_fails(world):
    item = outbox.enqueue("updateModelMetadata", world.developer, {"modelId": rand_id(), "metadataCid": CID})
    drain(Submitter(world.ledger))
    item.refresh_from_db()
    assert item.status == "failed" and "UnknownModel" in item.last_error


def test_updates_leave_the_scores_and_the_audit_alone(world):
    for user in world.users:
        world.evaluation(user)
    update(world, CID)
    drain(Submitter(world.ledger))
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    indexer.index_until_head(world.ledger)
    assert row(world).metadata_cid == CID
    assert Reputation.objects.get(model_id=world.model, context_id=world.context).n_human == 3
    report = run_audit(world.ledger)
    assert report.ok, report.summary()
