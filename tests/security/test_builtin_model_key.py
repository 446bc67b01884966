"""The built-in model's API key: the server requires it when one is configured, and the site sends
the key it is configured with (registered with the model, updated when it changes), so that
setting LLMCHAIN_MODEL_API_KEY closes the server to others without closing it to the site."""

from __future__ import annotations

import httpx
import pytest

from apps.chat.builtin import BUILTIN_NAME, ensure_builtin_model
from apps.chat.health import run_checks
from apps.chat.models import RegisteredModel
from apps.chat.providers import endpoint_of

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def builtin_at(model_server, settings):
    """The built-in model registered at the running test server (which requires its key)."""
    settings.LLMCHAIN_BUILTIN_MODEL_URL = model_server.url
    settings.LLMCHAIN_OUTBOUND_ALLOW = model_server.url.split("/")[2]
    return model_server


def test_the_server_refuses_a_call_without_the_key_it_was_given(builtin_at):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": builtin_at.api_key}):
        refused = httpx.get(f"{builtin_at.url}/models", headers=headers, timeout=30)
        assert refused.status_code == 401, headers
    assert httpx.get(f"{builtin_at.url}/models", timeout=30,
                     headers={"Authorization": f"Bearer {builtin_at.api_key}"}).status_code == 200


def test_the_site_sends_the_key_the_built_in_server_requires_and_follows_a_change(builtin_at, settings):
    settings.LLMCHAIN_MODEL_API_KEY = builtin_at.api_key
    model = ensure_builtin_model()
    assert endpoint_of(model).headers()["Authorization"] == f"Bearer {builtin_at.api_key}"
    assert run_checks(names=[BUILTIN_NAME]) == {BUILTIN_NAME: ""}
    assert RegisteredModel.objects.get(pk=model.pk).healthy

    settings.LLMCHAIN_MODEL_API_KEY = "sk-a-new-key"  # the operator changed it: the next start sends it
    ensure_builtin_model()
    assert endpoint_of(RegisteredModel.objects.get(pk=model.pk)).headers()["Authorization"] == "Bearer sk-a-new-key"
    assert run_checks(names=[BUILTIN_NAME])[BUILTIN_NAME]  # the running server still wants the old one
