"""The running site (DEBUG on, as `make run` serves it) in a real browser: a missing page and a
refusal are the site's own pages in its layout, and no page load asks for anything that is missing
(the favicon included)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.chain.models import Context
from apps.chat.models import Conversation
from apps.chat.registry import ModelFields, register_model
from tests.personas import developer, outsider, user

from .test_chat_in_browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_missing_and_forbidden_pages_are_in_the_layout_and_nothing_a_page_asks_for_is_missing(site, page, shot):
    failed = []
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))

    page.goto("/")
    expect(page.locator("header .brand")).to_have_text("LLMChain")
    page.goto("/models/")
    assert failed == []
    icon = page.goto("/favicon.ico")
    assert icon.status == 200 and page.url.endswith("/static/favicon.svg")
    assert icon.header_value("content-type").startswith("image/svg+xml")

    missing = page.goto("/no/such/page/")
    assert missing.status == 404
    expect(page.locator("h1")).to_have_text("Page not found")
    expect(page.locator("main")).to_contain_text("There is no page at /no/such/page/.")
    expect(page.locator("header nav.site").get_by_role("link", name="Boards")).to_be_visible()  # not Django's page
    shot(page, "not-found")

    model = register_model(developer(), ModelFields(name="tiny", provider="p", endpoint_url="http://127.0.0.1:9/v1",
                                                    endpoint_model="tiny"))
    theirs = Conversation.objects.create(user=user("alice"), model=model, context=Context.objects.first())
    outsider("mallory")
    log_in(page, "mallory")
    expect(page).to_have_url(re.compile(r"/chat/$"))
    refused = page.goto(f"/chat/{theirs.pk}/")
    assert refused.status == 403
    expect(page.locator("h1")).to_have_text("Not allowed")
    expect(page.locator("p.error")).to_have_text("This is not your conversation.")
    expect(page.locator("header .who")).to_have_text("mallory")
    shot(page, "forbidden")
    expected = re.compile(r"/no/such/page/\)?$|/chat/\d+/\)?$")  # the two pages themselves, nothing they load
    assert [f for f in failed if not expected.search(f)] == []
    assert [e for e in page.console_errors if not expected.search(e)] == []
