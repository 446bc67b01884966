"""Prompts checked against the model's context before anything is saved or sent, with a clear count
(the built-in model counted by its own tokenizer through vLLM's /tokenize, other endpoints estimated
against the context length their model card advertises), no silent cut of a long paste, and answers
cut at the token limit marked as such."""

import json
import secrets

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.urls import reverse
from rest_framework.test import APIClient

from apps.chat import conversations
from apps.chat.consumers import ChatConsumer
from apps.chat.conversations import Fit, estimate_tokens, measure_fit, start_conversation
from apps.chat.gateway import Gateway
from apps.chat.models import Interaction, RegisteredModel
from apps.chat.providers import encrypt_api_key
from tests.chat.factories import make_contexts
from tests.personas import PASSWORD, developer, user

LONG_PASTE = "The quick brown fox jumps over the lazy dog near the riverbank. " * 160  # 10,240 characters


def endpoint_model(url: str, model: str, key: str = "") -> RegisteredModel:
    return RegisteredModel.objects.create(
        owner=developer(), name="builtin-under-test", provider="test", endpoint_url=url, endpoint_model=model,
        api_key_encrypted=encrypt_api_key(key) if key else None, model_id="0x" + secrets.token_hex(32),
        metadata_cid="bafytest")


async def open_endpoint_chat():
    """Alice's socket on a fresh conversation with an endpoint model (nothing is asked of it)."""
    writing, = await sync_to_async(make_contexts)("writing")
    model = await sync_to_async(endpoint_model)("http://tiny.example/v1", "tiny")
    alice = await sync_to_async(user)("alice")
    conversation = await sync_to_async(start_conversation)(alice, model, writing)
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), f"/ws/chat/{conversation.pk}/")
    communicator.scope["user"] = alice
    communicator.scope["url_route"] = {"kwargs": {"pk": conversation.pk}}
    assert (await communicator.connect())[0]
    return communicator, conversation


@pytest.fixture
def builtin_chat(model_server, db):
    writing, = make_contexts("writing")
    model = endpoint_model(model_server.url, model_server.model, model_server.api_key)
    alice = user("alice")
    return start_conversation(alice, model, writing), alice


@pytest.mark.slow
def test_the_built_in_server_counts_tokens_as_its_completions_do(model_server):
    headers = {"Authorization": f"Bearer {model_server.api_key}"}
    messages = [{"role": "user", "content": "Name three rivers in Europe."}]
    base = model_server.url.removesuffix("/v1")
    counted = httpx.post(f"{base}/tokenize", json={"model": model_server.model, "messages": messages},
                         headers=headers, timeout=60).json()
    done = httpx.post(f"{model_server.url}/chat/completions", headers=headers, timeout=120, json={
        "model": model_server.model, "messages": messages, "max_tokens": 1}).json()
    assert counted == {"count": done["usage"]["prompt_tokens"], "max_model_len": 2048}
    card = httpx.get(f"{model_server.url}/models/{model_server.model}", headers=headers, timeout=30).json()
    assert card["max_model_len"] == 2048
    bad = httpx.post(f"{base}/tokenize", json={"messages": []}, headers=headers, timeout=30)
    assert bad.status_code == 400 and "non-empty" in bad.json()["error"]["message"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
async def test_a_long_paste_is_refused_with_the_count_and_nothing_is_saved(builtin_chat):
    conversation, alice = builtin_chat
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), f"/ws/chat/{conversation.pk}/")
    communicator.scope["user"] = alice
    communicator.scope["url_route"] = {"kwargs": {"pk": conversation.pk}}
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=json.dumps({"prompt": LONG_PASTE}))
    frame = await communicator.receive_from(timeout=60)
    await communicator.disconnect()
    assert "Too long for builtin-under-test" in frame and "counted with its tokenizer" in frame
    assert "reads at most 2,048" in frame and "Shorten it by about" in frame
    fit = await measure_fit(conversation, LONG_PASTE.strip())  # as sent: stripped
    assert fit.counted and fit.limit == 2048 and not fit.fits and f"{fit.tokens:,} tokens" in frame
    assert 1800 < fit.tokens < 3000  # ~12.5 characters a word, ~1.2 tokens a word for this text
    assert await sync_to_async(Interaction.objects.count)() == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_api_and_the_live_count_say_the_same(builtin_chat, client):
    conversation, alice = builtin_chat
    api = APIClient()
    api.force_authenticate(alice)
    refused = api.post(f"/api/conversations/{conversation.pk}/messages", {"prompt": LONG_PASTE}, format="json")
    assert refused.status_code == 400 and "Too long for builtin-under-test" in refused.json()["prompt"][0]
    assert Interaction.objects.count() == 0
    client.login(username="alice", password=PASSWORD)
    live = client.post(reverse("conversation-count", args=[conversation.pk]), {"prompt": LONG_PASTE})
    assert "too-long" in live.content.decode() and "reads at most 2,048" in live.content.decode()
    short = client.post(reverse("conversation-count", args=[conversation.pk]), {"prompt": "Hello there"})
    assert "of 2,048 tokens (counted with its tokenizer)" in short.content.decode()
    huge = client.post(reverse("conversation-count", args=[conversation.pk]), {"prompt": "x" * 20_001})
    assert "20,001 characters: this site takes at most 20,000" in huge.content.decode()
    too_many = api.post(f"/api/conversations/{conversation.pk}/messages", {"prompt": "x" * 20_001}, format="json")
    assert too_many.status_code == 400 and "20,001 characters" in too_many.json()["prompt"][0]
    assert Interaction.objects.count() == 0


