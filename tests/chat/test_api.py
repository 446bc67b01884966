"""The JSON API at /api/: the same rules as the pages, over session or token authentication."""

import json

import httpx
import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from apps.chain.models import LedgerModel, OutboxItem
from apps.chat import api
from apps.chat.gateway import Gateway
from apps.chat.models import Conversation, Interaction, RegisteredModel
from apps.chat.providers import decrypt_api_key
from apps.chat.registry import ModelFields, register_model
from apps.chat.replay import import_mtbench
from apps.oracle.models import EvaluationJob
from tests.openai_endpoint import OpenAIEndpoint
from tests.personas import PASSWORD, developer, outsider, user

from .factories import make_contexts, write_mtbench

pytestmark = pytest.mark.django_db

SECRET = "sk-very-secret-key-0123456789"
QUESTION = "Write a haiku about ledgers."
FOLLOW_UP = "Now make it rhyme."
ANSWER_1 = "Blocks fall like <b>snow</b>"
ANSWER_2 = "Ledgers glow, rows in a row"


@pytest.fixture(autouse=True)
def local_store(settings, tmp_path):
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"


@pytest.fixture
def contexts():
    return make_contexts("writing", "coding")


@pytest.fixture
def dave():
    return developer("dave")


@pytest.fixture
def tiny(dave, contexts):
    """dave's endpoint model, for coding only, with an API key."""
    return register_model(dave, ModelFields(
        name="tiny-7b", provider="Dave's lab", endpoint_url="http://127.0.0.1:9/v1", endpoint_model="tiny",
        api_key=SECRET, parameters="7B", licence="MIT", contexts=(contexts[1].context_id,)))


@pytest.fixture
def replay_model(tmp_path, contexts):
    """poet-1b, a replay model with the recorded answers to one MT-Bench question (writing)."""
    root = write_mtbench(tmp_path / "mt_bench", {1: ("writing", [QUESTION, FOLLOW_UP])},
                         {"poet-1b": {1: [ANSWER_1, ANSWER_2]}})
    import_mtbench(root, contexts=contexts, progress=lambda _: None)
    return RegisteredModel.objects.get(name="poet-1b")


def as_user(person) -> APIClient:
    client = APIClient()
    client.force_authenticate(person)
    return client


def registration(**changes) -> dict:
    body = dict(name="api-7b", provider="Dave's lab", endpoint_url="http://localhost:8100/v1",
                endpoint_model="api", api_key=SECRET, licence="MIT", parameters="7B")
    body.update(changes)
    return body


def counts():
    return RegisteredModel.objects.count(), OutboxItem.objects.filter(function="addModel").count()


# --- Contexts and models ------------------------------------------------------------------------

def test_anyone_lists_contexts_and_models_with_their_chain_identity(tiny, replay_model, contexts):
    client = APIClient()
    assert client.get("/api/contexts").json() == [{"context_id": c.context_id, "name": c.name}
                                                  for c in sorted(contexts, key=lambda c: c.name)]
    listed = {m["name"]: m for m in client.get("/api/models").json()}
    assert set(listed) == {"tiny-7b", "poet-1b"}
    m = listed["tiny-7b"]
    assert m["provider"] == "Dave's lab" and m["kind"] == "openai-chat" and m["parameters"] == "7B"
    assert m["contexts"] == [{"context_id": contexts[1].context_id, "name": "coding"}]
    assert (m["model_id"], m["metadata_cid"]) == (tiny.model_id, tiny.metadata_cid)
    assert m["running"] and m["enabled"] and m["healthy"] and not m["onchain"]
    LedgerModel.objects.create(model_id=tiny.model_id, owner=tiny.owner.profile.address,
                               metadata_cid=tiny.metadata_cid, block_number=7)
    assert client.get(f"/api/models/{tiny.pk}").json()["onchain"] is True
    assert client.get("/api/models/999999").status_code == 404


def test_models_filter_by_context_and_by_running(tiny, replay_model, contexts):
    writing, coding = contexts
    client = APIClient()
    assert [m["name"] for m in client.get(f"/api/models?context={coding.context_id}").json()] == ["tiny-7b"]
    assert [m["name"] for m in client.get(f"/api/models?context={writing.context_id}").json()] == ["poet-1b"]
    RegisteredModel.objects.filter(pk=tiny.pk).update(healthy=False)
    assert [m["name"] for m in client.get("/api/models?running=1").json()] == ["poet-1b"]
    assert client.get(f"/api/models?running=1&context={coding.context_id}").json() == []
    assert len(client.get("/api/models").json()) == 2
    assert client.get("/api/models?context=0xnope").status_code == 400


