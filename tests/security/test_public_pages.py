"""Public pages never show what a remote endpoint said nor where it is: a model's errors (its health
checks, its registration on-chain) are for its owner, on the owner's view of the model page."""

from __future__ import annotations

import pytest

from apps.chat.gateway import Endpoint, Gateway
from apps.chat.health import run_checks
from apps.chat.models import RegisteredModel
from apps.chat.registry import ModelFields, register_model
from tests.personas import PASSWORD, developer, outsider

from .conftest import SECRET_BODY

pytestmark = pytest.mark.django_db


@pytest.fixture
def failing_model(settings, tmp_path, hostile):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    model = register_model(developer(), ModelFields(name="leaky", provider="p", endpoint_url=hostile.url(),
                                                    endpoint_model="tiny"))
    hostile.mode = "error"
    assert run_checks()["leaky"] == f"127.0.0.1 answered 500: {SECRET_BODY}"
    return RegisteredModel.objects.get(pk=model.pk)


def test_a_failing_models_page_shows_visitors_neither_its_error_nor_its_address(client, failing_model, hostile):
    outsider()
    for logged_in in (False, True):
        if logged_in:
            assert client.login(username="mallory", password=PASSWORD)
        html = client.get(f"/models/{failing_model.pk}/").content.decode()
        assert "not answering health checks" in html
        assert SECRET_BODY not in html and "hunter2" not in html and str(hostile.port) not in html


def test_its_owner_sees_what_the_endpoint_said(client, failing_model):
    assert client.login(username="dave", password=PASSWORD)
    html = client.get(f"/models/{failing_model.pk}/").content.decode()
    assert "127.0.0.1 answered 500: internal: db password is hunter2" in html


def test_a_model_moved_to_a_refused_address_says_why_to_its_owner_only(client, settings, failing_model, listener):
    RegisteredModel.objects.filter(pk=failing_model.pk).update(endpoint_url=listener.url())
    assert "a loopback address" in run_checks()["leaky"]
    assert "loopback" not in client.get(f"/models/{failing_model.pk}/").content.decode()
    assert client.login(username="dave", password=PASSWORD)
    assert "is a loopback address" in client.get(f"/models/{failing_model.pk}/").content.decode()
    assert listener.connections == []


async def test_what_a_chat_shows_of_a_failed_answer_names_no_host_and_quotes_no_body(hostile):
    hostile.mode = "error"
    with pytest.raises(Exception) as error:
        await Gateway(retries=0).complete(Endpoint(hostile.url(), "tiny"), [])
    assert str(error.value) == "the model's endpoint answered HTTP 500"  # what Interaction.error keeps
    assert SECRET_BODY in error.value.detail
