"""Arena mode on the site's side: drawing two models (favouring pairs with few
battles, never the user's own), hidden names until the vote, one vote per battle by its user, a vote
on an answer that named its own model kept but not counted, and the vote's way to the chain (after
both answers' autoEval: openBattle by the oracle, then the user's signed vote, relayed). The chain
itself runs in tests/chain/test_relay.py and the whole flow in tests/browser/test_arena_in_browser.py."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from apps.chain.keys import oracle_address, relayer_address
from apps.chain.models import ArenaBattle, OutboxItem
from apps.chat import arena
from apps.chat.conversations import begin_interaction, finish_interaction, search_conversations
from apps.chat.models import Battle, RegisteredModel
from apps.chat.registry import ModelFields, register_model
from tests.personas import PASSWORD, developer, user

from .factories import make_contexts
from .test_ratings import auto_eval_queued
from .test_wallet import deployed  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def _model(owner, name: str, *, kind=RegisteredModel.Kind.OPENAI, provider: str = "Lab") -> RegisteredModel:
    model = register_model(owner, ModelFields(name=name, provider=provider, endpoint_url="http://127.0.0.1:9/v1",
                                              endpoint_model=name))
    RegisteredModel.objects.filter(pk=model.pk).update(healthy=True, kind=kind)
    model.refresh_from_db()
    return model


@pytest.fixture
def stage(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    writing, = make_contexts("writing")
    dave = developer("dave")
    models = [_model(dave, name) for name in ("lighthouse-3b", "harbour-7b", "tide-13b")]
    return writing, models, user("alice")


def voted_on_chain(battle: Battle, a, b, outcome: int) -> ArenaBattle:
    """The battle's Voted event as the indexer folds it once final."""
    return ArenaBattle.objects.create(
        battle_id=battle.battle_id, context_id=battle.context.context_id, model_a=battle.conversation_a.model.model_id,
        model_b=battle.conversation_b.model.model_id, interaction_a=a.interaction_id, interaction_b=b.interaction_id,
        user=battle.user.profile.address, voided=False, block_number=5, tx="0x" + "1" * 64, outcome=outcome,
        counted=True, vote_block=6, vote_tx="0x" + "2" * 64)


def _answered(battle: Battle, texts=("An answer.", "Another answer.")) -> tuple:
    out = []
    for conversation, text in zip((battle.conversation_a, battle.conversation_b), texts):
        turn = begin_interaction(battle.user, conversation, "Describe a harbour at dawn.")
        finish_interaction(turn, text)
        out.append(turn)
    return tuple(out)


def test_fewer_than_two_models_is_said_plainly(stage):
    writing, models, alice = stage
    RegisteredModel.objects.filter(pk__in=[m.pk for m in models[1:]]).update(healthy=False)
    with pytest.raises(ValidationError, match="needs two running models"):
        arena.start_battle(alice, writing)
    assert not Battle.objects.exists()


def test_replay_models_and_the_users_own_models_are_never_drawn(stage):
    writing, models, alice = stage
    RegisteredModel.objects.filter(pk=models[2].pk).update(kind=RegisteredModel.Kind.REPLAY)
    mine = _model(models[0].owner, "alices-own-7b")
    RegisteredModel.objects.filter(pk=mine.pk).update(owner=alice)
    drawn = {m.pk for _ in range(30) for m in arena.draw_pair(alice, writing, random.Random(_))}
    assert drawn == {models[0].pk, models[1].pk} and mine.pk not in drawn


def test_pairs_with_few_battles_come_up_more_often(stage):
    writing, models, alice = stage
    for _ in range(9):  # lighthouse vs harbour has met 9 times in voted battles; the two other pairs never
        battle = arena.start_battle(alice, writing, random.Random(1))
        battle.conversation_a.model, battle.conversation_b.model = models[0], models[1]
        battle.conversation_a.save(), battle.conversation_b.save()
        Battle.objects.filter(pk=battle.pk).update(status="onchain")
    # The draw reads the candidates and the battles so far from the database (as draw_pair does), then
    # draws from them: the statistics are taken on the draw itself, 5,000 times from one read.
    counts, candidates = arena.pair_counts(writing), arena.candidates(alice, writing)
    assert counts[frozenset((models[0].pk, models[1].pk))] == 9 and sorted(m.pk for m in candidates) == sorted(
        m.pk for m in models)
    rng = random.Random(7)
    assert {m.pk for m in arena.draw_pair(alice, writing, rng)} <= {m.pk for m in models}
    draws = Counter(frozenset(m.pk for m in arena.pick_pair(candidates, counts, rng)) for _ in range(3000))
    busy = draws[frozenset((models[0].pk, models[1].pk))]
    fresh = draws[frozenset((models[0].pk, models[2].pk))] + draws[frozenset((models[1].pk, models[2].pk))]
    # Weights 1/10 against 1 and 1: the busy pair has 1/21 of the draws (about 143 of 3000).
    assert 80 < busy < 220 and fresh == 3000 - busy
    pair = {models[0].pk, models[2].pk}
    firsts = [a.pk for a, b in (arena.pick_pair(candidates, counts, rng) for _ in range(2000)) if {a.pk, b.pk} == pair]
    assert 0.4 < firsts.count(models[0].pk) / len(firsts) < 0.6, "which model is A is random too"


