"""The first start in a real browser: while the built-in model's server converts the model, the
chat page says so with its progress and keeps asking; once the model answers, the note says it is
up and the model list offers it, with no reload (htmx polling, under the site's CSP)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.chat.builtin import BUILTIN_NAME
from apps.chat.models import RegisteredModel
from modelserver.progress import StartupStatus
from tests.chat.factories import make_contexts
from tests.chat.test_chat_limits import endpoint_model
from tests.personas import PASSWORD, user

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SIZES = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.mark.parametrize("size", SIZES)
def test_the_chat_page_shows_the_built_in_model_starting_then_offers_it(chromium, live_server, settings, tmp_path,
                                                                       size):
    settings.LLMCHAIN_BUILTIN_STATUS_FILE = tmp_path / "builtin-model.json"
    status = StartupStatus(settings.LLMCHAIN_BUILTIN_STATUS_FILE)
    make_contexts("writing")
    model = endpoint_model("http://127.0.0.1:9/v1", BUILTIN_NAME)
    RegisteredModel.objects.filter(pk=model.pk).update(name=BUILTIN_NAME, healthy=False)
    user("alice")
    status.step("converting", 136, 272)

    context = chromium.new_context(base_url=live_server.url, viewport=SIZES[size], is_mobile=size == "phone")
    page = context.new_page()
    errors = []
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    try:
        page.goto("/login/")
        page.get_by_label("User name").fill("alice")
        page.get_by_label("Password").fill(PASSWORD)
        page.locator("main").get_by_role("button", name="Log in").click()
        note = page.locator("#builtin-starting")
        expect(note).to_contain_text("The built-in model is starting (first start: converting the model, "
                                     "step 2 of 3, its weights, 50%)")
        assert page.locator("#model option", has_text=BUILTIN_NAME).count() == 0
        status.step("finishing")
        expect(note).to_contain_text("step 3 of 3, saving the result", timeout=10_000)

        status.serving("http://127.0.0.1:9/v1")
        RegisteredModel.objects.filter(pk=model.pk).update(healthy=True)  # what up's check does once it serves
        expect(note).to_have_text("The built-in model is up: it is now in the list.", timeout=10_000)
        expect(page.locator("#model option", has_text=BUILTIN_NAME)).to_have_count(1)
        assert errors == []
    finally:
        context.close()