def card_only_endpoint(context_length):
    """An endpoint with no /tokenize whose model card advertises `context_length`."""
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/tokenize"):
            return httpx.Response(404, json={"error": {"message": "no such route"}})
        if request.url.path == "/v1/models/tiny":
            return httpx.Response(200, json={"id": "tiny", "object": "model", "context_length": context_length})
        return httpx.Response(404)
    return Gateway(transport=httpx.MockTransport(handle))


@pytest.mark.django_db
def test_other_endpoints_are_estimated_against_their_advertised_length(settings):
    settings.LLMCHAIN_ANSWER_MAX_TOKENS = 512
    writing, = make_contexts("writing")
    model = endpoint_model("http://tiny.example/v1", "tiny")
    conversation = start_conversation(user("alice"), model, writing)
    fit = async_to_sync(measure_fit)(conversation, "a" * 3000, gateway=card_only_endpoint(4096))
    assert fit == Fit(tokens=estimate_tokens([{"role": "user", "content": "a" * 3000}]), limit=4096, reserve=512,
                      counted=False)
    assert fit.tokens == 1000 + 8 and fit.fits and "(estimated)" in fit.describe("tiny")
    with pytest.raises(conversations.ValidationError) as refused:
        async_to_sync(conversations.check_fits)(conversation, "a" * 12_000,
                                                gateway=card_only_endpoint(4096 + 1))  # another model row: new key
    assert "Too long for" in refused.value.messages[0]
    silent = Gateway(transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    model.updated_at = model.updated_at.replace(year=2001)  # not the cached length of the first calls
    assert async_to_sync(measure_fit)(conversation, "a" * 90_000, gateway=silent) is None  # unknown: not refused


@pytest.mark.django_db(transaction=True)
async def test_an_answer_cut_at_the_token_limit_is_marked(monkeypatch):
    async def capped(model, messages, gateway=None, outcome=None, **params):
        for piece in ["Once ", "upon ", "a "]:
            yield piece
        outcome["finish_reason"] = "length"
    monkeypatch.setattr(conversations, "stream_answer", capped)
    communicator, conversation = await open_endpoint_chat()
    monkeypatch.setattr(conversations, "measure_fit", lambda *a, **k: _none())
    await communicator.send_to(text_data=json.dumps({"prompt": "Tell me a story"}))
    frames = []
    while not any("hx-swap-oob=\"outerHTML:#turn-" in f for f in frames):
        frames.append(await communicator.receive_from(timeout=10))
    await communicator.disconnect()
    done = await sync_to_async(Interaction.objects.get)()
    assert done.status == "done" and done.finish_reason == "length" and done.answer == "Once upon a "
    assert "Cut at the token limit" in frames[-1]


async def _none():
    return None
