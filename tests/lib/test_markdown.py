"""The Markdown renderer every model answer goes through (lib/markdown.py)."""

import re
from html.parser import HTMLParser

import pytest

from lib.markdown import render
from tests.xss_corpus import PAYLOADS

FORBIDDEN_TAGS = {"script", "iframe", "object", "embed", "svg", "math", "style", "link", "meta", "base", "form",
                  "input", "img", "video", "audio", "source", "body", "details", "noscript", "marquee", "textarea",
                  "select", "frame", "frameset", "template"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "background", "poster", "xlink:href"}


class Elements(HTMLParser):
    """The elements a browser would build from the HTML, with their attributes (entities decoded)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, {name: value or "" for name, value in attrs}))


def assert_inert(html: str, payload: str) -> None:
    """What must never come out, whatever came in: judged on the parsed elements, not on the text
    (an escaped `&lt;script&gt;` is harmless text)."""
    for tag, attrs in Elements(html).found:
        assert tag not in FORBIDDEN_TAGS, f"<{tag}> survived {payload!r}: {html}"
        for name, value in attrs.items():
            assert not name.startswith("on"), f"{name}= survived {payload!r}: {html}"
            scheme = re.sub(r"[\x00-\x20]", "", value).lower()
            if name in URL_ATTRIBUTES:
                assert not scheme.startswith(("javascript:", "vbscript:", "data:")), f"{name}={value} in {html}"
            assert name != "style", f"style={value} in {html}"
            if name == "class":
                assert tag in {"span", "code", "div", "pre", "button", "a", "th", "td"}, f"class on <{tag}> in {html}"


def test_the_xss_corpus_has_at_least_thirty_payloads():
    assert len(PAYLOADS) >= 30 and len(set(PAYLOADS)) == len(PAYLOADS)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_every_payload_is_rendered_inert(payload):
    assert_inert(render(payload), payload)
    assert_inert(render(f"Some **text** first.\n\n{payload}\n\nand after"), payload)


def test_all_payloads_in_one_answer_are_inert():
    assert_inert(render("\n\n".join(PAYLOADS)), "the whole corpus")


def test_raw_html_is_shown_as_text():
    assert render("<b>hi</b>") == "<p>&lt;b&gt;hi&lt;/b&gt;</p>\n"


def test_markdown_is_rendered():
    html = render("# Title\n\nSome **bold**, *italic*, ~~gone~~ and `code`.\n\n- one\n- two\n\n1. first\n")
    for fragment in ("<h1>Title</h1>", "<strong>bold</strong>", "<em>italic</em>", "<s>gone</s>",
                     "<code>code</code>", "<li>one</li>", "<ol>"):
        assert fragment in html


def test_links_get_nofollow_noopener_and_script_urls_are_dropped():
    html = render("[site](https://example.org) and [bad](javascript:alert(1))")
    assert '<a href="https://example.org" rel="nofollow noopener">site</a>' in html
    assert "[bad](javascript:alert(1))" in html  # left as text, not a link
    assert html.count("<a ") == 1


def test_images_are_links_never_loaded():
    html = render("![a chart](https://example.org/chart.png)")
    assert "<img" not in html
    assert 'href="https://example.org/chart.png"' in html and "[image: a chart]" in html


def test_code_fences_are_highlighted_under_a_copy_button():
    html = render("```python\ndef f(x):\n    return '<b>'\n```\n")
    assert '<span class="code-lang">python</span>' in html
    assert '<button type="button" class="copy-code"' in html
    assert '<span class="k">def</span>' in html  # Pygments' token classes
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert "\n    <span" in html  # indentation kept


def test_an_unknown_language_and_an_unclosed_fence_are_plain_code():
    html = render("```nosuchlang\nx = 1\n")
    assert '<span class="code-lang">nosuchlang</span>' in html and "<code>x = 1\n</code>" in html


def test_tables_keep_their_alignment_as_classes_never_as_styles():
    html = render("| a | b |\n|:-:|--:|\n| 1 | 2 |\n")
    assert '<th class="align-center">a</th>' in html and '<td class="align-right">2</td>' in html
    assert "style" not in html
