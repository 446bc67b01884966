"""Template filters for an answer's automatic evaluation (the oracle's job, read by the chat pages)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def answered(references) -> int:
    """How many of a job's references answered (a failed reference has no text)."""
    return sum(1 for r in references or () if r.get("text") is not None)
