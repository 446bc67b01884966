"""The site measures itself (`metaeval site`): per context, how often the automatic score agrees with
the arena votes of that context's people, next to the length rule on the same votes, and how Sa ranks
answers against people's ratings; a context with too little human signal says so instead of a figure.
The indexed tables stand for the chain's events (each answer's length for its evidence record's)."""

from __future__ import annotations

import io
import json
import secrets

import pytest
from django.core.management import call_command

from apps.annotate.site_validity import MIN_HUMAN, plain_line, rating_line, site_validity
from apps.chain.models import ArenaBattle
from apps.chain.models import LedgerInteraction
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import Conversation
from apps.chat.registry import ModelFields, register_model
from lib.reputation import WAD
from tests.chat.factories import make_contexts
from tests.personas import developer, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def site(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    busy, quiet = make_contexts("busy", "quiet")
    dave, alice = developer(), user()
    model = register_model(dave, ModelFields(name="m-7b", provider="t", endpoint_url="http://m.test/v1",
                                             endpoint_model="m"))
    conv = {c.pk: start_conversation(alice, model, c) for c in (busy, quiet)}

    def answer(context, text: str, sa: float, sh: float | None = None, *, read: bool = True) -> str:
        i = begin_interaction(alice, conv[context.pk], "Q?")
        finish_interaction(i, text)
        i.refresh_from_db()
        LedgerInteraction.objects.create(
            interaction_id=i.interaction_id, model_id=model.model_id, context_id=context.context_id, user="0x0",
            has_reference=True, sa=int(sa * WAD), wa=0, evidence_cid="bafy", auto_tx="0x", auto_block=1,
            sh=None if sh is None else int(sh * WAD), answer_chars=len(text) if read else None)
        return i.interaction_id

    def vote(context, a: str, b: str, outcome: int) -> None:
        ArenaBattle.objects.create(battle_id="0x" + secrets.token_hex(32), context_id=context.context_id,
                                   model_a="0x1", model_b="0x2", interaction_a=a, interaction_b=b, user="0x0",
                                   voided=False, block_number=1, tx="0x", outcome=outcome, counted=True)

    return {"busy": busy, "quiet": quiet, "answer": answer, "vote": vote}


def test_sa_agreeing_with_80_percent_of_the_votes_is_shown_next_to_the_length_rule_and_a_quiet_context_says_so(site):
    busy, quiet, answer, vote = site["busy"], site["quiet"], site["answer"], site["vote"]
    for k in range(40):  # the voted answer has the higher Sa in 32 of 40; it is the longer one in 20
        long_wins = k % 2 == 0
        winner = answer(busy, "a long and careful answer" if long_wins else "short", 0.8 if k < 32 else 0.2)
        loser = answer(busy, "short" if long_wins else "a long and careful answer", 0.5)
        vote(busy, winner, loser, 1) if k % 3 else vote(busy, loser, winner, 2)
    for _ in range(3):
        vote(quiet, answer(quiet, "x", 0.9), answer(quiet, "y", 0.1), 1)
    found = site_validity()
    v = found[busy.context_id]["votes"]
    assert (v["pairs_non_tie"], v["accuracy_non_tie"], v["length_accuracy_non_tie"], v["enough"]) == (40, 0.8, 0.5,
                                                                                                        True)
    assert v["accuracy_ci_low"] < 0.8 < v["accuracy_ci_high"] and v["margin_over_length_ci_low"] > 0
    assert plain_line(found[busy.context_id]).startswith("The automatic score agrees with people's votes here 80% [")
    assert "preferring the longer answer: 50%" in plain_line(found[busy.context_id])
    assert not found[quiet.context_id]["votes"]["enough"]
    assert plain_line(found[quiet.context_id]) == ("Not enough human signal yet to check the automatic score against "
                                                   f"people here: 3 arena votes between two scored answers, {MIN_HUMAN} needed.")
    assert found["0x" + "00" * 32]["votes"]["pairs_non_tie"] == 43  # the global board counts every context


def test_ratings_give_the_rank_correlation_of_sa_with_sh_and_of_the_length(site):
    busy, answer = site["busy"], site["answer"]
    for k in range(35):
        answer(busy, "w " * (35 - k), sa=k / 40, sh=(k + (3 if k % 5 == 0 else 0)) / 40)
    r = site_validity(busy.context_id)[busy.context_id]["ratings"]
    assert r["n"] == 35 and r["enough"] and r["spearman"] > 0.9 and r["length_spearman"] < -0.9
    assert r["spearman_ci_low"] <= r["spearman"] <= r["spearman_ci_high"]


def test_an_answer_whose_record_is_not_read_yet_counts_without_scores_and_a_deleted_conversation_changes_nothing(
        site):
    busy, answer, vote = site["busy"], site["answer"], site["vote"]
    for k in range(6):
        vote(busy, answer(busy, "a long and careful answer", 0.8, sh=k / 6), answer(busy, "short", 0.5, read=k > 0), 1)
    answer(busy, "not read yet", 0.4, sh=0.5, read=False)
    found = site_validity(busy.context_id)[busy.context_id]
    assert (found["votes"]["votes"], found["votes"]["pairs_non_tie"]) == (6, 5)
    assert (found["ratings"]["n"], found["ratings"]["unread"]) == (6, 1)
    assert found["ratings"]["length_spearman"] is None  # every rated answer here is as long as the others
    assert rating_line(found["ratings"]).endswith(" 1 more rated answer is left out until its record can be read.")
    Conversation.objects.all().delete()  # the chat's rows of every answer
    assert site_validity(busy.context_id)[busy.context_id] == found


def test_the_command_prints_a_line_per_context_and_the_figures_as_json(site):
    out = io.StringIO()
    call_command("metaeval", "site", "--context", "quiet", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert lines[0].startswith("quiet: Not enough human signal yet to check the automatic score against people here")
    assert list(json.loads(lines[-1])["contexts"]) == [site["quiet"].context_id]


def test_each_board_loads_its_line_after_the_page_and_a_board_without_people_says_so(site, client):
    busy, quiet, answer, vote = site["busy"], site["quiet"], site["answer"], site["vote"]
    for _ in range(MIN_HUMAN):
        vote(busy, answer(busy, "a much longer answer", 0.9), answer(busy, "short", 0.1), 1)
    page = client.get(f"/?context={quiet.context_id}").content.decode()
    assert f'hx-get="/boards/{quiet.context_id}/validity"' in page
    line = client.get(f"/boards/{quiet.context_id}/validity").content.decode()
    assert "Not enough human signal yet to check the automatic score against people here: 0 arena votes" in line
    line = client.get(f"/boards/{busy.context_id}/validity").content.decode()
    assert "agrees with people&#x27;s votes here 100% [" in line and "preferring the longer answer: 100%" in line
    assert client.get("/boards/0x" + "ab" * 32 + "/validity").status_code == 404
