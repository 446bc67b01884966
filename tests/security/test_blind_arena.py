"""The blind vote stays blind, and no one fishes for a pair: what a battle's own user can get from the
site before the vote is final on-chain, tried as a hostile user would (every URL the site routes, the
API, the service layer that page, API and socket share)."""

from __future__ import annotations

import itertools
import random
import re
from datetime import timedelta

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.urls import Resolver404, URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone

from apps.chain import outbox
from apps.chain.keys import oracle_address
from apps.chain.models import ArenaBattle, ChainTransaction, LedgerInteraction, OutboxItem, Sender
from apps.chat import arena, ratings
from apps.chat.conversations import begin_interaction, check_prompt, finish_interaction
from apps.chat.models import Battle, Conversation, Interaction, Profile, RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.oracle import jobs
from apps.oracle.models import EvaluationJob
from tests.chat.factories import make_contexts
from tests.personas import PASSWORD, developer, user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quick_passwords")]
NAMES = ("quokka-7b", "wombat-3b", "dingo-13b")
GOOD = {"reliability": 4, "completeness": 4, "utility": 4, "familiarity": 3, "trust": 3, "uncertainty": 2}
PROMPT = "Describe a quiet morning by the sea."


def _model(owner, name: str, url: str) -> RegisteredModel:
    model = register_model(owner, ModelFields(name=name, provider="Marsupial", endpoint_url=url,
                                              endpoint_model=name))
    RegisteredModel.objects.filter(pk=model.pk).update(healthy=True)
    model.refresh_from_db()
    return model


def _push_ids_past(models) -> None:
    """Move the next ids of battles, conversations and interactions past every model's pk, so that the
    battle's ids never equal a model's pk (a URL keyed by a model's pk filled with a battle's id would then
    name that model by chance). PostgreSQL's sequences do not roll back with a test's transaction, so the
    tables' counters stand wherever earlier tests on the worker left them: set them, do not count on them."""
    above = max(m.pk for m in RegisteredModel.objects.all()) + 1000
    with connection.cursor() as cursor:
        for model in (Battle, Conversation, Interaction):
            table = model._meta.db_table
            if connection.vendor == "postgresql":
                cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), "
                               "GREATEST(%s, (SELECT COALESCE(MAX(id), 0) FROM " + table + ")))", [table, above])
            else:  # SQLite's AUTOINCREMENT counter: the next id is one past the largest ever given
                cursor.execute("UPDATE sqlite_sequence SET seq = MAX(seq, %s) WHERE name = %s", [above, table])
                if not cursor.rowcount:
                    cursor.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [table, above])


@pytest.fixture
def battle(settings, tmp_path, hostile):
    """alice's battle, both answers in (side A's names its model), their evidence pinned, before the vote."""
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    writing, = make_contexts("writing")
    dave = developer("dave")
    models = [_model(dave, name, hostile.url()) for name in NAMES]
    alice = user("alice")
    Profile.objects.filter(user=alice).update(share_prompts=True)  # the public dataset would carry her answers
    _push_ids_past(models)
    # The draw is random: make the third model the one left out (the decoy every public list names too).
    RegisteredModel.objects.filter(pk=models[2].pk).update(healthy=False)
    b = arena.start_battle(alice, writing, random.Random(1))
    RegisteredModel.objects.filter(pk=models[2].pk).update(healthy=True)
    sides = [b.conversation_a, b.conversation_b]
    answers = []
    for n, conversation in enumerate(sides):
        turn = begin_interaction(alice, conversation, PROMPT)
        name = conversation.model.name
        finish_interaction(turn, f"I am {name} ({name.split('-')[0].upper()}), and the sea is calm." if n == 0
                           else "The sea is calm and grey.")
        answers.append(turn)
    cids = {}
    for n, turn in enumerate(answers):
        cid = f"bafkreibattleevidence{n}{'a' * 30}"
        EvaluationJob.objects.filter(interaction=turn).update(status="pinned", evidence_cid=cid, sa="1", wa="1")
        cids[turn.pk] = cid
    return b, answers, cids, models


def _secrets(b: Battle, cids: dict) -> list[str]:
    out = list(cids.values())
    for c in (b.conversation_a, b.conversation_b):
        out += [c.model.name, c.model.model_id, c.model.name.split("-")[0]]
    out += list(OutboxItem.objects.filter(function="autoEval").exclude(transaction=None).values_list(
        "transaction__tx_hash", flat=True))
    return out


