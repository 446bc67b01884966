"""Developers register models: metadata on IPFS, addModel queued from their own address."""

import pytest
from django.core.exceptions import ValidationError

from apps.chain.evidence import default_store
from apps.chain.models import OutboxItem
from apps.chat.models import RegisteredModel
from apps.chat.providers import decrypt_api_key
from apps.chat.registry import ModelFields, register_model
from lib import records
from lib.cid import parse
from tests.personas import developer, outsider

from .factories import make_contexts

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def local_store(settings, tmp_path):
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"


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


def test_the_registration_page_shows_errors_and_refuses_non_developers(client):
    mallory = outsider()
    client.force_login(mallory)
    assert client.get("/models/new").status_code == 403
    assert client.post("/models/new", {"name": "x"}).status_code == 403
    dave = developer()
    client.force_login(dave)
    page = client.post("/models/new", {"name": "m1", "provider": "p", "endpoint_url": "bad", "endpoint_model": "m"})
    assert page.status_code == 400 and "base URL" in page.content.decode()
    ok = client.post("/models/new", {"name": "m1", "provider": "p", "endpoint_url": "http://localhost:8100/v1",
                                     "endpoint_model": "m"})
    assert ok.status_code == 302
    model = RegisteredModel.objects.get(name="m1")
    page = client.get(ok["Location"]).content.decode()
    assert model.metadata_cid in page and "addModel pending" in page


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


def test_only_the_owner_can_edit_and_bad_edits_change_nothing(client):
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
                                                    "endpoint_url": "http://127.0.0.1:9000/v1", "endpoint_model": "tiny",
                                                    "description": "edited"})
    assert page.status_code == 302
    model.refresh_from_db()
    assert model.description == "edited" and model.metadata_revision == 1
