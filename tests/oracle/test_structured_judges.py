"""Structured verdicts through the gateway: the probe, remembered per model; an endpoint
that ignores response_format falls back to the strict parser; the built-in model always gives a
verdict with its probabilities."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.urls import reverse

from apps.chat.gateway import Gateway, chat_structured, structured_support
from apps.chat.models import RegisteredModel
from apps.chat.providers import endpoint_of
from apps.chat.registry import ModelFields, register_model
from apps.oracle import debates
from lib import debate as protocol
from tests.openai_endpoint import OpenAIEndpoint
from tests.personas import developer

pytestmark = pytest.mark.django_db(transaction=True)

CASE = protocol.Debate(criterion="helpfulness", criterion_description="", scenario="",
                       question="What is the capital of France?", submission_1="Paris.", submission_2="Lyon.",
                       agents=("a", "b"))


def judge(url: str, model: str, name: str = "judge-7b", api_key: str = "") -> RegisteredModel:
    m = register_model(developer(), ModelFields(name=name, provider="test", endpoint_url=url, endpoint_model=model,
                                                api_key=api_key))
    RegisteredModel.objects.filter(pk=m.pk).update(is_judge=True)
    m.refresh_from_db()
    return m


def schema_requests(endpoint: OpenAIEndpoint) -> int:
    return sum(1 for _, _, body in endpoint.requests if "response_format" in body)


@pytest.fixture
def ipfs(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"


def test_an_endpoint_that_ignores_response_format_is_probed_once_and_read_by_the_strict_parser(ipfs):
    with OpenAIEndpoint(models=("tiny",), answer="Submission 1 says Paris, which is right.\nVerdict: 1") as fake:
        model = judge(fake.url, "tiny")
        gateway = Gateway(retries=0)
        assert model.structured_output is None
        assert async_to_sync(structured_support)(gateway, model, endpoint_of(model)) is False
        assert RegisteredModel.objects.get(pk=model.pk).structured_output is False  # remembered
        model.refresh_from_db()
        assert async_to_sync(structured_support)(gateway, model, endpoint_of(model)) is False
        assert schema_requests(fake) == 1  # probed once, not at every question
        page = Client().get(reverse("model", args=[model.pk])).content.decode()
        assert "does not honour a JSON-schema <code>response_format</code>" in page

        # A judge believed to honour the schema whose reply ignores it: the strict parser reads the reply,
        # and no probability is made up.
        RegisteredModel.objects.filter(pk=model.pk).update(structured_output=True)
        model.refresh_from_db()
        reply = async_to_sync(debates.ask_judge)(gateway, model, protocol.initial_prompt(CASE, swapped=False), 1)
        assert isinstance(reply, protocol.Reply) and reply.probabilities is None
        parsed = protocol.parse_verdict(reply.text)
        assert parsed.verdict == 1 and "Verdict" in parsed.reason
        assert fake.requests[-1][2]["response_format"]["json_schema"]["schema"] == protocol.VERDICT_SCHEMA


def test_an_unreadable_reply_is_recorded_as_unreadable_never_guessed(ipfs):
    with OpenAIEndpoint(models=("tiny",), answer="Both have their merits; it depends on the reader.") as fake:
        model = judge(fake.url, "tiny")
        body = async_to_sync(chat_structured)(Gateway(retries=0), endpoint_of(model), [
            {"role": "user", "content": protocol.initial_prompt(CASE, swapped=True)}], protocol.VERDICT_SCHEMA,
            max_tokens=64)
        text = body["choices"][0]["message"]["content"]
        parsed = protocol.parse_verdict(text)
        assert parsed.verdict is None and parsed.reason
        assert protocol.verdict_probabilities(body["choices"][0].get("logprobs")) is None


@pytest.mark.slow
def test_the_built_in_model_always_gives_a_structured_verdict_with_its_probabilities(ipfs, model_server, settings):
    settings.LLMCHAIN_DEBATE_MAX_TOKENS = 96
    model = judge(model_server.url, model_server.model, "smollm2-judge", model_server.api_key)
    gateway = Gateway(retries=0)
    fits = debates.prompt_fits([model], gateway)
    assert fits is not None and fits(protocol.initial_prompt(CASE, swapped=False))
    assert not fits("word " * 3000)  # beyond the 2,048 tokens of its context
    for swapped in (False, True):
        reply = async_to_sync(debates.ask_judge)(gateway, model, protocol.initial_prompt(CASE, swapped=swapped),
                                                 7 + swapped)
        assert RegisteredModel.objects.get(pk=model.pk).structured_output is True
        assert "its verdicts are constrained" in Client().get(reverse("model", args=[model.pk])).content.decode()
        found = json.loads(reply.text)
        assert list(found) == ["reasoning", "verdict"] and found["verdict"] in (1, 2, 0)
        assert protocol.parse_verdict(reply.text).verdict == found["verdict"]
        assert set(reply.probabilities) == {0, 1, 2} and sum(reply.probabilities.values()) == pytest.approx(1)
        assert 0 < reply.mass <= 1 + 1e-9
