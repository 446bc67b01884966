"""Each indexed interaction's answer length (LedgerInteraction.answer_chars) comes from the evidence record its
AutoEvaluated event names, as `verify` reads it: the indexer takes it from this site's own copy of the records
while it folds (never from the IPFS node), the chain worker's fill reads the others later through the node,
and until then the answer is left out of the rating figures and counted, on the site as in verify. Rebuilt
from scratch, the indexed tables come back the same."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from apps.annotate.site_validity import rating_figures, rating_line
from apps.chain import answers, indexer
from apps.chain.answers import AnswerFill
from apps.chain.evidence import EvidenceMissing, LocalBlobStore
from apps.chain.ipfs import IpfsUnavailable
from apps.chain.models import LedgerInteraction
from apps.chain.submitter import Submitter
from apps.leaderboard import entries
from apps.leaderboard.verify import CidReader, SiteBoards, rebuild_from_chain, verify_boards
from lib import records
from lib.cid import cid_for
from tests.chain.test_submitter import rebuild_and_dump

from .conftest import drain, rand_id

WAD = 10**18


def evidence(world, iid: str, text: str) -> bytes:
    return records.canonical(records.interaction_evidence(
        interaction_id=iid, context_id=world.context, context_name="reasoning", prompt="What is 40 + 2?",
        model_id=world.model, answer=text, references=[{"model": rand_id(), "text": "42", "score": 0}],
        metric={"name": "test"}, sa=0, wa=0))


@pytest.mark.chain
@pytest.mark.django_db
def test_a_length_comes_from_the_local_record_at_the_fold_and_a_late_one_from_the_fill_and_rebuilds_the_same(
        world, settings, tmp_path, django_capture_on_commit_callbacks):
    settings.LLMCHAIN_IPFS_DIR = tmp_path
    # The node is configured but answers nothing (the discard port): the fold never asks it.
    settings.LLMCHAIN_IPFS_BACKEND = "kubo"
    settings.LLMCHAIN_IPFS_API_URL = "http://127.0.0.1:9"
    store = LocalBlobStore(tmp_path)
    here, late, none = rand_id(), rand_id(), rand_id()
    texts = {here: "Forty-two, as the sum shows.", late: "42 — «quarante-deux»."}
    late_record = evidence(world, late, texts[late])
    for k, (iid, cid) in enumerate([(here, store.put(evidence(world, here, texts[here]))),
                                    (late, cid_for(late_record)),  # pinned by another site: not here yet
                                    (none, None)]):  # a CID of nothing anyone holds
        world.evaluation(world.users[k], sa=(k + 1) * WAD // 4, iid=iid, evidence_cid=cid)
    drain(Submitter(world.ledger))
    started = time.monotonic()
    indexer.index_until_head(world.ledger)
    assert time.monotonic() - started < 5
    chars = dict(LedgerInteraction.objects.values_list("interaction_id", "answer_chars"))
    assert chars == {here: len(texts[here]), late: None, none: None}
    assert len(texts[late]) == 21  # characters, not bytes

    # Left out and counted on the site, as in verify, which reads the same records.
    site = rating_figures(world.context)
    assert (site["n"], site["unread"]) == (1, 2)
    assert rating_line(site).endswith(" 2 more rated answers are left out until their records can be read.")
    chain = rebuild_from_chain(world.ledger, CidReader(store))
    assert chain.rated_unread(world.context) == 2
    assert verify_boards(chain, SiteBoards(), [world.context])[0].ok

    # The fill: the node does not answer, so the pass ends, filling nothing, and the next waits.
    fill = AnswerFill()
    assert fill.run() == 0 and fill.due > time.monotonic()
    # The record reaches this site's copy: the next pass reads it there and moves the board.
    store.put(late_record)
    fill.due = 0
    version = entries.version(world.context)
    with django_capture_on_commit_callbacks(execute=True):
        assert fill.run() == 1
    assert LedgerInteraction.objects.get(interaction_id=late).answer_chars == len(texts[late])
    assert entries.version(world.context) != version
    cache.clear()
    assert (rating_figures(world.context)["n"], rating_figures(world.context)["unread"]) == (2, 1)
    chain = rebuild_from_chain(world.ledger, CidReader(store))
    assert chain.rated_unread(world.context) == 1
    assert verify_boards(chain, SiteBoards(), [world.context])[0].ok

    # Rebuilt from scratch (no block mined between the two readings), every length comes back the same,
    # the late one from the fold now.
    world.ledger.client.request("evm_setIntervalMining", [0])
    try:
        indexer.index_until_head(world.ledger)
        rebuilt, before = rebuild_and_dump(world.ledger)
    finally:
        world.ledger.client.request("evm_setIntervalMining", [1])
    assert rebuilt == before
    assert dict(LedgerInteraction.objects.values_list("interaction_id", "answer_chars"))[late] == len(texts[late])


class Store:
    """An evidence store whose node is away for the CIDs in `away`, and holds `held` (CID -> bytes)."""

    def __init__(self, held=None, away=()):
        self.held, self.away, self.asked = dict(held or {}), set(away), []

    def get(self, cid, *, timeout=None):
        self.asked.append(cid)
        if cid in self.away:
            raise IpfsUnavailable("the node is away")
        if cid not in self.held:
            raise EvidenceMissing(cid)
        return self.held[cid]


def row(iid: str, cid: str) -> LedgerInteraction:
    return LedgerInteraction.objects.create(interaction_id=iid, model_id="0x1", context_id="0x2", user="0x0",
                                            has_reference=True, sa=0, wa=0, evidence_cid=cid, auto_tx="0x",
                                            auto_block=1, sh=WAD)


@pytest.mark.django_db
def test_the_fill_waits_longer_after_each_pass_that_fills_nothing_and_stops_at_a_node_that_does_not_answer():
    now = [1000.0]
    a, b = rand_id(), rand_id()
    text = "An answer."
    body = records.canonical(records.interaction_evidence(
        interaction_id=b, context_id=rand_id(), context_name="c", prompt="q", model_id=rand_id(), answer=text,
        references=[], metric={"name": "test"}, sa=0, wa=0))
    row(a, "bafy-away")
    row(b, cid_for(body))
    store = Store(away={"bafy-away"})
    fill = AnswerFill(store, clock=lambda: now[0])
    assert fill.run() == 0 and store.asked == ["bafy-away"]  # the node away: the pass ends there
    assert fill.due == now[0] + answers.EVERY_S
    now[0] += 1
    assert fill.run() == 0 and len(store.asked) == 1  # not due yet: nothing asked
    now[0] = fill.due
    store.away.clear()
    store.held[cid_for(body)] = body
    assert fill.run() == 1  # a unknown (no such record), b read: the next pass may come at once
    assert LedgerInteraction.objects.get(interaction_id=b).answer_chars == len(text)
    assert fill.due == now[0] and fill.wait == answers.EVERY_S
    for k in range(8):  # a never found: each pass that fills nothing waits twice as long, up to a bound
        assert fill.run() == 0
        assert fill.due - now[0] == min(answers.EVERY_MAX_S, answers.EVERY_S * 2**k)
        now[0] = fill.due
    assert LedgerInteraction.objects.get(interaction_id=a).answer_chars is None
