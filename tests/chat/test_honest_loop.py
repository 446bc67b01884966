"""An honest core loop: a replay model is asked only what it recorded (and is never the default), a
reference is a model that can answer the prompt, and an answer no other model answered shows "no
automatic score" rather than a score of zero."""

from __future__ import annotations

import asyncio
import re

import pytest
from django.template.loader import render_to_string
from django.test import Client
from rest_framework.test import APIClient

from apps.chain.models import Reputation
from apps.chat.conversations import answer, begin_interaction, finish_interaction, start_conversation
from apps.chat.health import chat_choices
from apps.chat.models import Interaction, RegisteredModel
from apps.chat.providers import NoRecordedAnswer
from apps.chat.registry import ModelFields, register_model
from apps.chat.replay import import_mtbench
from apps.oracle.jobs import reference_models
from apps.oracle.models import EvaluationJob
from tests.personas import developer, user

from .factories import make_contexts, write_mtbench

pytestmark = pytest.mark.django_db

QUESTION = "Write a haiku about ledgers."
FOLLOW_UP = "Now make it rhyme."
OTHER = "Name three prime numbers."


@pytest.fixture
def world(settings, tmp_path):
    """In `writing`: two replay models (poet-1b recorded QUESTION and its follow-up, verse-3b only
    OTHER) and two endpoint models (the built-in one and a better-reputed one)."""
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    writing, = make_contexts("writing")
    root = write_mtbench(tmp_path / "mt_bench", {1: ("writing", [QUESTION, FOLLOW_UP]), 2: ("writing", [OTHER, "More."])},
                         {"poet-1b": {1: ["Blocks fall like snow", "Rows glow in a row"]},
                          "verse-3b": {2: ["2, 3, 5", "7"]}})
    import_mtbench(root, contexts=[writing], progress=lambda _: None)
    dave = developer("dave")
    endpoints = {name: register_model(dave, ModelFields(
        name=name, provider="p", endpoint_url="http://127.0.0.1:9/v1", endpoint_model=name,
        contexts=(writing.context_id,))) for name in ("smollm2-135m-instruct", "zeta-70b")}
    RegisteredModel.objects.update(enabled=True, healthy=True)
    Reputation.objects.create(model_id=endpoints["zeta-70b"].model_id, context_id=writing.context_id,
                              ra=7 * 10**17, rh=7 * 10**17, r=7 * 10**17, n_auto=3, n_human=1, block_number=1)
    Reputation.objects.create(model_id=RegisteredModel.objects.get(name="poet-1b").model_id,
                              context_id=writing.context_id, ra=9 * 10**17, rh=9 * 10**17, r=9 * 10**17,
                              n_auto=3, n_human=1, block_number=1)
    return {"writing": writing, "models": {m.name: m for m in RegisteredModel.objects.all()}, "alice": user("alice")}


def asked(world, model: str, prompt: str) -> Interaction:
    conv = start_conversation(world["alice"], world["models"][model], world["writing"])
    return begin_interaction(world["alice"], conv, prompt)


def test_a_replay_model_is_a_reference_only_for_what_it_recorded(world):
    free = asked(world, "smollm2-135m-instruct", "What is a good name for a cat?")
    assert [m.name for m in reference_models(free, 3)] == ["zeta-70b"]  # neither replay model can answer
    recorded = asked(world, "zeta-70b", QUESTION)
    # poet-1b recorded it and has the best R; verse-3b did not record it.
    assert [m.name for m in reference_models(recorded, 3)] == ["poet-1b", "smollm2-135m-instruct"]


@pytest.mark.django_db(transaction=True)  # the answer is saved from other threads, as the socket saves it
def test_a_free_question_to_a_replay_model_fails_and_is_never_evaluated(world):
    interaction = asked(world, "poet-1b", "What is a good name for a cat?")
    error = asyncio.run(answer(interaction, world["models"]["poet-1b"]))
    assert isinstance(error, NoRecordedAnswer) and "answers only its recorded MT-Bench questions" in str(error)
    interaction.refresh_from_db()
    assert interaction.status == "failed" and interaction.answer == ""
    assert not EvaluationJob.objects.filter(interaction=interaction).exists()  # nothing to evaluate or rate
    client = Client()
    client.force_login(world["alice"])
    assert client.post(f"/chat/interactions/{interaction.pk}/rating", {}).status_code == 400