def test_a_developer_registers_a_model_through_the_api(dave, contexts):
    client = as_user(dave)
    with OpenAIEndpoint(models=("api",), api_key=SECRET) as endpoint:  # tested before it is saved
        response = client.post("/api/models", registration(contexts=[contexts[0].context_id],
                                                           endpoint_url=endpoint.url), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    model = RegisteredModel.objects.get(name="api-7b")
    assert body["id"] == model.pk and body["model_id"] == model.model_id
    assert body["contexts"] == [{"context_id": contexts[0].context_id, "name": "writing"}]
    assert OutboxItem.objects.get(key=f"addModel:{model.model_id}").sender_address == dave.profile.address
    assert decrypt_api_key(model.api_key_encrypted) == SECRET


@pytest.mark.parametrize("changes, field", [
    ({"endpoint_url": "ftp://example.org/v1"}, "endpoint_url"),
    ({"name": "<script>"}, "name"),
    ({"provider": " "}, "provider"),
    ({"endpoint_model": ""}, "endpoint_model"),
    ({"contexts": ["0x" + "99" * 32]}, "contexts"),
    ({"kind": "telepathy"}, "kind"),
])
def test_a_bad_registration_gets_field_errors_and_changes_nothing(dave, changes, field):
    before = counts()
    response = as_user(dave).post("/api/models", registration(**changes), format="json")
    assert response.status_code == 400
    assert field in response.json() and isinstance(response.json()[field], list)
    assert counts() == before


def test_the_domain_s_messages_come_back_as_they_are(dave, tiny):
    response = as_user(dave).post("/api/models", registration(name="TINY-7B"), format="json")
    assert response.status_code == 400
    assert response.json() == {"name": ["A model named 'TINY-7B' is already registered."]}


def test_only_developers_register_models(contexts):
    before = counts()
    response = as_user(outsider()).post("/api/models", registration(), format="json")
    assert response.status_code == 403
    assert "developer role" in response.json()["detail"]
    assert APIClient().post("/api/models", registration(), format="json").status_code == 401
    assert counts() == before


def test_only_the_owner_takes_a_model_offline_and_back(dave, tiny):
    mallory = as_user(outsider())
    response = mallory.patch(f"/api/models/{tiny.pk}", {"enabled": False}, format="json")
    assert response.status_code == 403 and "owner" in response.json()["detail"]
    assert APIClient().patch(f"/api/models/{tiny.pk}", {"enabled": False}, format="json").status_code == 401
    tiny.refresh_from_db()
    assert tiny.enabled
    owner = as_user(dave)
    response = owner.patch(f"/api/models/{tiny.pk}", {"enabled": False}, format="json")
    assert response.status_code == 200 and response.json()["enabled"] is False and response.json()["running"] is False
    tiny.refresh_from_db()
    assert not tiny.running
    assert owner.patch(f"/api/models/{tiny.pk}", {"enabled": True}, format="json").json()["running"] is True
    assert owner.patch(f"/api/models/{tiny.pk}", {}, format="json").status_code == 400


# --- Conversations -----------------------------------------------------------------------------

def test_a_message_to_a_replay_model_returns_its_recorded_answer_and_queues_the_evaluation(replay_model, contexts):
    client = as_user(user("alice"))
    started = client.post("/api/conversations", {"model": replay_model.pk, "context": contexts[0].context_id},
                          format="json")
    assert started.status_code == 201, started.content
    conv = started.json()["id"]
    assert started.json()["interactions"] == [] and started.json()["model_name"] == "poet-1b"
    first = client.post(f"/api/conversations/{conv}/messages", {"prompt": QUESTION}, format="json")
    assert first.status_code == 201, first.content
    body = first.json()
    assert body["answer"] == ANSWER_1 and body["status"] == "done" and body["prompt"] == QUESTION
    assert body["evaluation"] == {"status": "queued", "has_reference": None, "sa": "", "wa": "", "note": None,
                                  "evidence_cid": ""}
    interaction = Interaction.objects.get(pk=body["id"])
    assert body["interaction_id"] == interaction.interaction_id
    assert EvaluationJob.objects.filter(interaction=interaction).exists()
    # The follow-up is answered with the recorded second turn: the conversation is the history.
    second = client.post(f"/api/conversations/{conv}/messages", {"prompt": FOLLOW_UP}, format="json").json()
    assert second["answer"] == ANSWER_2
    detail = client.get(f"/api/conversations/{conv}").json()
    assert [i["answer"] for i in detail["interactions"]] == [ANSWER_1, ANSWER_2]
    reference = {"model": "0x" + "ab" * 32, "name": "ref-7b", "pk": 0, "text": "A reference.", "error": ""}
    EvaluationJob.objects.filter(interaction=interaction).update(status="pinned", sa="8" + "0" * 17,
                                                                 wa="5" + "0" * 17, evidence_cid="bafyfake",
                                                                 references=[reference])
    shown = client.get(f"/api/interactions/{interaction.pk}").json()
    assert shown["evaluation"] == {"status": "pinned", "has_reference": True, "sa": "8" + "0" * 17,
                                   "wa": "5" + "0" * 17, "note": None, "evidence_cid": "bafyfake"}
    assert [c["id"] for c in client.get("/api/conversations").json()] == [conv]


def test_bad_conversations_and_empty_prompts_are_refused(replay_model, tiny, contexts):
    client = as_user(user("alice"))
    writing = contexts[0].context_id
    assert "model" in client.post("/api/conversations", {"model": 999999, "context": writing}, format="json").json()
    # tiny serves coding only: not running for writing, says the domain.
    refused = client.post("/api/conversations", {"model": tiny.pk, "context": writing}, format="json")
    assert refused.status_code == 400 and "not running" in refused.json()["model"][0]
    conv = client.post("/api/conversations", {"model": replay_model.pk, "context": writing}, format="json").json()
    empty = client.post(f"/api/conversations/{conv['id']}/messages", {"prompt": "  "}, format="json")
    assert empty.status_code == 400 and empty.json() == {"prompt": ["Write a message first."]}
    assert not Interaction.objects.exists()
    assert APIClient().post("/api/conversations", {"model": replay_model.pk, "context": writing},
                            format="json").status_code == 401


def test_users_never_see_each_other_s_conversations(replay_model, contexts):
    alice = as_user(user("alice"))
    conv = alice.post("/api/conversations", {"model": replay_model.pk, "context": contexts[0].context_id},
                      format="json").json()["id"]
    interaction = alice.post(f"/api/conversations/{conv}/messages", {"prompt": QUESTION}, format="json").json()["id"]
    mallory = as_user(outsider())
    assert mallory.get("/api/conversations").json() == []
    assert mallory.get(f"/api/conversations/{conv}").status_code == 404
    assert mallory.post(f"/api/conversations/{conv}/messages", {"prompt": QUESTION}, format="json").status_code == 404
    assert mallory.get(f"/api/interactions/{interaction}").status_code == 404
    assert Interaction.objects.count() == 1
    anonymous = APIClient()
    assert anonymous.get("/api/conversations").status_code == 401
    assert anonymous.get(f"/api/interactions/{interaction}").status_code == 401


def sse(*pieces: str) -> bytes:
    events = [f"data: {json.dumps({'choices': [{'delta': {'content': p}}]})}\n\n" for p in pieces]
    return "".join(events + ["data: [DONE]\n\n"]).encode()


def test_an_endpoint_model_answers_through_the_gateway_with_its_key(monkeypatch, tiny, contexts):
    seen = {}

    def endpoint(request: httpx.Request) -> httpx.Response:
        seen["auth"], seen["body"] = request.headers.get("authorization"), json.loads(request.content)
        return httpx.Response(200, content=sse("Hello", ", ", "world"), headers={"content-type": "text/event-stream"})

    monkeypatch.setattr(api.ConversationMessages, "gateway",
                        lambda self: Gateway(retries=0, transport=httpx.MockTransport(endpoint)))
    client = as_user(user("alice"))
    conv = client.post("/api/conversations", {"model": tiny.pk, "context": contexts[1].context_id},
                       format="json").json()["id"]
    response = client.post(f"/api/conversations/{conv}/messages", {"prompt": "Say hello"}, format="json")
    assert response.status_code == 201 and response.json()["answer"] == "Hello, world"
    assert seen["auth"] == f"Bearer {SECRET}" and seen["body"]["model"] == "tiny"
    assert SECRET not in response.content.decode()


def test_an_endpoint_failure_is_a_502_and_the_turn_is_saved_failed_and_unevaluated(monkeypatch, tiny, contexts):
    monkeypatch.setattr(api.ConversationMessages, "gateway", lambda self: Gateway(
        retries=0, transport=httpx.MockTransport(lambda request: httpx.Response(503, json={"error": "overloaded"}))))
    client = as_user(user("alice"))
    conv = client.post("/api/conversations", {"model": tiny.pk, "context": contexts[1].context_id},
                       format="json").json()["id"]
    response = client.post(f"/api/conversations/{conv}/messages", {"prompt": "Say hello"}, format="json")
    assert response.status_code == 502
    assert "503" in response.json()["detail"] and response.json()["interaction"]["status"] == "failed"
    interaction = Interaction.objects.get(conversation_id=conv)
    # what the endpoint said is for its owner (the model page), not for whoever chats with it
    assert interaction.status == "failed" and interaction.error == (
        "tiny-7b could not answer just now (the model's endpoint answered HTTP 503). This is usually brief: "
        "try again in a moment.")
    assert "overloaded" not in response.content.decode()
    assert not EvaluationJob.objects.exists()
    # The conversation is not left blocked behind an unfinished turn.
    monkeypatch.setattr(api.ConversationMessages, "gateway", lambda self: Gateway(
        retries=0, transport=httpx.MockTransport(lambda request: httpx.Response(200, content=sse("ok")))))
    assert client.post(f"/api/conversations/{conv}/messages", {"prompt": "Again"}, format="json").status_code == 201


# --- Authentication ----------------------------------------------------------------------------

def test_a_token_from_username_and_password_authenticates_and_a_bad_one_is_401():
    alice = user("alice")
    assert APIClient().post("/api/token", {"username": "alice", "password": "wrong"}).status_code == 400
    key = APIClient().post("/api/token", {"username": "alice", "password": PASSWORD}).json()["token"]
    assert key == Token.objects.get(user=alice).key
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/conversations").status_code == 200
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    refused = client.get("/api/conversations")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Token"
    assert client.get("/api/models").status_code == 401  # a bad credential is refused even where reads are public


def test_a_token_made_with_the_management_command_works():
    user("alice")
    call_command("drf_create_token", "alice")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user__username='alice').key}")
    assert client.get("/api/conversations").status_code == 200


