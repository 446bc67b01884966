"""The Content-Security-Policy: every page is served with it, it admits no inline script, style or
handler and no eval, and no template needs one (htmx, its websocket extension and Chart.js are
static files; the browser tests run the pages under the same policy)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
INLINE = {
    "an inline script": re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I),
    "a style element": re.compile(r"<style\b", re.I),
    "a style attribute": re.compile(r"\sstyle=", re.I),
    "an event handler attribute": re.compile(r"\son[a-z]+\s*=", re.I),
    "an hx-on attribute (evaluated code)": re.compile(r"\shx-on", re.I),
    "a javascript: URL": re.compile(r"javascript:", re.I),
}


def html_of(path: Path) -> str:
    """The template's markup without its tags and variables (`{% include ... onchain=x %}` is no handler)."""
    return re.sub(r"\{%.*?%\}|\{\{.*?\}\}|\{#.*?#\}", " ", path.read_text(), flags=re.S)


def test_no_template_needs_inline_code_or_styles():
    found = [f"{path.relative_to(TEMPLATES)}: {what}" for path in sorted(TEMPLATES.rglob("*.html"))
             for what, pattern in INLINE.items() if pattern.search(html_of(path))]
    assert found == []


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/login/", "/signup/", "/models/", "/metaeval/", "/api/docs"])
def test_every_page_carries_the_policy(client, path):
    response = client.get(path)
    assert response.status_code == 200, path
    policy = dict(d.strip().split(" ", 1) for d in response["Content-Security-Policy"].split(";") if d.strip())
    assert policy["default-src"] == policy["script-src"] == policy["style-src"] == "'self'"
    assert policy["connect-src"] == "'self'"  # htmx's requests and the chat's websocket, this host only
    assert policy["object-src"] == policy["base-uri"] == policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in response["Content-Security-Policy"]


@pytest.mark.django_db
def test_the_api_docs_page_needs_no_inline_code_or_styles_and_every_page_links_it(client):
    docs = client.get("/api/docs")
    assert docs.status_code == 200
    body = docs.content.decode()
    assert [what for what, pattern in INLINE.items() if pattern.search(body)] == []
    assert re.search(r'<script src="[^"]*\?script=?"', body)  # drf-spectacular's script, from a URL
    for path in ("/", "/login/", "/models/"):
        assert 'href="/api/docs"' in client.get(path).content.decode(), path
