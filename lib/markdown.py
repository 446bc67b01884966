"""Model output as HTML: Markdown rendered by markdown-it-py, then sanitized by nh3.

Everything a model writes is untrusted. Two walls, so that one mistake is not enough:
markdown-it runs with raw HTML off (a `<script>` in an answer is text) and refuses
`javascript:`/`vbscript:`/`file:`/`data:` link targets; then nh3 (Rust's ammonia) keeps only the
tags and attributes listed here, only http(s)/mailto or relative URLs, and puts
rel="nofollow noopener" on every link. Images are never loaded (a model could beacon the
reader's address out): they become links. Fenced code is highlighted by Pygments into
`<span class>` tokens (static/css/code.css colours them) under a header with the language and a
Copy button (static/js/chat.js copies the code).

`render(text)` is all the site uses, for finished answers and for the partial answer while it
streams (an unclosed fence renders as code to the end).
"""

from __future__ import annotations

import html
from functools import lru_cache

import nh3
from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

LINK_REL = "nofollow noopener"
URL_SCHEMES = {"http", "https", "mailto"}
TAGS = {
    "p", "br", "hr", "strong", "em", "s", "del", "code", "pre", "blockquote", "a", "span", "div", "button",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
}
ATTRIBUTES = {
    "a": {"href", "title", "class"},
    "ol": {"start"},
    "th": {"class"},  # align-left|center|right: a column's alignment (no style attribute: the CSP refuses them)
    "td": {"class"},
    "span": {"class"},
    "code": {"class"},
    "div": {"class"},
    "pre": {"class", "tabindex"},  # tabindex: a code block that scrolls sideways is reached by keyboard
    "button": {"type", "class", "aria-label"},
}
MAX_HIGHLIGHT = 50_000  # characters of one fence; longer code is shown plain (Pygments is linear, but slow)


def _fence(renderer, tokens, idx, options, env) -> str:
    token = tokens[idx]
    lang = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
    code = token.content
    body = None
    if lang and len(code) <= MAX_HIGHLIGHT:
        try:
            body = highlight(code, get_lexer_by_name(lang), _formatter())
        except ClassNotFound:
            pass
    if body is None:
        body = html.escape(code)
    label = html.escape(lang) if lang else "code"
    return (f'<div class="code-block"><div class="code-head"><span class="code-lang">{label}</span>'
            f'<button type="button" class="copy-code" aria-label="Copy the code">Copy</button></div>'
            f'<pre class="code" tabindex="0"><code>{body}</code></pre></div>\n')


def _image(renderer, tokens, idx, options, env) -> str:
    """An image is a link to it, never loaded."""
    token = tokens[idx]
    src = html.escape(token.attrGet("src") or "")
    alt = html.escape(token.content or "image")
    return f'<a href="{src}" class="image-link">[image: {alt}]</a>'


def _align_by_class(state) -> None:
    """markdown-it aligns table cells with style="text-align:…"; the site's CSP refuses inline styles."""
    for token in state.tokens:
        style = token.attrs.pop("style", None) if token.type in ("th_open", "td_open") else None
        if style and style.startswith("text-align:"):
            token.attrSet("class", "align-" + style.split(":", 1)[1].strip())


@lru_cache(maxsize=1)
def _formatter() -> HtmlFormatter:
    return HtmlFormatter(nowrap=True)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("fence", _fence)
    md.add_render_rule("code_block", _fence)
    md.add_render_rule("image", _image)
    md.core.ruler.push("align_by_class", _align_by_class)
    return md


def sanitize(fragment: str) -> str:
    return nh3.clean(fragment, tags=TAGS, attributes=ATTRIBUTES, link_rel=LINK_REL, url_schemes=URL_SCHEMES,
                     strip_comments=True)


def render(text: str) -> str:
    """Safe HTML for a model's Markdown `text`."""
    if not text:
        return ""
    return sanitize(_parser().render(text))
