from django import template

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
