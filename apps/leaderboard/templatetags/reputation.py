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


SORT_LABELS = {"name": "Model", "r": "R", "ra": "R<sub>a</sub>", "rh": "R<sub>h</sub>", "n_auto": "automatic",
               "n_human": "human", "block": "last change"}


def board_query(context_id: str, sort: str, direction: str) -> str:
    from django.utils.http import urlencode
    return "?" + urlencode({"context": context_id, "sort": sort, "dir": direction})


@register.simple_tag
def board_url(board, context_id=None):
    """The board URL for another context, keeping the current order."""
    return board_query(context_id or board.context_id, board.sort, board.direction)


@register.inclusion_tag("leaderboard/_sort_th.html")
def sort_th(board, key):
    """A sortable column header: clicking it swaps only #board-table; a second click reverses the order."""
    from django.utils.safestring import mark_safe

    from apps.leaderboard.boards import default_direction
    current = board.sort == key
    if current:
        next_dir = "asc" if board.direction == "desc" else "desc"
    else:
        next_dir = default_direction(key)
    return {"url": board_query(board.context_id, key, next_dir), "label": mark_safe(SORT_LABELS[key]),
            "key": key, "aria_sort": ("ascending" if board.direction == "asc" else "descending") if current else "none",
            "current": current, "direction": board.direction}
