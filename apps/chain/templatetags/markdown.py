"""`{{ text|markdown }}`: a model's output as sanitized HTML (lib/markdown.py), for every page that
shows one (the chat, the evidence, the expert queue). Here, in the lowest app, so all can load it."""

from __future__ import annotations

from django import template
from django.utils.safestring import mark_safe

from lib.markdown import render

register = template.Library()


@register.filter
def markdown(text) -> str:
    return mark_safe(render(str(text or "")))  # sanitized by nh3 in render()