def test_session_clients_post_with_their_csrf_token(dave):
    client = APIClient(enforce_csrf_checks=True)
    client.login(username="dave", password=PASSWORD)
    assert client.get("/api/conversations").status_code == 200
    refused = client.post("/api/models", registration(), format="json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]


# --- Secrets and schema ------------------------------------------------------------------------

def test_api_keys_never_appear_in_any_response(dave, replay_model, contexts):
    client = as_user(dave)
    with OpenAIEndpoint(models=("api",), api_key=SECRET) as endpoint:
        created = client.post("/api/models", registration(endpoint_url=endpoint.url), format="json")
        refused = client.post("/api/models", registration(name="api-8b", endpoint_url=endpoint.url,
                                                          api_key=SECRET + "x"), format="json")
    assert refused.status_code == 400 and "refused the API key" in refused.json()["endpoint"][0]
    assert SECRET not in refused.content.decode()
    pk = created.json()["id"]
    conv = client.post("/api/conversations", {"model": replay_model.pk, "context": contexts[0].context_id},
                       format="json").json()["id"]
    interaction = client.post(f"/api/conversations/{conv}/messages", {"prompt": QUESTION}, format="json").json()["id"]
    responses = [created, client.patch(f"/api/models/{pk}", {"enabled": False}, format="json"),
                 client.get("/api/models"), client.get(f"/api/models/{pk}"), APIClient().get("/api/models"),
                 client.get("/api/conversations"), client.get(f"/api/conversations/{conv}"),
                 client.get(f"/api/interactions/{interaction}")]
    for response in responses:
        assert response.status_code in (200, 201)
        text = response.content.decode()
        assert SECRET not in text
        assert "api_key_encrypted" not in text and "endpoint_url" not in text
    assert SECRET not in APIClient().get("/api/schema").content.decode()
    for model in created.json(), client.get(f"/api/models/{pk}").json():
        assert "api_key" not in model and "endpoint_model" not in model


def test_the_schema_validates_and_the_docs_are_served_without_a_cdn(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    schema = APIClient().get("/api/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert {"/api/models", "/api/models/{id}", "/api/conversations", "/api/conversations/{id}/messages",
            "/api/interactions/{id}", "/api/contexts", "/api/token"} <= set(schema["paths"])
    docs = APIClient().get("/api/docs")
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "jsdelivr" not in page and 'src="http' not in page and 'href="http' not in page
    assert Conversation.objects.count() == 0
