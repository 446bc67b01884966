"""Developers register models: the endpoint tested first, metadata on IPFS, addModel queued from
their own address."""

import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.utils.html import escape

from apps.chain.evidence import default_store
from apps.chain.models import OutboxItem
from apps.chat.models import RegisteredModel
from apps.chat.providers import decrypt_api_key
from apps.chat.registry import EndpointTestFailed, ModelFields, check_endpoint, register_model
from lib import records
from lib.cid import parse
from tests.openai_endpoint import OpenAIEndpoint, dead_url
from tests.personas import developer, outsider

from .factories import make_contexts

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def local_store(settings, tmp_path):
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"


@pytest.fixture
def endpoint():
    """dave's model "tiny" behind the API key sk-secret, on 127.0.0.1."""
    with OpenAIEndpoint(models=("tiny",), api_key="sk-secret") as e:
        yield e


def fields(**changes):
    base = dict(name="tiny-7b", provider="Dave's lab", endpoint_url="http://127.0.0.1:9000/v1",
                endpoint_model="tiny", api_key="sk-secret", parameters="7B", licence="MIT",
                description="A <b>tiny</b> model")
    base.update(changes)
    return ModelFields(**base)


def test_a_developer_registers_a_model_with_metadata_on_ipfs_and_addmodel_queued():
    dave = developer()
    coding, = make_contexts("coding")
    model = register_model(dave, fields(contexts=(coding.context_id,)))
    meta = records.parse(default_store().get(model.metadata_cid))
    assert meta["name"] == "tiny-7b" and meta["owner"] == dave.profile.address
    assert meta["contexts"] == ["coding"] and meta["endpoint_kind"] == "openai-chat"
    assert "sk-secret" not in str(meta)
    assert model.model_id == "0x" + parse(model.metadata_cid).raw_digest.hex()
    item = OutboxItem.objects.get(key=f"addModel:{model.model_id}")
    assert item.sender_address == dave.profile.address
    assert item.payload == {"modelId": model.model_id, "metadataCid": model.metadata_cid}


def test_the_api_key_is_stored_encrypted():
    model = register_model(developer(), fields())
    stored = bytes(RegisteredModel.objects.get(pk=model.pk).api_key_encrypted)
    assert b"sk-secret" not in stored
    assert decrypt_api_key(stored) == "sk-secret"


@pytest.mark.parametrize("changes, field", [
    ({"endpoint_url": "ftp://example.org/v1"}, "endpoint_url"),
    ({"endpoint_url": "not a url"}, "endpoint_url"),
    ({"endpoint_url": "http://user:pw@example.org/v1"}, "endpoint_url"),
    ({"endpoint_url": "http://example.org:99999/v1"}, "endpoint_url"),
    ({"name": ""}, "name"),
    ({"name": "<script>"}, "name"),
    ({"provider": " "}, "provider"),
    ({"endpoint_model": ""}, "endpoint_model"),
    ({"contexts": ("0x" + "99" * 32,)}, "contexts"),
])
def test_bad_registrations_get_a_clear_error_and_change_nothing(changes, field):
    dave = developer()
    before = (RegisteredModel.objects.count(), OutboxItem.objects.filter(function="addModel").count())
    with pytest.raises(ValidationError) as err:
        register_model(dave, fields(**changes))
    assert field in err.value.message_dict
    assert (RegisteredModel.objects.count(), OutboxItem.objects.filter(function="addModel").count()) == before


def test_a_duplicate_name_is_refused_whatever_its_case():
    dave = developer()
    register_model(dave, fields())
    with pytest.raises(ValidationError, match="already registered"):
        register_model(dave, fields(name="TINY-7B", endpoint_model="other"))
    assert RegisteredModel.objects.count() == 1


def test_a_user_without_the_developer_role_cannot_register():
    with pytest.raises(PermissionError, match="developer role"):
        register_model(outsider(), fields())
    assert not RegisteredModel.objects.exists()
    assert not OutboxItem.objects.filter(function="addModel").exists()


