"""Board names come from the model's metadata record on IPFS; an outage keeps the name already shown."""

import pytest

from apps.chain import evidence
from apps.chain.models import LedgerModel, ReputationChange
from apps.leaderboard import entries
from apps.leaderboard.models import BoardEntry
from lib import records

pytestmark = pytest.mark.django_db
MODEL = "0x" + "42" * 32
CTX = "0x" + "ab" * 32
WAD = 10**18


def change(block: int, r: int = WAD // 2):
    return ReputationChange.objects.create(block_number=block, log_index=0, tx_hash="0x" + f"{block:064x}",
                                           interaction_id="0x" + f"{block:064x}", model_id=MODEL, context_id=CTX,
                                           ra=WAD // 2, rh=WAD // 2, r=r, n_auto=block, n_human=0, timestamp=1_700_000_000)


def metadata(name: str) -> str:
    record = records.model_metadata(name=name, provider="lab", owner="0x" + "11" * 20, endpoint_kind="openai-chat")
    return evidence.default_store().put(records.canonical(record))


def test_names_come_from_metadata_and_survive_an_outage(settings):
    cid = metadata("Ada-7B")
    LedgerModel.objects.create(model_id=MODEL, owner="0x" + "11" * 20, metadata_cid=cid, block_number=1)
    change(1)
    entries.refresh({(MODEL, CTX)})
    assert BoardEntry.objects.get(model_id=MODEL).name == "Ada-7B"

    evidence.default_store().local.path(cid).unlink()  # the record can no longer be read
    change(2, r=WAD // 3)
    entries.refresh({(MODEL, CTX)})
    entry = BoardEntry.objects.get(model_id=MODEL)
    assert entry.name == "Ada-7B" and entry.r == WAD // 3, "new numbers, the name already shown"

    BoardEntry.objects.all().delete()
    entries.refresh({(MODEL, CTX)})
    assert BoardEntry.objects.get(model_id=MODEL).name == entries.short_id(MODEL), "never named: the short id"


def test_a_metadata_update_renames_the_model_everywhere():
    LedgerModel.objects.create(model_id=MODEL, owner="0x" + "11" * 20, metadata_cid=metadata("old"), block_number=1)
    change(1)
    entries.refresh({(MODEL, CTX)})
    LedgerModel.objects.filter(model_id=MODEL).update(metadata_cid=metadata("new name"))
    before = entries.version(CTX)
    entries.refresh(set(), {MODEL})  # what the indexer sends for a ModelMetadataUpdated event
    assert BoardEntry.objects.get(model_id=MODEL).name == "new name" and entries.version(CTX) != before
