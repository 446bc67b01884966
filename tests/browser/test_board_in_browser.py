"""The board read at a glance, at 1366x900, 1920x1080 and on a phone: the table takes the width it has,
no header or model name wraps inside a word or is more than two lines tall, a desktop row is one line,
models that cannot be told apart share a rank (=1) and models nobody rated are listed unranked, the
board says what orders it, and the extra columns are a click away and remembered. Then the pages people
read after an answer: the questionnaire folded except on the latest unrated answer, steps and weights
in words, the formulas on the page that explains them."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.chat.models import Interaction

from .test_layout_in_browser import open_as
from .world import build, jargon_on, with_arena

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SIZES = {"1366": {"width": 1366, "height": 900}, "1920": {"width": 1920, "height": 1080},
         "phone": {"width": 390, "height": 844}}

# Per visible header and model-name cell: its height in lines of its own text, and its widest word's
# share of a line (a word broken letter by letter is taller than two lines).
CELLS = """(sel) => [...document.querySelectorAll(sel)].filter(el => el.offsetParent !== null).map(el => {
    const style = getComputedStyle(el);
    const line = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.45;
    const pad = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
    return {text: el.innerText.trim(), lines: (el.getBoundingClientRect().height - pad) / line};
})"""
ROWS = """(sel) => [...document.querySelectorAll(sel)].map(r => r.getBoundingClientRect().height)"""
LINE = """() => parseFloat(getComputedStyle(document.querySelector('table.board td.r')).lineHeight)"""


def open_at(chromium, site, size: str, who: str | None = None):
    context, page = open_as(chromium, site, who, "phone" if size == "phone" else "desktop", viewport=SIZES[size])
    context.set_default_timeout(15_000)
    return context, page


@pytest.fixture
def world(site, tmp_path):
    return with_arena(build(tmp_path))


# What a visitor sees of a board, measured: the table's width, its header's and rows' heights (px).
MEASURE = """() => {
    const table = document.querySelector('table.board.ranked'), head = table.querySelector('thead tr');
    const rows = [...document.querySelectorAll('table.board tbody tr')].map(r => r.getBoundingClientRect().height);
    return {page: [document.documentElement.scrollWidth, document.documentElement.scrollHeight],
            table: Math.round(table.getBoundingClientRect().width), header: Math.round(head.getBoundingClientRect().height),
            rows: [Math.round(Math.min(...rows)), Math.round(Math.max(...rows))],
            top: Object.fromEntries(['h1', '#board-order', 'table.board.ranked', 'section.provisional', '#arena',
                                      'p.validity'].map(s => [s, Math.round(document.querySelector(s).getBoundingClientRect().top
                                                                            + window.scrollY)]))};
}"""


def check_layout(page, size: str) -> dict:
    """The board takes the width it has, no header or model name wraps inside a word or is more than two
    lines tall, and a row is one line on a desktop (two on a phone). Returns what was measured, once the
    lines that come after the page (the chain's, the validity one) are in."""
    expect(page.locator(".chain-lag p")).to_contain_text("block")
    expect(page.locator("p.validity")).not_to_be_empty()
    table = page.locator("table.board.ranked")
    expect(table).to_be_visible()
    width = SIZES[size]["width"]
    if size != "phone":
        # The table uses the width it has, not a 960 px column.
        assert table.bounding_box()["width"] >= width - 120, table.bounding_box()
    else:
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # it scrolls in its frame
    for cell in page.evaluate(CELLS, "table.board thead th") + page.evaluate(CELLS, "table.board td.model"):
        assert cell["lines"] <= 2.2, f"{cell['text']!r} is {cell['lines']:.1f} lines tall at {size}"
    line = page.evaluate(LINE)
    rows = page.evaluate(ROWS, "table.board tbody tr")
    limit = line * 1.6 + 16 if size != "phone" else line * 2.6 + 16  # one line on a desktop, two on a phone
    assert max(rows) <= limit, f"a row is {max(rows):.0f} px tall at {size} (limit {limit:.0f})"
    return page.evaluate(MEASURE)


@pytest.mark.parametrize("size", list(SIZES))
def test_the_board_reads_at_a_glance_with_shared_ranks_and_columns_a_click_away(site, chromium, world, shot,
                                                                                 size):
    context, page = open_at(chromium, site, size)
    try:
        # The global board, with its arena columns: one vote shows no interval.
        page.goto("/")
        print(f"global board at {size}:", check_layout(page, size))
        expect(page.locator("#board-order")).to_contain_text("Ranked by R")
        arena = page.locator("table.board.provisional tr[data-model='0x" + "01" * 32 + "'] td.arena-elo")
        expect(arena).to_contain_text("1 vote")
        expect(arena).not_to_contain_text("–")
        expect(page.locator("table.board.ranked td.arena-elo small").first).to_contain_text("–")
        shot(page, f"{size}-global-board")

        page.goto(f"/?context={world.context}")
        print(f"context board at {size}:", check_layout(page, size))
        table = page.locator("table.board.ranked")
        # The compact default: rank, model, R, its band, the weighted score, arena Elo, ratings, automatic scores.
        headers = [c["text"] for c in page.evaluate(CELLS, "table.board.ranked thead th")]
        assert [re.sub(r"\s*[▲▼]$", "", h) for h in headers] == [
            "Rank", "Model", "R", "R band", "Weighted", "Arena Elo", "Ratings", "Auto scores"]

        # Ranks: the four best cannot be told apart (=1); the three models rated fewer than 3 times are
        # not ranked, listed apart with no rank; one sentence says what orders the board.
        ranks = page.locator("table.board.ranked td.rank").all_inner_texts()
        assert ranks == ["=1", "=1", "=1", "=1", "2", "3", "4", "5", "6"], ranks
        unranked = page.locator("section.provisional")
        expect(unranked.locator("h2")).to_have_text("Not yet ranked")
        assert unranked.locator("td.rank").all_inner_texts() == ["–", "–", "–"]
        expect(page.locator("#board-order")).to_contain_text("Ranked by R")
        expect(page.locator("#board-order")).to_contain_text("4 of the 9 ranked models share one")
        shot(page, f"{size}-board")

        # More columns: hidden by default, shown when ticked, remembered on the next visit.
        ra = table.locator("td.ra").first
        expect(ra).to_be_hidden()
        page.get_by_text("More columns").click()
        page.get_by_label("Automatic part Rₐ").check()
        expect(ra).to_be_visible()
        page.reload()
        expect(page.locator("table.board.ranked td.ra").first).to_be_visible()
        expect(page.get_by_label("Automatic part Rₐ")).to_be_checked()
        # Sorting swaps the table: the column stays.
        page.locator("table.board.ranked th[data-sort=name] a").click()
        expect(page.locator("table.board.ranked th[data-sort=name]")).to_have_attribute("aria-sort", "ascending")
        expect(page.locator("table.board.ranked td.ra").first).to_be_visible()
        page.get_by_text("More columns").click()
        page.get_by_label("Automatic part Rₐ").uncheck()
        expect(page.locator("table.board.ranked td.ra").first).to_be_hidden()
    finally:
        context.close()


@pytest.mark.parametrize("size", ["1366", "phone"])
def test_only_the_latest_unrated_answer_shows_its_questionnaire_and_the_page_speaks_plainly(site, chromium, world,
                                                                                           shot, size):
    first = Interaction.objects.get(conversation_id=world.conversation)
    latest = Interaction.objects.create(conversation_id=world.conversation, prompt="And in a whole folder?",
                                        answer="Walk it with `os.walk` and add the counts.",
                                        status=Interaction.Status.DONE, interaction_id="0x" + "5a" * 32)
    context, page = open_at(chromium, site, size, "alice")
    try:
        page.goto(f"/chat/{world.conversation}/")
        older, newest = page.locator(f"#rating-{first.pk}"), page.locator(f"#rating-{latest.pk}")
        expect(newest.get_by_role("button", name="Send my rating")).to_be_visible()
        expect(older.get_by_role("button", name="Send my rating")).to_be_hidden()
        expect(older.locator("details.rate > summary")).to_have_text("Rate this answer")
        shot(page, f"{size}-folded")
        older.locator("details.rate > summary").click()
        expect(older.get_by_role("button", name="Send my rating")).to_be_visible()
        assert not jargon_on(page, "conversation")
        weight = newest.locator("p.note.weight")
        if weight.count():  # the chain answered: the weight is said in words, the formula a link away
            expect(weight).to_contain_text("of a full rating")
            weight.get_by_role("link", name="How is this computed?").click()
            expect(page.locator("article.how")).to_contain_text("F")
            expect(page.locator("#weight")).to_contain_text("λ =")
    finally:
        context.close()