def test_the_registration_page_shows_errors_and_refuses_non_developers(client, endpoint):
    mallory = outsider()
    client.force_login(mallory)
    assert client.get("/models/new").status_code == 403
    assert client.post("/models/new", {"name": "x"}).status_code == 403
    dave = developer()
    client.force_login(dave)
    page = client.post("/models/new", {"name": "m1", "provider": "p", "endpoint_url": "bad", "endpoint_model": "m"})
    assert page.status_code == 400 and "base URL" in page.content.decode()
    ok = client.post("/models/new", {"name": "m1", "provider": "p", "endpoint_url": endpoint.url,
                                     "endpoint_model": "tiny", "api_key": "sk-secret"})
    assert ok.status_code == 302
    model = RegisteredModel.objects.get(name="m1")
    page = client.get(ok["Location"]).content.decode()
    assert model.metadata_cid in page and "registration on its way to the chain" in page


def test_an_owner_takes_a_model_offline_and_back_and_nobody_else_can(client):
    dave = developer()
    model = register_model(dave, fields())
    client.force_login(outsider())
    assert client.post(f"/models/{model.pk}/enabled", {"enabled": "0"}).status_code == 403
    client.force_login(dave)
    client.post(f"/models/{model.pk}/enabled", {"enabled": "0"})
    model.refresh_from_db()
    assert not model.enabled and not model.running
    client.post(f"/models/{model.pk}/enabled", {"enabled": "1"})
    model.refresh_from_db()
    assert model.running


def test_an_owner_publishes_edited_metadata_under_a_new_cid_and_the_same_id(client):
    from apps.chat.registry import update_model
    dave = developer()
    model = register_model(dave, fields())
    first_cid, model_id = model.metadata_cid, model.model_id
    updated = update_model(dave, model, fields(description="Now with <i>more</i> tokens", api_key=""))
    assert updated.model_id == model_id and updated.metadata_cid != first_cid
    assert records.parse(default_store().get(updated.metadata_cid))["description"] == "Now with <i>more</i> tokens"
    item = OutboxItem.objects.get(function="updateModelMetadata")
    assert item.payload == {"modelId": model_id, "metadataCid": updated.metadata_cid}
    assert item.depends_on.key == f"addModel:{model_id}"  # lands after the model exists on-chain
    assert decrypt_api_key(bytes(RegisteredModel.objects.get(pk=model.pk).api_key_encrypted)) == "sk-secret"
    again = update_model(dave, updated, fields(description="Now with <i>more</i> tokens", api_key=""))
    assert again.metadata_cid == updated.metadata_cid
    assert OutboxItem.objects.filter(function="updateModelMetadata").count() == 1  # nothing new to publish
    back = update_model(dave, again, fields(api_key=""))  # back to the first text: a third revision
    assert back.metadata_cid == first_cid and back.metadata_revision == 2
    assert OutboxItem.objects.filter(function="updateModelMetadata").count() == 2


def test_only_the_owner_can_edit_and_bad_edits_change_nothing(client, endpoint):
    from apps.chat.registry import update_model
    dave = developer()
    model = register_model(dave, fields())
    eve = developer("eve")
    with pytest.raises(PermissionError, match="owner"):
        update_model(eve, model, fields(description="hijacked"))
    with pytest.raises(ValidationError):
        update_model(dave, model, fields(endpoint_url="nope"))
    model.refresh_from_db()
    assert model.description == "A <b>tiny</b> model" and not OutboxItem.objects.filter(function="updateModelMetadata").exists()
    client.force_login(eve)
    assert client.get(f"/models/{model.pk}/edit").status_code == 403
    client.force_login(dave)
    page = client.post(f"/models/{model.pk}/edit", {"name": "tiny-7b", "provider": "Dave's lab",
                                                    "endpoint_url": endpoint.url, "endpoint_model": "tiny",
                                                    "description": "edited"})
    assert page.status_code == 302
    model.refresh_from_db()
    assert model.description == "edited" and model.metadata_revision == 1