# --- every URL ---------------------------------------------------------------------------------------

def _routes(resolver=None, prefix: str = "") -> list[tuple[str, object]]:
    """(route, pattern) of every URL pattern, walked from the URL configuration."""
    resolver = resolver or get_resolver()
    out = []
    for p in resolver.url_patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver):
            out += _routes(p, route)
        elif isinstance(p, URLPattern):
            out.append((route, p))
    return out


PARAM = re.compile(r"<(?:(\w+):)?(\w+)>|\{(\w+)\}|\(\?P<(\w+)>[^)]*\)")


def _fill(route: str, values: dict[str, list[str]]) -> list[str]:
    """The URLs of `route` with each parameter filled with every candidate value of its kind."""
    route = route.lstrip("^").rstrip("$").replace("\\", "")
    slots = list(PARAM.finditer(route))
    if not slots:
        return ["/" + route]
    choices = []
    for m in slots:
        converter = m.group(1) or ""
        choices.append(values["int"] if converter == "int" else values["str"])
    urls = []
    for combo in itertools.product(*choices):
        url, last = "", 0
        for m, value in zip(slots, combo):
            url += route[last:m.start()] + value
            last = m.end()
        urls.append("/" + url + route[last:])
    return urls


def _queries(url: str) -> tuple[str, ...]:
    """The queries `url` is asked with: as it is, and with ?format=json (DRF's renderer by name,
    URL_FORMAT_OVERRIDE) wherever the query can change the answer. Not for a URL that no pattern matches
    (the one 404 page), nor for the admin's (three in four of the URLs), which answers a user who is not
    staff with its login page or a redirect to it before any view reads the query."""
    try:
        match = resolve(url)
    except Resolver404:
        return ("",)
    return ("",) if match.namespace == "admin" else ("", "?format=json")


def _body(response) -> str:
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return content.decode("utf-8", "replace")


def _voted_not_final(b: Battle, answers: list, cids: dict) -> None:
    """The vote is signed; both answers' autoEval calls are on-chain (indexed), the vote is not final yet."""
    arena.vote(b.user, Battle.objects.get(pk=b.pk), "b")
    lane = Sender.objects.create(address=oracle_address())
    for n, turn in enumerate(answers):
        conversation = turn.conversation
        item = outbox.enqueue("autoEval", oracle_address(), {
            "interactionId": turn.interaction_id, "modelId": conversation.model.model_id,
            "contextId": conversation.context.context_id, "user": b.user.profile.rating_address,
            "hasReference": True, "sA": "1", "wA": "1", "evidenceCid": cids[turn.pk]})
        tx = ChainTransaction.objects.create(sender=lane, nonce=n, function="autoEval", tx_hash="0x" + f"{n + 7:064x}",
                                             raw=b"", gas_limit=1, status="confirmed", block_number=3)
        OutboxItem.objects.filter(pk=item.pk).update(status="confirmed", transaction=tx)
        EvaluationJob.objects.filter(interaction=turn).update(outbox_item=item, status="onchain")
        LedgerInteraction.objects.create(
            interaction_id=turn.interaction_id, model_id=conversation.model.model_id,
            context_id=conversation.context.context_id, user=b.user.profile.rating_address, has_reference=True,
            sa=1, wa=1, evidence_cid=cids[turn.pk], auto_tx=tx.tx_hash, auto_block=3)


