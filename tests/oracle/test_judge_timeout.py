"""A judge's non-streamed reply (a constrained verdict, a G-Eval form) comes in one piece only when it
is whole, so it is given LLMCHAIN_DEBATE_TIMEOUT_S, not the gateway's 60 s read timeout between
streamed pieces. The judge's endpoint is a fake at the gateway's transport."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
import pytest
from asgiref.sync import async_to_sync

from apps.chat.gateway import Gateway
from apps.chat.models import RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.oracle.debates import ask_judge
from apps.oracle.geval import GatewayTransport
from tests.personas import developer

pytestmark = pytest.mark.django_db


@pytest.fixture
def judge(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    m = register_model(developer(), ModelFields(name="slow-judge", provider="test", endpoint_url="http://judge.test/v1",
                                                endpoint_model="m"))
    RegisteredModel.objects.filter(pk=m.pk).update(is_judge=True, structured_output=True)
    m.refresh_from_db()
    return m


def recording(seen: list):
    def handler(request):
        seen.append(request.extensions["timeout"]["read"])
        return httpx.Response(200, json={"choices": [{"message": {"content": '{"verdict": "1"}'}}]})

    return Gateway(transport=httpx.MockTransport(handler), backoff=0)


def test_a_debate_judges_constrained_verdict_may_take_the_debate_timeout(judge, settings):
    settings.LLMCHAIN_DEBATE_TIMEOUT_S = 420
    seen = []
    async_to_sync(ask_judge)(recording(seen), judge, "Which is better?", seed=1)
    assert seen == [420]


def test_a_g_eval_judges_form_may_take_the_debate_timeout(judge, settings):
    settings.LLMCHAIN_DEBATE_TIMEOUT_S = 300
    seen = []
    GatewayTransport(judge, recording(seen)).complete([{"role": "user", "content": "Score it."}], max_tokens=5,
                                                      logprobs=True, top_logprobs=5)
    assert seen == [300]


def test_debates_judged_by_the_built_in_model_go_one_pair_at_a_time(judge, settings):
    """The built-in server computes one forward pass at a time: two pairs debated at once would only
    make each reply take twice as long and run into the per-reply limit. Other judges still share out."""
    from apps.oracle.debates import DebateEvaluator

    builtin = register_model(developer("bea"), ModelFields(name="built-in", provider="test", endpoint_url=
                                                      settings.LLMCHAIN_BUILTIN_MODEL_URL + "/", endpoint_model="m"))
    RegisteredModel.objects.filter(pk=builtin.pk).update(is_judge=True)
    builtin.refresh_from_db()
    assert DebateEvaluator(judges=[builtin, builtin], gateway=recording([]), workers=2).workers == 1
    assert DebateEvaluator(judges=[judge, builtin], gateway=recording([]), workers=2).workers == 1
    assert DebateEvaluator(judges=[judge, judge], gateway=recording([]), workers=2).workers == 2


def test_the_built_in_judge_writes_a_bounded_reply(judge, settings):
    """The built-in model's reply budget is what it can write within the per-reply limit on a busy CPU;
    another judge keeps LLMCHAIN_DEBATE_MAX_TOKENS."""
    settings.LLMCHAIN_DEBATE_MAX_TOKENS, settings.LLMCHAIN_BUILTIN_JUDGE_MAX_TOKENS = 320, 96
    builtin = register_model(developer("bea"), ModelFields(name="built-in", provider="test", endpoint_url=
                                                           settings.LLMCHAIN_BUILTIN_MODEL_URL, endpoint_model="m"))
    RegisteredModel.objects.filter(pk=builtin.pk).update(is_judge=True, structured_output=True)
    builtin.refresh_from_db()
    asked = []

    def handler(request):
        asked.append((request.url.host, json.loads(request.content)["max_tokens"]))
        return httpx.Response(200, json={"choices": [{"message": {"content": '{"reasoning": "", "verdict": 1}'}}]})

    gateway = Gateway(transport=httpx.MockTransport(handler), backoff=0)
    async_to_sync(ask_judge)(gateway, builtin, "Which is better?", seed=1)
    async_to_sync(ask_judge)(gateway, judge, "Which is better?", seed=1)
    assert asked == [(urlsplit(settings.LLMCHAIN_BUILTIN_MODEL_URL).hostname, 96), ("judge.test", 320)]


def test_g_evals_evaluation_steps_are_streamed(judge):
    """The steps are plain text of a few hundred tokens: streamed, a slow judge is waited for piece by
    piece (the gateway's read timeout between pieces) instead of being cut off as a whole."""
    seen = []

    def handler(request):
        seen.append(json.loads(request.content)["stream"])
        events = [{"choices": [{"delta": {"content": piece}}]} for piece in ("1. Read it.", "\n2. Score it.")]
        return httpx.Response(200, content="".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n")

    reply = GatewayTransport(judge, Gateway(transport=httpx.MockTransport(handler), backoff=0)).complete(
        [{"role": "user", "content": "Write the steps."}], temperature=0, max_tokens=256, seed=0)
    assert seen == [True]
    assert reply["choices"][0]["message"]["content"] == "1. Read it.\n2. Score it."
