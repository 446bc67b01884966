"""A judge's non-streamed reply (a constrained verdict, a G-Eval form) comes in one piece only when it
is whole, so it is given LLMCHAIN_DEBATE_TIMEOUT_S, not the gateway's 60 s read timeout between
streamed pieces. The judge's endpoint is a fake at the gateway's transport."""

from __future__ import annotations

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
    GatewayTransport(judge, recording(seen)).complete([{"role": "user", "content": "Score it."}], max_tokens=5)
    assert seen == [300]