@pytest.mark.parametrize("state", ["before the vote", "voted, not final"])
def test_as_the_battles_user_no_url_the_site_routes_names_a_side_until_the_vote_is_final(battle, client, state):
    """Every route of the URL configuration and every path of the OpenAPI schema, each parameter filled
    with the battle's own objects' ids (the battle, both sides, both answers, their on-chain ids and
    evidence CIDs): no answer holds a side's model name or id, evidence CID or autoEval transaction,
    unless it is a list of every model (it names the model left out of the draw as well)."""
    b, answers, cids, models = battle
    if state != "before the vote":
        _voted_not_final(b, answers, cids)
    decoy = RegisteredModel.objects.get(pk=models[2].pk)
    assert decoy.pk not in (b.conversation_a.model_id, b.conversation_b.model_id)
    assert not b.user.is_staff, "the admin sends her to its login"
    client.login(username="alice", password=PASSWORD)
    ints = sorted({str(x) for x in (b.pk, b.conversation_a.pk, b.conversation_b.pk, *(a.pk for a in answers))})
    strs = sorted({b.battle_id, *(a.interaction_id for a in answers), *cids.values(), b.context.context_id, *ints})
    values = {"int": ints, "str": strs}
    urls = {u for route, _ in _routes() for u in _fill(route, values)}
    schema = yaml.load(client.get("/api/schema").content, Loader=yaml.CSafeLoader)  # libyaml's: 0.4 s sooner
    for path in schema["paths"]:
        kinds = {m.group(3): "int" for m in PARAM.finditer(path) if m.group(3)}
        filled = [path]
        for name in kinds:
            filled = [f.replace("{" + name + "}", v) for f in filled for v in ints + strs]
        urls |= set(filled)
    assert not set(ints) & {str(m.pk) for m in RegisteredModel.objects.all()}, "an id would name a model by chance"
    assert len(urls) > 100 and "/api/conversations" in urls and f"/api/interactions/{answers[0].pk}" in urls
    secrets_ = _secrets(b, cids)
    assert (state == "before the vote") == (len(secrets_) == 8), "the autoEval transactions are looked for too"
    leaks, answered = [], 0
    for url in sorted(urls):
        if "logout" in url:
            continue
        for query in _queries(url):
            response = client.get(url + query)
            if response.status_code == 500:
                leaks.append((url, response.status_code, "server error"))
                continue
            answered += response.status_code == 200
            body = _body(response)
            found = [s for s in secrets_ if s.lower() in body.lower() and s.lower() not in url.lower()]  # not an echo
            if not found:
                continue
            # A list of every model names the one left out of the draw too: it does not single out a side.
            named = [s for s in found if s in cids.values()
                     or (s.startswith("0x") and decoy.model_id not in body)
                     or (not s.startswith("0x") and decoy.name.split("-")[0] not in body)]
            if named:
                leaks.append((url + query, response.status_code, named))
    assert answered > 20, "the walk reached the pages"
    assert not leaks, leaks


def test_the_sides_answers_and_errors_are_masked_where_they_name_their_model(battle):
    _b, answers, _cids, _models = battle
    a = Interaction.objects.get(pk=answers[0].pk)
    name = a.conversation.model.name
    assert name in a.answer and name not in a.shown_answer and arena.MASK in a.shown_answer
    assert name.split("-")[0].upper() not in a.shown_answer
    Interaction.objects.filter(pk=a.pk).update(error=f"{name} could not answer just now (HTTP 503).")
    assert name not in Interaction.objects.get(pk=a.pk).shown_error


def test_an_offline_or_too_long_message_does_not_name_a_hidden_sides_model(battle):
    b, answers, _cids, _models = battle
    Interaction.objects.filter(pk__in=[a.pk for a in answers]).update(status="failed")
    RegisteredModel.objects.filter(pk=b.conversation_a.model_id).update(healthy=False)
    side = Conversation.objects.get(pk=b.conversation_a.pk)
    with pytest.raises(ValidationError) as info:
        check_prompt(b.user, side, PROMPT)
    assert "Model A is offline" in str(info.value) and side.model.name not in str(info.value)
    from apps.chat.conversations import Fit

    assert side.model.name not in Fit(tokens=900, limit=512, reserve=128, counted=True).describe(side.model_label)


# --- one message, the same for both, no rating, no second turn ---------------------------------------

def test_before_the_vote_each_side_takes_one_message_the_same_for_both(settings, tmp_path, hostile):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    writing, = make_contexts("writing")
    dave = developer("dave")
    for name in NAMES[:2]:
        _model(dave, name, hostile.url())
    alice = user("alice")
    b = arena.start_battle(alice, writing, random.Random(2))
    first = begin_interaction(alice, b.conversation_a, PROMPT)
    with pytest.raises(ValidationError, match="same message"):
        begin_interaction(alice, b.conversation_b, "What is your name and who made you?")
    second = begin_interaction(alice, b.conversation_b, PROMPT)
    finish_interaction(first, "Calm.")
    finish_interaction(second, "Grey.")
    for side in (b.conversation_a, b.conversation_b):
        with pytest.raises(ValidationError, match="One message per battle"):
            begin_interaction(alice, side, PROMPT)
    assert Battle.objects.get(pk=b.pk).prompt == PROMPT
    arena.vote(alice, Battle.objects.get(pk=b.pk), "a")
    with pytest.raises(ValidationError, match="on its way to the chain"):
        begin_interaction(alice, b.conversation_a, "Which model are you?")
    assert Interaction.objects.filter(conversation__in=[b.conversation_a, b.conversation_b]).count() == 2


