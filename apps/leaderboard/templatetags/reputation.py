from django import template

from apps.chain.templatetags.ledger import get_item, wad
from lib.reputation import WAD

register = template.Library()
# The chain's filters, for the board templates that load only this library.
register.filter("wad", wad)
register.filter("get_item", get_item)


# (label, subscript) of each sortable column.
SORT_LABELS = {"name": ("Model", ""), "r": ("R", ""), "ra": ("R", "a"), "rh": ("R", "h"),
               "n_auto": ("Auto scores", ""), "n_human": ("Ratings", ""), "block": ("Last change", ""), "debate_elo": ("Debate Elo", ""),
               "peer_elo": ("Peer Elo", ""), "arena_elo": ("Arena Elo", ""), "style_elo": ("Style-controlled Elo", ""),
               "battles": ("Battles", ""), "weighted": ("Weighted", "")}


def board_query(context_id: str, sort: str, direction: str) -> str:
    from django.utils.http import urlencode
    return "?" + urlencode({"context": context_id, "sort": sort, "dir": direction})


@register.simple_tag
def board_url(board, context_id=None):
    """The board URL for another context, keeping the current order."""
    return board_query(context_id or board.context_id, board.sort, board.direction)


# The board's columns beyond the compact default (rank, model, R, its band, arena Elo, ratings, automatic
# scores): (css class of their cells, label in the column chooser). static/js/board.js shows the ones a
# visitor picks and remembers them; without scripts every column shows.
OPTIONAL_COLUMNS = (("trend", "Trend"), ("ra", "Automatic part Rₐ"), ("rh", "People's part Rₕ"),
                    ("style-elo", "Style-controlled Elo"), ("battles", "Battles"), ("debate-elo", "Debate Elo"),
                    ("peer-elo", "Peer Elo"), ("changed", "Last change"))


@register.simple_tag
def optional_columns():
    return OPTIONAL_COLUMNS


@register.inclusion_tag("leaderboard/_sort_th.html")
def sort_th(board, key, css="", unranked=False):
    """A sortable column header: clicking it swaps only #board-table; a second click reverses the order.
    `unranked`: a header of the models not yet ranked, which the default order (by R) lists by their
    automatic score, so there the R header does not claim the order."""
    from apps.leaderboard.boards import default_direction
    current = board.sort == key and not (unranked and key == "r")
    if current:
        next_dir = "asc" if board.direction == "desc" else "desc"
    else:
        next_dir = default_direction(key)
    label, subscript = SORT_LABELS[key]
    return {"url": board_query(board.context_id, key, next_dir), "label": label, "subscript": subscript,
            "key": key, "aria_sort": ("ascending" if board.direction == "asc" else "descending") if current else "none",
            "current": current, "direction": board.direction, "css": css}


@register.simple_tag
def sparkline(values, width: int = 96, height: int = 22, label: str = "R over this model's history"):
    """An inline SVG polyline of values in [0, 1] (the y axis spans the values' own range, so small
    moves show); nothing when there is nothing to draw."""
    from django.utils.html import format_html

    values = [float(v) for v in (values or [])]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    n = len(values)
    pad = 2
    points = " ".join(f"{pad + (width - 2 * pad) * (k / (n - 1) if n > 1 else 0.5):.1f},"
                      f"{height - pad - (height - 2 * pad) * ((v - lo) / span if hi > lo else 0.5):.1f}"
                      for k, v in enumerate(values))
    title = f"{label}: {values[0]:.4f} → {values[-1]:.4f} ({n} points)"
    return format_html('<svg class="spark" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">'
                       '<title>{}</title><polyline points="{}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
                       '</svg>', width, height, width, height, title, title, points)


@register.simple_tag
def band_bar(row, width: int = 60):
    """The R band as a small bar on [0, 1] with R marked; text fallback in the title."""
    from django.utils.html import format_html

    if row.band_lo is None:
        return ""
    r = int(row.r) / WAD
    x0, x1, xr = (round(width * v, 1) for v in (row.band_lo, row.band_hi, r))
    title = f"95% band of R: {row.band_lo:.4f} – {row.band_hi:.4f} over {row.band_n} rated answers"
    return format_html('<svg class="band" width="{}" height="8" viewBox="0 0 {} 8" role="img" aria-label="{}">'
                       '<title>{}</title><rect x="0" y="3" width="{}" height="2" class="band-axis"/>'
                       '<rect x="{}" y="1" width="{}" height="6" class="band-range"/>'
                       '<rect x="{}" y="0" width="1.5" height="8" class="band-r"/></svg>',
                       width, width, title, title, width, x0, max(x1 - x0, 1), xr)


