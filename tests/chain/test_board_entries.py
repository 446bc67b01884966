"""The indexer keeps the boards' table (BoardEntry) in step with the chain, whatever the chunking."""

from datetime import datetime, timezone

import pytest

from apps.chain import indexer
from apps.chain.models import Reputation, ReputationChange
from apps.chain.submitter import Submitter
from apps.leaderboard import entries
from apps.leaderboard.models import BoardEntry
from lib.reputation import GLOBAL_CONTEXT_ID

from .conftest import drain

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain]

FIELDS = [f.name for f in BoardEntry._meta.fields if f.name != "id"]


def dump():
    return {(e["model_id"], e["context_id"]): e for e in BoardEntry.objects.values(*FIELDS)}


def test_entries_follow_the_indexed_reputations_with_band_sparkline_and_time(world):
    answers = [(5, 5, 5, 4, 4, 1), (1, 2, 1, 3, 2, 4), (4, 4, 3, 5, 5, 2)]
    for user, a in zip(world.users, answers):
        world.evaluation(user, answers=a)
    drain(Submitter(world.ledger))
    version_before = entries.version(world.context)
    indexer.index_until_head(world.ledger)
    assert entries.version(world.context) != version_before, "folding a change moves the board's version"

    reps = {(r.model_id, r.context_id): r for r in Reputation.objects.all()}
    rows = dump()
    assert set(rows) == set(reps) and len(rows) == 2  # the context and the global one
    for key, rep in reps.items():
        row = rows[key]
        assert (row["ra"], row["rh"], row["r"], row["n_auto"], row["n_human"], row["block_number"]) == (
            rep.ra, rep.rh, rep.r, rep.n_auto, rep.n_human, rep.block_number)
        block = world.ledger.client.get_block(rep.block_number)
        assert row["changed_at"] == datetime.fromtimestamp(int(block["timestamp"], 16), tz=timezone.utc)
        changes = ReputationChange.objects.filter(model_id=key[0], context_id=key[1]).count()
        assert changes == 9  # 3 x (autoEval with a reference, humEval, updateReputation)
        assert row["history"]["i"] == list(range(1, changes + 1)) and row["history"]["r"][-1] == round(rep.r / 1e18, 6)
        assert row["spark"][-1] == round(rep.r / 1e18, 6)
        assert row["band_n"] == 3 and row["band_lo"] is not None and row["band_lo"] <= row["band_hi"]
        assert row["name"] == entries.short_id(world.model), "metadata not on IPFS here: the short id"
    glob, ctx = rows[(world.model, GLOBAL_CONTEXT_ID)], rows[(world.model, world.context)]
    assert glob["history"] == ctx["history"], "one model in one context: its global history is the same"


def test_entries_do_not_depend_on_how_the_blocks_were_chunked(world):
    for user in world.users:
        world.evaluation(user)
    world.evaluation(world.users[0], reference=False)
    drain(Submitter(world.ledger))
    indexer.index_until_head(world.ledger)
    whole = dump()
    assert whole

    indexer.reset()
    assert not BoardEntry.objects.exists(), "a reset forgets the derived rows too"
    while indexer.index_once(world.ledger, max_blocks=1):
        pass
    assert dump() == whole

    BoardEntry.objects.all().delete()
    assert entries.rebuild() == len(whole)
    assert dump() == whole