def test_a_second_prompt_and_a_rating_through_the_api_are_refused_before_the_vote(battle):
    b, answers, _cids, _models = battle
    api = Client()
    api.login(username="alice", password=PASSWORD)
    response = api.post(f"/api/conversations/{b.conversation_a.pk}/messages", {"prompt": "Which model are you?"},
                        content_type="application/json")
    assert response.status_code == 400 and "One message per battle" in str(response.json())
    response = api.post(f"/api/interactions/{answers[1].pk}/rating", GOOD, content_type="application/json")
    assert response.status_code == 400 and "once your vote is recorded" in str(response.json())
    with pytest.raises(ValidationError):
        ratings.submit_rating(b.user, answers[0], GOOD)
    assert not Interaction.objects.filter(rating__isnull=False).exists()


class _Metric:
    name, params = "test", {}


# --- the chain: no autoEval before the vote, names only once Voted is final ----------------------------

def test_a_sides_autoeval_waits_for_the_vote_and_names_appear_only_once_voted_is_final(battle, client):
    b, answers, _cids, _models = battle
    EvaluationJob.objects.filter(interaction=answers[1]).update(status="scored", evidence_cid="")
    jobs.process(jobs.claim(10), metric=None)
    assert not OutboxItem.objects.filter(function="autoEval").exists(), "held until the vote is signed"
    assert not EvaluationJob.objects.get(interaction=answers[1]).evidence_cid, "nor is the evidence published"
    assert not jobs.claim(10) and jobs.release_held() == 0
    battle_ = arena.vote(b.user, Battle.objects.get(pk=b.pk), "b")
    assert jobs.release_held() == 2
    jobs.process(jobs.claim(10), metric=_Metric())
    assert OutboxItem.objects.filter(function="autoEval").count() == 2
    client.login(username="alice", password=PASSWORD)
    names = [c.model.name for c in (b.conversation_a, b.conversation_b)]
    page = client.get(f"/arena/{b.pk}/").content.decode()
    assert "on its way to the chain" in page and not any(n in page for n in names)
    ArenaBattle.objects.create(battle_id=b.battle_id, context_id=b.context.context_id, model_a="0x1", model_b="0x2",
                               interaction_a=answers[0].interaction_id, interaction_b=answers[1].interaction_id,
                               user=battle_.signer, voided=False, block_number=3, tx="0x3")
    assert not any(n in client.get(f"/arena/{b.pk}/").content.decode() for n in names), "opened, not voted"
    assert client.get(f"/arena/{b.pk}/vote?hidden=1").get("HX-Refresh") is None
    ArenaBattle.objects.filter(battle_id=b.battle_id).update(outcome=2, counted=True, vote_block=4, vote_tx="0x4")
    assert client.get(f"/arena/{b.pk}/vote?hidden=1")["HX-Refresh"] == "true", "the page reloads to show the names"
    page = client.get(f"/arena/{b.pk}/").content.decode()
    assert all(n in page for n in names)


def test_a_wallet_vote_that_would_expire_before_it_is_relayed_is_refused(battle, settings):
    settings.LLMCHAIN_ARENA_VOTE_MIN_DEADLINE_S = 3600
    with pytest.raises(ValidationError, match="at least 1 hour"):
        arena.check_deadline({"from": "0x" + "1" * 40, "to": "0x" + "2" * 40, "value": 0, "gas": 100000, "nonce": 0,
                              "deadline": int(timezone.now().timestamp()) + 20, "data": "0x", "signature": "0x"})


# --- no fishing -----------------------------------------------------------------------------------------