def test_names_are_hidden_until_the_vote_and_shown_after(stage):
    writing, models, alice = stage
    battle = arena.start_battle(alice, writing, random.Random(3))
    a, b = _answered(battle)
    client = Client()
    client.login(username="alice", password=PASSWORD)
    page = client.get(f"/arena/{battle.pk}/").content.decode()
    names = [m.name for m in models]
    assert not any(name in page for name in names), "no model is named before the vote"
    # Sending waits for both chat sockets: the button comes disabled, arena.js enables it once both
    # are open (a message sent before that was dropped: the browser test's failure under load).
    assert '<button type="submit" disabled>Send to both</button>' in page
    assert client.get(f"/chat/{battle.conversation_a.pk}/").url == f"/arena/{battle.pk}/"
    assert not search_conversations(alice).filter(arena=True).exists()
    vote_box = client.get(f"/arena/{battle.pk}/vote").content.decode()
    assert "Which answer is better?" in vote_box and not any(name in vote_box for name in names)
    response = client.post(f"/arena/{battle.pk}/vote", {"outcome": "a"})
    assert response.status_code == 200 and response["HX-Refresh"] == "true"
    battle.refresh_from_db()
    assert (battle.status, battle.outcome, battle.self_named) == ("voted", "a", "")
    page = client.get(f"/arena/{battle.pk}/").content.decode()
    assert not any(name in page for name in names), "no name until the vote is final on-chain"
    assert "Your vote: A is better" in page and "on its way to the chain" in page
    assert not search_conversations(alice).filter(arena=True).exists()
    voted_on_chain(battle, a, b, 1)
    page = client.get(f"/arena/{battle.pk}/").content.decode()
    assert battle.conversation_a.model.name in page and battle.conversation_b.model.name in page
    assert search_conversations(alice).filter(arena=True).count() == 2


def test_one_vote_per_battle_by_its_user_on_complete_answers(stage):
    writing, models, alice = stage
    battle = arena.start_battle(alice, writing, random.Random(4))
    with pytest.raises(ValidationError, match="Both answers must be complete"):
        arena.vote(alice, battle, "a")
    _answered(battle)
    with pytest.raises(ValidationError, match="Choose one of"):
        arena.vote(alice, battle, "left")
    with pytest.raises(PermissionError):
        arena.vote(user("bob"), battle, "a")
    arena.vote(alice, battle, "tie")
    with pytest.raises(ValidationError, match="one vote per battle"):
        arena.vote(alice, Battle.objects.get(pk=battle.pk), "b")
    assert Battle.objects.get(pk=battle.pk).outcome == "tie"


def test_a_vote_where_an_answer_named_its_own_model_is_kept_but_not_counted(stage):
    writing, models, alice = stage
    battle = arena.start_battle(alice, writing, random.Random(5))
    name_a = battle.conversation_a.model.name.split("-")[0]
    _answered(battle, (f"As {name_a.upper()}, a helpful model, I would say: calm water.", "Calm water at dawn."))
    battle = arena.vote(alice, battle, "a")
    assert battle.self_named == "a" and not battle.counted
    assert arena.summary(battle)["self_named"] == ["model A"], "not named before the vote is final"
    voted_on_chain(battle, *arena.first_answers(battle), 1)
    assert arena.summary(battle)["self_named"] == [battle.conversation_a.model.name]


@pytest.mark.parametrize("text, named", [
    ("I am Lighthouse, here to help.", True), ("lighthouse-3b here.", True), ("Ask Lab's team.", False),
    ("A lighthouse stands on the rocks.", True),  # its name as a word, even used as a word: Chatbot Arena's rule is as blunt
    ("The lighthouses glow.", False), ("Lighthouse3 is different.", False)])
def test_what_counts_as_naming_itself(stage, text, named):
    _, models, _ = stage
    assert arena.names_itself(models[0], text) is named