def debate_cell(row):
    """The debate rating, rounded, with the number of settled debates under it; "—" without one."""
    from django.utils.html import format_html
    from django.utils.safestring import mark_safe

    if row.debate_elo is None:
        return mark_safe('<span class="muted" title="no settled debate in this context">—</span>')
    noun = "debate" if row.debate_games == 1 else "debates"
    return format_html('<span title="rating from {} settled {}">{}</span>'
                       ' <small class="muted">{} {}</small>',
                       row.debate_games, noun, f"{row.debate_elo:.0f}", row.debate_games, noun)


def peer_cell(row):
    """The peer self-evaluation Elo, rounded, its wins–ties–losses in the title; "—" without one."""
    from django.utils.html import format_html
    from django.utils.safestring import mark_safe

    if row.peer_elo is None:
        return mark_safe('<span class="muted" title="not in a peer self-evaluation of this context">—</span>')
    wins, ties, losses = row.peer_record
    return format_html('<span title="peer self-evaluation: {} wins, {} ties, {} losses">{}</span>',
                       wins, ties, losses, f"{row.peer_elo:.0f}")


# Fewer votes than this behind a model's arena score: no interval is shown (one vote cannot make one).
MIN_INTERVAL_BATTLES = 2


def _elo_cell(elo, low, high, rank, battles: int, what: str, none_title: str):
    """An arena score, rounded, with its 95% interval beside it (its rank in the title); "—" without one,
    and no interval while too few votes stand behind it."""
    from django.utils.html import format_html

    if elo is None:
        return format_html('<span class="muted" title="{}">—</span>', none_title)
    if battles < MIN_INTERVAL_BATTLES or round(low) == round(high):
        noun = "vote" if battles == 1 else "votes"
        return format_html('<span title="{}: {}; too few votes for an interval">{}</span>'
                           ' <small class="muted">{} {}</small>', what, f"{elo:.1f}", f"{elo:.0f}", battles, noun)
    return format_html('<span title="{}: {} (95% interval {} to {}); arena rank {}">{}</span>'
                       ' <small class="muted">{}–{}</small>', what, f"{elo:.1f}", f"{low:.1f}", f"{high:.1f}", rank,
                       f"{elo:.0f}", f"{low:.0f}", f"{high:.0f}")


def arena_cell(row):
    return _elo_cell(row.arena_elo, row.arena_ci_low, row.arena_ci_high, row.arena_rank, row.battles, "Arena Elo",
                     "no counted arena vote on this board")


def style_cell(row):
    return _elo_cell(row.style_elo, row.style_ci_low, row.style_ci_high, row.style_rank, row.battles,
                     "Style-controlled Elo",
                     "no counted arena vote on this board" if not row.battles else
                     "no style-controlled score on this board yet (see below)")


def weighted_cell(row):
    """The weighted score with its rank (=2 when shared), its band in the title; "—" without one."""
    from django.utils.html import format_html
    from django.utils.safestring import mark_safe

    if row.weighted is None:
        return mark_safe('<span class="muted" title="no rating band or counted vote from people here">—</span>')
    return format_html('<span title="weighted by how well each signal agrees with people here: {} (range {} to {}); '
                       'weighted rank {}">{}</span> <small class="muted">rank {}</small>', f"{row.weighted:.4f}",
                       f"{row.weighted_low:.4f}", f"{row.weighted_high:.4f}", row.weighted_rank_text,
                       f"{row.weighted:.3f}", row.weighted_rank_text)


def battles_cell(row):
    """Battles, and the win rate under them; "—" without any."""
    from django.utils.html import format_html
    from django.utils.safestring import mark_safe

    if not row.battles:
        return mark_safe('<span class="muted" title="no counted arena vote on this board">—</span>')
    return format_html('<span title="{} wins, {} ties or both bad, {} losses">{}</span>'
                       ' <small class="muted">{}% won</small>', row.arena_wins, row.arena_ties,
                       row.arena_losses, row.battles, f"{100 * row.arena_win_rate:.0f}")