def test_one_unvoted_battle_at_a_time_and_abandoning_counts_against_later_votes(battle, settings):
    b, _answers, _cids, _models = battle
    alice = b.user
    writing = b.context
    with pytest.raises(ValidationError, match="waiting for your vote"):
        arena.start_battle(alice, writing)
    settings.LLMCHAIN_ARENA_ABANDON_LIMIT = 1
    arena.abandon(alice, b)
    assert Battle.objects.get(pk=b.pk).status == "abandoned" and arena.abandoned_recently(alice) == 1
    with pytest.raises(ValidationError, match="abandoned"):
        arena.vote(alice, Battle.objects.get(pk=b.pk), "a")
    second = arena.start_battle(alice, writing)
    arena.abandon(alice, second)
    third = arena.start_battle(alice, writing)
    for side in (third.conversation_a, third.conversation_b):
        finish_interaction(begin_interaction(alice, side, PROMPT), "Calm.")
    voted = arena.vote(alice, third, "a")
    assert voted.flagged and not voted.counted, "more abandons than the limit: kept, not counted"
    assert Conversation.objects.get(pk=b.conversation_a.pk).battle is not None
    with pytest.raises(ValidationError, match="abandoned recently"):
        from apps.chat.conversations import delete_conversation

        delete_conversation(alice, Conversation.objects.get(pk=b.conversation_a.pk))
    Battle.objects.filter(pk__in=[b.pk, second.pk]).update(abandoned_at=timezone.now() - timedelta(days=30))
    assert arena.abandoned_recently(alice) == 0


def test_unvoted_and_abandoned_battles_do_not_weigh_in_the_pair_draw(battle):
    b, _answers, _cids, _models = battle
    assert not arena.pair_counts(b.context), "an unvoted battle does not count"
    arena.abandon(b.user, b)
    assert not arena.pair_counts(b.context), "nor an abandoned one"
    third = arena.start_battle(b.user, b.context)
    for side in (third.conversation_a, third.conversation_b):
        finish_interaction(begin_interaction(b.user, side, PROMPT), "Calm.")
    arena.vote(b.user, third, "tie")
    assert sum(arena.pair_counts(b.context).values()) == 1


def test_battle_starts_have_a_rate_of_their_own(battle, settings):
    b, _answers, _cids, _models = battle
    settings.LLMCHAIN_RATES = {**settings.LLMCHAIN_RATES, "battles": "3/hour"}  # the fixture's battle is one
    arena.abandon(b.user, b)
    started = 0
    with pytest.raises(ValidationError, match="many battles"):
        for _ in range(5):
            arena.abandon(b.user, arena.start_battle(b.user, b.context))
            started += 1
    assert started == 2


# --- the chat socket ---------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
async def test_a_hidden_sides_socket_never_sends_its_models_name_while_the_answer_streams(settings, tmp_path):
    import json

    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from apps.chat.consumers import ChatConsumer
    from tests.openai_endpoint import OpenAIEndpoint

    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    endpoints = {name: OpenAIEndpoint(models=(name,), answer=f"Hello! I am {name} from Marsupial, and the sea "
                                      "is calm and grey this morning.", delay=0.01) for name in NAMES[:2]}
    settings.LLMCHAIN_OUTBOUND_ALLOW = ",".join(e.url.split("/")[2] for e in endpoints.values())
    try:
        def stage():
            writing, = make_contexts("writing")
            dave = developer("dave")
            for name, endpoint in endpoints.items():
                _model(dave, name, endpoint.url)
            alice = user("alice")
            return alice, arena.start_battle(alice, writing, random.Random(3))

        alice, b = await sync_to_async(stage)()
        side = await sync_to_async(lambda: Conversation.objects.select_related("model").get(pk=b.conversation_a_id))()
        communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), f"/ws/chat/{side.pk}/")
        communicator.scope["user"] = alice
        communicator.scope["url_route"] = {"kwargs": {"pk": side.pk}}
        connected, _ = await communicator.connect()
        assert connected
        await communicator.send_to(text_data=json.dumps({"prompt": PROMPT}))
        frames = []
        while not frames or "outerHTML:#turn-" not in frames[-1]:
            frames.append(await communicator.receive_from(timeout=20))
        await communicator.disconnect()
        sent = "".join(frames)
        turn = await sync_to_async(Interaction.objects.get)(conversation=side)
        assert turn.status == "done" and side.model.name in turn.answer, "the answer itself is kept whole"
        assert side.model.name not in sent and "Marsupial" not in sent and arena.MASK in sent
    finally:
        for endpoint in endpoints.values():
            endpoint.close()