def test_the_vote_goes_on_chain_after_both_answers_signed_by_the_user_and_relayed(stage, deployed, monkeypatch):
    from apps.chain import relay

    monkeypatch.setattr(relay, "vote_blocker", lambda signer, model_ids: "")  # the chain's own checks: tests/security
    writing, models, alice = stage
    battle = arena.start_battle(alice, writing, random.Random(6))
    a, b = _answered(battle)
    battle = arena.vote(alice, battle, "b")
    assert battle.status == "voted" and not OutboxItem.objects.filter(function__in=["openBattle", "vote"]).exists()
    autos = [auto_eval_queued(a), auto_eval_queued(b)]
    assert not arena.advance_waiting(), "waits until both autoEval calls are confirmed"
    OutboxItem.objects.filter(pk=autos[0].pk).update(status="confirmed")
    assert not arena.advance_waiting()
    OutboxItem.objects.filter(pk=autos[1].pk).update(status="confirmed")
    assert arena.advance_waiting() == 1
    battle.refresh_from_db()
    opened, voted = battle.open_item, battle.vote_item
    assert battle.status == "queued"
    # Both relayed in one atomic group, in the lane of the oracle's relayer: openBattle signed by the oracle.
    group = f"battle:{battle.battle_id}"
    assert (opened.function, opened.sender_address, opened.signer, opened.atomic_group) == (
        "openBattle", relayer_address(oracle_address(battle.battle_id)), oracle_address(battle.battle_id), group)
    assert opened.payload == {"battleId": battle.battle_id, "interactionA": a.interaction_id,
                              "interactionB": b.interaction_id, "voided": False}
    assert (voted.function, voted.sender_address, voted.signer, voted.atomic_group) == (
        "vote", opened.sender_address, alice.profile.address, group)
    assert voted.payload == {"battleId": battle.battle_id, "outcome": 2} and voted.depends_on_id is None
    assert voted.request["from"] == alice.profile.address and voted.relay_nonce == 0


def test_votes_are_in_the_users_download_and_in_the_shared_dataset(stage):
    from apps.chat.export import user_data
    from apps.chat.models import Profile
    from apps.leaderboard.dataset import records

    writing, models, alice = stage
    battle = arena.start_battle(alice, writing, random.Random(8))
    a, b = _answered(battle)
    [before] = user_data(alice)["votes"]
    assert before["vote"] is None and "model" not in before["sides"]["a"], "a blind battle stays blind"
    arena.vote(alice, battle, "tie")
    assert "model" not in user_data(alice)["votes"][0]["sides"]["a"], "not before the vote is final on-chain"
    voted_on_chain(battle, a, b, 3)
    [after] = user_data(alice)["votes"]
    assert (after["battle_id"], after["vote"], after["counted"]) == (battle.battle_id, "tie", True)
    assert after["sides"]["b"]["model"] == battle.conversation_b.model.name
    assert not [r for r in records() if r["interaction_id"] == a.interaction_id], "alice does not share"
    Profile.objects.filter(user=alice).update(share_prompts=True)
    shared = {r["interaction_id"]: r for r in records()}
    assert shared[a.interaction_id]["arena"] == {
        "battle_id": battle.battle_id, "side": "a", "opponent": b.interaction_id,
        "opponent_model_id": battle.conversation_b.model.model_id, "vote": "tie", "counted": True}
    assert shared[b.interaction_id]["arena"]["side"] == "b"


def test_a_wallet_users_vote_is_signed_by_the_wallet_and_refused_without_it(stage, deployed):
    from .test_wallet import _link, _sign

    writing, models, alice = stage
    account, _ = _link(alice)
    battle = arena.start_battle(alice, writing, random.Random(9))
    _answered(battle)
    assert arena.needs_wallet(battle) and arena.signer(battle) == account.address
    with pytest.raises(ValidationError) as info:
        arena.vote(alice, battle, "a")
    assert "wallet" in str(info.value.message_dict["vote"])
    prepared = arena.prepare_vote(alice, battle, "a")
    assert prepared["typedData"]["message"]["from"] == account.address
    with pytest.raises(ValidationError):  # signed for A, sent as B
        arena.vote(alice, Battle.objects.get(pk=battle.pk), "b", _sign(prepared, account.key))
    battle = arena.vote(alice, Battle.objects.get(pk=battle.pk), "a", _sign(prepared, account.key))
    assert battle.signer == account.address and battle.request["from"] == account.address


def test_the_arena_suggests_contexts_from_the_prompt_as_chat_does(stage):
    writing, models, alice = stage
    make_contexts("coding")
    client = Client()
    client.login(username="alice", password=PASSWORD)
    page = client.get("/arena/").content.decode()
    assert 'hx-get="/chat/suggest?for=arena"' in page
    fragment = client.get("/chat/suggest", {"for": "arena", "prompt": "Write a short poem about the sea"}).content.decode()
    assert f'href="/arena/?context={writing.context_id}"' in fragment
    chat = client.get("/chat/suggest", {"prompt": "Write a short poem about the sea"}).content.decode()
    assert f'href="/chat/?context={writing.context_id}"' in chat
    chosen = client.get(f"/arena/?context={writing.context_id}").content.decode()
    assert f'<option value="{writing.context_id}" selected>' in chosen
