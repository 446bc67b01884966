"""{% chain_unreachable "what waits" %}: a plain sentence while the chain node does not answer."""

from __future__ import annotations

from django import template

from apps.chain.health import chain_health

register = template.Library()


@register.inclusion_tag("chain/_unreachable.html")
def chain_unreachable(waiting: str) -> dict:
    """Nothing while the node answers; otherwise says that `waiting` is kept and will be sent."""
    return {"reachable": chain_health()["reachable"], "waiting": waiting}
