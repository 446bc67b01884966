"""{% chain_unreachable "what waits" %}: a plain sentence while the chain node does not answer."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from apps.chain.health import chain_health

register = template.Library()


@register.simple_tag
def chain_unreachable(waiting: str) -> str:
    """Nothing while the node answers; otherwise says that `waiting` is kept and will be sent."""
    if chain_health()["reachable"]:
        return ""
    return format_html('<p class="chain-down" role="status">The chain is unreachable right now; {}.</p>', waiting)
