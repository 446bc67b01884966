"""The site's own pages for what goes wrong (missing, forbidden, broken), its favicon, and its log
printing each line once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.urls import path

from apps.chain.node import free_port
from apps.chat.models import Conversation
from llmchain_site import urls as site_urls
from tests.chat.factories import make_contexts
from tests.personas import developer, outsider, user

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[1]
LAYOUT = '<a class="brand" href="/">LLMChain</a>'

# This module is the URLconf of the tests marked `urls(__name__)`: the site's, plus a view that fails.
handler403, handler404 = site_urls.handler403, site_urls.handler404


def boom(request):
    raise RuntimeError("a bug")


urlpatterns = [*site_urls.urlpatterns, path("boom/", boom)]


@pytest.mark.parametrize("debug", [False, True])
def test_a_missing_page_is_the_site_s_own_page_with_or_without_debug(client, settings, debug):
    settings.DEBUG = debug
    page = client.get("/no/such/page/")
    assert page.status_code == 404
    body = page.content.decode()
    assert LAYOUT in body and "<h1>Page not found</h1>" in body
    assert "There is no page at <code>/no/such/page/</code>." in body
    assert "URLconf" not in body  # not Django's technical page


@pytest.mark.parametrize("debug", [False, True])
def test_a_view_s_not_found_says_what_it_did_not_find(client, settings, debug):
    settings.DEBUG = debug
    missing = "0x" + "ab" * 32
    page = client.get(f"/reputation/{missing}/")
    assert page.status_code == 404
    body = page.content.decode()
    assert LAYOUT in body and missing in body
    generic = client.get("/models/999999/")  # Django's "No RegisteredModel matches the given query." stays out
    assert generic.status_code == 404 and "matches the given query" not in generic.content.decode()


def test_with_debug_on_a_missing_slash_still_redirects(client, settings):
    settings.DEBUG = True
    page = client.get("/chat")
    assert page.status_code == 301 and page["Location"] == "/chat/"


def test_refusals_are_pages_in_the_layout_with_their_message(client):
    coding, = make_contexts("coding")
    alice, mallory = user("alice"), outsider()
    from apps.chat.registry import ModelFields, register_model
    dave = developer()
    model = register_model(dave, ModelFields(name="tiny", provider="p", endpoint_url="http://127.0.0.1:9/v1",
                                             endpoint_model="tiny"))
    conv = Conversation.objects.create(user=alice, model=model, context=coding)
    client.force_login(mallory)
    for url, method, message in [
        (f"/chat/{conv.pk}/", "get", "This is not your conversation."),
        (f"/models/{model.pk}/edit", "get", "Only the model&#x27;s owner can edit it."),
        (f"/models/{model.pk}/enabled", "post", "Only the model&#x27;s owner can take it offline or bring it back."),
    ]:
        page = getattr(client, method)(url)
        assert page.status_code == 403, url
        body = page.content.decode()
        assert LAYOUT in body and "<h1>Not allowed</h1>" in body, url
        assert f'<p class="error" role="alert">{message}</p>' in body, url
        assert "You are signed in as mallory." in body


@pytest.mark.urls(__name__)
def test_a_server_error_is_the_site_s_own_page(client, settings):
    settings.DEBUG = False
    client.raise_request_exception = False
    page = client.get("/boom/")
    assert page.status_code == 500
    body = page.content.decode()
    assert LAYOUT in body and "Something went wrong on our side" in body and "a bug" not in body


def test_the_favicon_is_linked_from_every_page_and_favicon_ico_finds_it(client):
    from django.contrib.staticfiles import finders
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in client.get("/models/").content.decode()
    page = client.get("/favicon.ico")
    assert page.status_code == 301 and page["Location"] == "/static/favicon.svg"
    assert Path(finders.find("favicon.svg")).read_text().startswith("<svg ")


@pytest.mark.slow
def test_each_log_line_is_printed_once(tmp_path):
    """`manage.py runserver` (daphne, as `make run` serves the site): its request line and Django's
    "Not Found" warning each appear once in what the process prints."""
    port = free_port()
    env = {**os.environ, "LLMCHAIN_VAR_DIR": str(tmp_path), "DEBUG": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)
    log = tmp_path / "runserver.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/no-such-page-{port}", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
        assert answer.status_code == 404
        deadline = time.monotonic() + 10
        while f"HTTP GET /no-such-page-{port} 404" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(15)
    printed = log.read_text()
    assert printed.count(f"HTTP GET /no-such-page-{port} 404 ") == 1, printed
    assert printed.count(f"Not Found: /no-such-page-{port}") == 1, printed