# --- Registration tests the endpoint first -------------------------------------------------------

def saved_anything() -> tuple:
    """Everything a registration writes: models, outbox rows (addModel or any other), IPFS blobs."""
    return (RegisteredModel.objects.count(), OutboxItem.objects.count(),
            sorted(p.name for p in Path(django_settings.LLMCHAIN_IPFS_DIR).rglob("*")))


def form(url: str, **changes) -> dict:
    base = {"name": "tiny-7b", "provider": "Dave's lab", "endpoint_url": url, "endpoint_model": "tiny",
            "api_key": "sk-secret", "parameters": "7B", "action": "save"}
    base.update(changes)
    return base


def test_a_registration_against_a_dead_port_is_refused_with_the_reason_and_saves_and_queues_nothing(client):
    dave = developer()
    client.force_login(dave)
    before = saved_anything()
    url = dead_url()
    page = client.post("/models/new", form(url))
    assert page.status_code == 400
    errors = page.context["errors"]["endpoint"]
    assert errors == [f"Nothing was saved: {url} cannot be reached: connection refused."]
    assert escape(errors[0]) in page.content.decode()
    assert saved_anything() == before
    with pytest.raises(EndpointTestFailed, match="cannot be reached: connection refused"):
        check_endpoint(dave, fields(endpoint_url=url))


def test_a_wrong_api_key_is_refused_with_the_endpoint_s_own_answer_and_saves_nothing(client, endpoint):
    client.force_login(developer())
    before = saved_anything()
    page = client.post("/models/new", form(endpoint.url, api_key="sk-wrong"))
    assert page.status_code == 400
    assert page.context["errors"]["endpoint"] == [
        "Nothing was saved: the endpoint refused the API key: 127.0.0.1 answered 401: Incorrect API key provided."]
    assert saved_anything() == before


def test_a_model_the_endpoint_does_not_list_is_refused_with_what_it_lists(client, endpoint):
    client.force_login(developer())
    page = client.post("/models/new", form(endpoint.url, endpoint_model="huge"))
    assert page.status_code == 400
    assert page.context["errors"]["endpoint"] == ["Nothing was saved: the endpoint does not list 'huge'; it lists 'tiny'."]
    test = page.context["test"]  # what passed before it stopped is shown too
    assert test.passed == (f"{endpoint.url}/models lists 1 model(s)",) and not test.ok
    assert not RegisteredModel.objects.exists()


def test_a_good_endpoint_passes_every_step_and_the_page_says_so_after_saving(client, endpoint):
    client.force_login(developer())
    page = client.post("/models/new", form(endpoint.url), follow=True)
    model = RegisteredModel.objects.get(name="tiny-7b")
    assert page.redirect_chain == [(f"/models/{model.pk}/", 302)]
    shown = [str(m) for m in page.context["messages"]]
    assert shown == [f"tiny-7b is registered; it will be recorded on the chain in a moment. The endpoint test passed: "
                     f"{endpoint.url}/models lists 1 model(s); it lists 'tiny'; it accepted the API key; "
                     "it answered a one-token completion ('OK')."]
    assert escape(shown[0]) in page.content.decode()
    assert OutboxItem.objects.filter(key=f"addModel:{model.model_id}").exists()
    completion = [body for method, path, body in endpoint.requests if path == "/v1/chat/completions"]
    assert completion == [{"model": "tiny", "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1,
                           "temperature": 0, "stream": False}]
    assert "is registered" not in client.get(f"/models/{model.pk}/").content.decode()  # said once


def test_only_testing_the_endpoint_shows_the_result_and_saves_nothing(client, endpoint):
    client.force_login(developer())
    before = saved_anything()
    page = client.post("/models/new", form(endpoint.url, action="test"))
    assert page.status_code == 200
    body = page.content.decode()
    assert "✓ it accepted the API key" in body and "Nothing is saved until you press" in body
    assert page.context["values"]["name"] == "tiny-7b"
    assert saved_anything() == before