def test_the_default_chat_model_answers_free_prompts_and_a_replay_model_never_is(world):
    choices = chat_choices(world["writing"])
    # Best R first among the models that answer anything; the replay models after, whatever their R.
    assert [m.name for m in choices] == ["zeta-70b", "smollm2-135m-instruct", "poet-1b", "verse-3b"]
    client = Client()
    client.force_login(world["alice"])
    page = client.get(f"/chat/models?context={world['writing'].context_id}").content.decode()
    assert f'<option value="{world["models"]["zeta-70b"].pk}" selected>' in page
    RegisteredModel.objects.exclude(kind="replay").update(enabled=False)
    page = client.get(f"/chat/models?context={world['writing'].context_id}").content.decode()
    assert "pick a model (only replay models run here)" in page and " selected>poet-1b" not in page


def test_a_replay_conversation_offers_its_recorded_questions_not_a_free_prompt(world):
    conv = start_conversation(world["alice"], world["models"]["poet-1b"], world["writing"])
    client = Client()
    client.force_login(world["alice"])
    page = client.get(f"/chat/{conv.pk}/").content.decode()
    assert 'id="replay-questions"' in page and 'id="prompt"' not in page
    assert f'value="{QUESTION}"' in page and OTHER not in page  # its own recording only
    first = begin_interaction(world["alice"], conv, QUESTION)
    finish_interaction(first, "Blocks fall like snow")
    page = client.get(f"/chat/{conv.pk}/").content.decode()
    # The conversation is now titled by its first prompt (the rename form holds it): read the questions' box.
    questions = re.search(r'<section id="replay-questions".*?</section>', page, re.S).group(0)
    assert f'value="{FOLLOW_UP}"' in questions and f'value="{QUESTION}"' not in questions  # then its follow-up


def test_an_answer_no_other_model_answered_has_no_automatic_score(world):
    interaction = asked(world, "smollm2-135m-instruct", "What is a good name for a cat?")
    finish_interaction(interaction, "Whiskers.")
    job = EvaluationJob.objects.get(interaction=interaction)
    job.status, job.references, job.sa, job.wa = "onchain", [
        {"model": "0x" + "ab" * 32, "name": "zeta-70b", "pk": 0, "text": None, "error": "no answer within 60 s"}], "0", "0"
    job.save()
    html = render_to_string("chat/_evaluation.html", {"i": interaction, "job": job})
    assert "so this answer has no automatic score" in html
    assert "1 other model asked, none answered" in html and "answer compared with theirs" not in html
    api = APIClient()
    api.force_authenticate(world["alice"])
    evaluation = api.get(f"/api/interactions/{interaction.pk}").json()["evaluation"]
    assert evaluation["has_reference"] is False and evaluation["sa"] is None and evaluation["wa"] is None
    assert evaluation["note"] == "no automatic score: no other model answered"
    job.references = []  # no other model online to ask: said once, not twice in other words
    html = render_to_string("chat/_evaluation.html", {"i": interaction, "job": job})
    assert "no other model online can answer this question" in html and html.count("no other model") == 1
    job.references = [{"model": "0x" + "ab" * 32, "name": "zeta-70b", "pk": 0, "text": "Mittens.",
                       "score": str(6 * 10**17), "error": ""}]
    job.sa, job.wa = str(6 * 10**17), str(7 * 10**17)
    job.save()
    html = render_to_string("chat/_evaluation.html", {"i": interaction, "job": job})
    assert "no automatic score" not in html and "none answered" not in html
    assert "1 other model asked the same question" in html and "answer compared with theirs" in html
    assert api.get(f"/api/interactions/{interaction.pk}").json()["evaluation"]["sa"] == str(6 * 10**17)
