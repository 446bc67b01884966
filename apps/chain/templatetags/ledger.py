"""Template filters and tags for what the chain records: `wad` shows a 1e18 fixed-point value, `get_item`
looks a key up, and {% chain_unreachable "what waits" %} is a plain sentence while the chain node does not
answer ({% chain_banner %}: the same at the top of every page, with what it means). They live here, in the lowest app that renders them, so that every app above can load them."""

from __future__ import annotations

from django import template

from apps.chain.health import chain_health, reachable
from lib.reputation import WAD

register = template.Library()


@register.filter
def wad(value: int, digits: int = 4) -> str:
    """A 1e18 fixed-point score as a decimal in [0, 1]."""
    return f"{int(value) / WAD:.{digits}f}"


@register.filter
def get_item(mapping, key):
    """mapping[key], or an empty list when absent (for per-field error lists)."""
    return (mapping or {}).get(key, [])


@register.inclusion_tag("chain/_unreachable.html")
def chain_unreachable(waiting: str) -> dict:
    """Nothing while the node answers; otherwise says that `waiting` is kept and will be sent."""
    return {"reachable": reachable(), "waiting": waiting}


@register.inclusion_tag("chain/_banner.html")
def chain_banner() -> dict:
    """Nothing while the node answers (no query); otherwise what the reader can and cannot rely on."""
    return {"health": None if reachable() else chain_health()}