def test_ticked_contexts_survive_an_error_and_each_checkbox_sits_in_its_label(client):
    coding, writing, maths = make_contexts("coding", "writing", "maths")
    client.force_login(developer())
    page = client.post("/models/new", form(dead_url(), contexts=[coding.context_id, maths.context_id]))
    assert page.status_code == 400
    boxes = re.findall(r'<label class="inline"><input type="checkbox" name="contexts" value="(0x[0-9a-f]+)"( checked)?> '
                       r'(\w+)</label>', page.content.decode())
    assert boxes == [(coding.context_id, " checked", "coding"), (maths.context_id, " checked", "maths"),
                     (writing.context_id, "", "writing")]


def test_an_edit_tests_the_endpoint_with_the_stored_key_and_a_failing_edit_changes_nothing(client, endpoint):
    dave = developer()
    model = register_model(dave, fields(endpoint_url=endpoint.url))
    client.force_login(dave)
    page = client.post(f"/models/{model.pk}/edit", form(endpoint.url, api_key="", description="edited"), follow=True)
    assert [str(m) for m in page.context["messages"]][0].startswith("tiny-7b is saved. The endpoint test passed:")
    moved = client.post(f"/models/{model.pk}/edit", form(dead_url(), api_key="", description="moved"))
    assert moved.status_code == 400 and "connection refused" in moved.context["errors"]["endpoint"][0]
    model.refresh_from_db()
    assert model.description == "edited" and model.endpoint_url == endpoint.url
    assert OutboxItem.objects.filter(function="updateModelMetadata").count() == 1


def test_the_api_refuses_a_dead_endpoint_with_the_reason_and_saves_nothing():
    from rest_framework.test import APIClient
    api = APIClient()
    api.force_authenticate(developer())
    before = saved_anything()
    url = dead_url()
    response = api.post("/api/models", {k: v for k, v in form(url).items() if k != "action"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"endpoint": [f"Nothing was saved: {url} cannot be reached: connection refused."]}
    assert saved_anything() == before


def test_the_built_in_model_and_replay_models_register_without_an_endpoint_test(settings, tmp_path):
    """`manage.py up` registers the built-in model before its server answers; replay models have no endpoint."""
    from apps.chat.builtin import ensure_builtin_model
    from apps.chat.replay import import_mtbench

    from .factories import write_mtbench
    settings.LLMCHAIN_BUILTIN_MODEL_URL = dead_url()
    assert ensure_builtin_model().endpoint_url == settings.LLMCHAIN_BUILTIN_MODEL_URL
    writing, = make_contexts("writing")
    root = write_mtbench(tmp_path / "mt_bench", {1: ("writing", ["Q1", "Q2"])}, {"poet-1b": {1: ["A1", "A2"]}})
    assert import_mtbench(root, contexts=[writing], progress=lambda _: None)["models"] == 1
    replay = RegisteredModel.objects.get(name="poet-1b")
    assert check_endpoint(replay.owner, fields(name="poet-1b"), instance=replay).passed == ()  # nothing to try


@pytest.mark.slow
def test_the_built_in_model_server_passes_with_its_key_and_refuses_a_wrong_one(model_server):
    dave = developer()
    before = saved_anything()
    good = check_endpoint(dave, fields(endpoint_url=model_server.url, endpoint_model=model_server.model,
                                       api_key=model_server.api_key))
    assert good.ok and good.passed[2:] == ("it accepted the API key", good.passed[3])
    assert good.passed[3].startswith("it answered a one-token completion (")
    with pytest.raises(EndpointTestFailed) as refused:
        check_endpoint(dave, fields(endpoint_url=model_server.url, endpoint_model=model_server.model,
                                    api_key="sk-wrong"))
    assert refused.value.message_dict == {"endpoint": [
        "Nothing was saved: the endpoint refused the API key: 127.0.0.1 answered 401: Incorrect or missing API key."]}
    assert saved_anything() == before