@register.simple_tag
def arena_matrix(arena):
    """The pairwise win-rate matrix: the row model's wins + ties / 2 over its battles against the column
    model. Rendered in Python like the board's rows (100 models are 10,000 cells); every value escaped."""
    from django.utils.html import format_html, format_html_join
    from django.utils.safestring import mark_safe

    if arena is None or not arena.models:
        return ""
    head = format_html_join("", '<th scope="col" title="{}">{}</th>', ((m, name) for m, name in arena.models))
    body = []
    for (model, name), rates in zip(arena.models, arena.win_rates):
        cells = []
        for (other, other_name), rate in zip(arena.models, rates):
            if other == model:
                cells.append(mark_safe('<td class="wr self"></td>'))
            elif rate is None:
                cells.append(format_html('<td class="wr none" title="{} and {} never met">—</td>', name, other_name))
            else:
                kind = "wr-hi" if rate > 0.6 else "wr-lo" if rate < 0.4 else "wr-mid"
                cells.append(format_html('<td class="wr {}" title="{} against {}: {}% won">{}</td>', kind, name,
                                         other_name, f"{100 * rate:.0f}", f"{rate:.2f}"))
        body.append(format_html('<tr data-model="{}"><th scope="row" title="{}">{}</th>{}</tr>', model, model, name,
                                mark_safe("".join(cells))))
    return format_html('<table class="win-matrix"><thead><tr><th scope="col">row vs column</th>{}</tr></thead>'
                       '<tbody>{}</tbody></table>', head, mark_safe("\n".join(body)))


@register.simple_tag
def board_tbody(rows):
    """The board's rows, rendered in Python: a 100-row board has ~3,000 cells, which Django's template
    engine takes ~100 ms to resolve one by one. Every value is escaped by format_html. A row's <tr> does
    not depend on the board's order, so it is rendered once per row (kept in `row.memo`: every sort and
    direction of one version of a board shares its rows)."""
    from django.utils.safestring import mark_safe

    out = []
    for row in rows:
        html = row.memo.get("tr")
        if html is None:
            html = row.memo["tr"] = board_tr(row)
        out.append(html)
    return mark_safe("\n".join(out))


def board_tr(row) -> str:
    """One row of the board's table."""
    from django.utils.html import format_html
    from django.utils.safestring import mark_safe

    if row.band_lo is not None:
        band = format_html('<span class="band-text">{}–{}</span> {}', f"{row.band_lo:.4f}", f"{row.band_hi:.4f}",
                           band_bar(row))
    else:
        band = mark_safe('<span class="muted" title="fewer than 2 rated answers: no band">—</span>')
    if row.changed_at:
        changed = format_html('<time datetime="{}" title="block {}">{}</time>', row.changed_at.isoformat(),
                              row.block_number, row.changed_at.strftime("%Y-%m-%d %H:%M"))
    else:
        changed = format_html("block {}", row.block_number)
    return format_html(
        '<tr data-model="{}"><td class="rank">{}</td>'
        '<td class="model"><a href="{}" title="{}">{}</a> <code title="{}">{}</code></td>'
        '<td class="r">{}</td><td class="band">{}</td><td class="weighted">{}</td><td class="arena-elo">{}</td>'
        '<td class="n-human">{}</td><td class="n-auto">{}</td><td class="trend">{}</td>'
        '<td class="ra">{}</td><td class="rh">{}</td><td class="style-elo">{}</td><td class="battles">{}</td>'
        '<td class="debate-elo">{}</td><td class="peer-elo">{}</td>'
        '<td class="changed">{}</td></tr>',
        row.model_id, row.rank_text, row.url, row.name, row.name, row.model_id, row.short_id,
        wad(row.r), band, weighted_cell(row), arena_cell(row), row.n_human, row.n_auto, sparkline(row.spark), wad(row.ra),
        wad(row.rh), style_cell(row), battles_cell(row), debate_cell(row), peer_cell(row), changed)
