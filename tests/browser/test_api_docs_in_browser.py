"""The API docs in a real browser, under the site's Content-Security-Policy: reached from the
footer of any page, Swagger UI renders the schema's operations and the console stays clean (a
refused inline style or script shows there as an error)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_footer_leads_to_api_docs_that_work_under_the_policy(chromium, live_server):
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 1366, "height": 900})
    page = context.new_page()
    errors = []
    page.on("console", lambda msg: msg.type == "error" and errors.append(f"{msg.text} ({msg.location.get('url')})"))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto("/models/")
        page.locator("footer").get_by_role("link", name="API", exact=True).click()
        expect(page).to_have_url(f"{live_server.url}/api/docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("LLMChain API")
        expect(page.locator(".opblock-summary-path").first).to_be_visible()
        assert page.locator(".opblock-summary-path", has_text="/api/conversations").count() >= 1
        assert errors == []
    finally:
        context.close()
