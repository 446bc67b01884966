"""A visitor opens a board on the running site: right under the table, a plain line says how far the
automatic score agrees with the board's people, or, on a site with no votes yet (as a `make run` demo
has), that there is not enough human signal yet: no figure is made up. With votes, the weighted column
sorts on a click in the order the JSON gives, and the CSV carries it; at 1366 px and on a phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .world import build

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(site, tmp_path):
    return build(tmp_path)


def test_a_board_without_votes_says_the_automatic_score_cannot_be_checked_against_people_yet(site, page, shot):
    page.goto("/")
    line = page.locator("p.validity")
    expect(line).to_contain_text("Not enough human signal yet to check the automatic score against people here: "
                                 "0 arena votes between two scored answers, 30 needed.", timeout=20_000)
    expect(line.locator("a")).to_have_attribute("href", "/metaeval/")
    shot(page, "board validity line")


# --- a board with people's votes: the line beside the columns, the weighted ranking ------------------------

SIZES = {"1366": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
VOTES = 34  # above the 30 a board needs before it checks its automatic score against people's votes


def seed_votes(world) -> None:
    """VOTES counted arena votes in the world's writing board between two of its ranked models, each answer
    in the chat and indexed with its length and its Sa: the voted answer has the higher Sa in 29 of them and is the
    longer one in half, so the automatic score beats preferring the longer answer and earns a weight. Every
    ranked model has an arena line, so each has a weighted score."""
    import secrets

    from apps.chain.models import ArenaBattle, LedgerInteraction
    from apps.chat.models import Interaction
    from apps.leaderboard import entries
    from apps.leaderboard.models import ArenaEntry

    wad = 10**18
    models = ["0x" + f"{k + 1:02x}" * 32 for k in range(12)]

    def answer(model: str, text: str, sa: float) -> str:
        iid = "0x" + secrets.token_hex(32)
        Interaction.objects.create(conversation_id=world.conversation, prompt="Write a haiku.", answer=text,
                                   status=Interaction.Status.DONE, interaction_id=iid)
        LedgerInteraction.objects.create(interaction_id=iid, model_id=model, context_id=world.context, user="0x0",
                                         has_reference=True, sa=int(sa * wad), wa=0, evidence_cid="bafy",
                                         auto_tx="0x", auto_block=1, answer_chars=len(text))
        return iid

    winner, loser = models[11], models[4]
    for k in range(VOTES):
        agree = k % 6 != 5
        long_text, short_text = "An old pond; a frog jumps in, the sound of water.", "Pond. Frog. Splash."
        a = answer(winner, long_text if k % 2 else short_text, 0.8 if agree else 0.3)
        b = answer(loser, short_text if k % 2 else long_text, 0.3 if agree else 0.8)
        ArenaBattle.objects.create(battle_id="0x" + secrets.token_hex(32), context_id=world.context, model_a=winner,
                                   model_b=loser, interaction_a=a, interaction_b=b, user="0x0", voided=False,
                                   block_number=1, tx="0x", outcome=1, counted=True)
    for k, model in enumerate(models[3:], start=3):
        ArenaEntry.objects.create(model_id=model, context_id=world.context, elo=900.0 + 25 * k, ci_low=860.0 + 25 * k,
                                  ci_high=940.0 + 25 * k, rank=13 - k, battles=VOTES, wins=VOTES // 2, ties=0,
                                  losses=VOTES - VOTES // 2, win_rate=0.5)
    entries.bump(None)


def rows_of(page) -> list[str]:
    return page.eval_on_selector_all("table.board tbody tr[data-model]", "rows => rows.map(r => r.dataset.model)")


@pytest.mark.parametrize("size", list(SIZES))
def test_the_validity_line_sits_beside_the_columns_and_the_weighted_ranking_sorts_as_its_json_and_csv(
        site, chromium, world, shot, size):
    import csv
    import io

    from .test_board_in_browser import open_at

    context, page = open_at(chromium, site, size)
    try:
        # Before any vote: not enough human signal yet, said right under the table, and no weighted score.
        page.goto(f"/?context={world.context}")
        line = page.locator("#board-validity")
        expect(line).to_contain_text("Not enough human signal yet to check the automatic score against people "
                                     "here: 0 arena votes between two scored answers, 30 needed.")
        expect(page.locator("#board-weighted")).to_contain_text(
            "the automatic score counts for nothing until it can be checked against at least 30 votes here")
        expect(page.locator("table.board.provisional td.weighted").first).to_have_text("—")  # nobody rated it
        shot(page, f"not enough human signal {size}")

        seed_votes(world)
        page.goto(f"/?context={world.context}")
        expect(line).to_contain_text("The automatic score agrees with people's votes here 85% [")
        expect(line).to_contain_text(f"of {VOTES}; preferring the longer answer: 50%.")
        expect(page.locator("#board-weighted")).to_contain_text("the automatic score counts 0.")
        # Beside the columns: the line comes right after the tables, before the arena's and others' notes.
        order = page.evaluate("""() => [...document.querySelectorAll(
            '#board-table > .table-frame, #board-table > section.provisional, #board-validity, #board-weighted')]
            .map(el => el.id || el.className)""")
        assert order[-2:] == ["board-validity", "board-weighted"], order
        width = SIZES[size]["width"]
        assert page.evaluate("document.documentElement.scrollWidth") <= width, "the page does not scroll sideways"
        for sel in ("#board-validity", "#board-weighted"):
            box = page.locator(sel).bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, (sel, box)
            size_px = page.eval_on_selector(sel, "el => parseFloat(getComputedStyle(el).fontSize)")
            assert size_px >= 12, (sel, size_px)  # readable on a phone
        line.scroll_into_view_if_needed()
        shot(page, f"validity line {size}")
        # Each column's own line, a click away under the table: the automatic score's names the votes.
        columns = page.locator("#board-columns")
        columns.locator("summary").click()
        expect(columns.locator("dd").nth(4)).to_contain_text(f"checked against {VOTES} of people's votes here")
        expect(columns.locator("dt")).to_have_count(8)
        box = columns.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
        columns.scroll_into_view_if_needed()
        shot(page, f"column lines {size}")

        # The weighted column sorts on a click; its order is the JSON's, and the CSV carries the column.
        header = page.locator("table.board.ranked th[data-sort=weighted]")
        header.locator("a").click()
        expect(header).to_have_attribute("aria-sort", "descending")
        # On a phone the table scrolls in its frame: the sorted column is brought into view.
        frame = page.locator("#board-table .table-frame").first
        expect(header).to_be_in_viewport()
        box, frame_box = header.bounding_box(), frame.bounding_box()
        assert box["x"] + box["width"] <= frame_box["x"] + frame_box["width"] + 1, (box, frame_box)
        json_url = page.locator("a.export-json").get_attribute("href")
        assert "sort=weighted" in json_url and "dir=desc" in json_url, json_url
        data = page.request.get(json_url).json()
        assert rows_of(page) == [r["model_id"] for r in data["ranked"] + data["provisional"]]
        ranks = [r["weighted_rank"] for r in data["ranked"]]
        assert None not in ranks and ranks == sorted(ranks), ranks  # by the weighted rank, best first
        assert data["validity"]["columns"]["ra"]["status"] == "measured"
        assert data["validity"]["columns"]["ra"]["pairs_non_tie"] == VOTES
        first = page.locator("table.board.ranked tbody tr").first.locator("td.weighted")
        expect(first).to_contain_text(f"{data['ranked'][0]['weighted']:.3f}")
        header.locator("a").click()
        expect(header).to_have_attribute("aria-sort", "ascending")
        data = page.request.get(page.locator("a.export-json").get_attribute("href")).json()
        assert rows_of(page) == [r["model_id"] for r in data["ranked"] + data["provisional"]]
        # The line is loaded again with the swapped table, still beside it.
        expect(line).to_contain_text("The automatic score agrees with people's votes here 85% [")
        table = list(csv.DictReader(io.StringIO(page.request.get(
            page.locator("a.export-csv").get_attribute("href")).text())))
        assert {"weighted", "weighted_low", "weighted_high", "weighted_rank"} <= set(table[0])
        assert [r["model_id"] for r in table] == [r["model_id"] for r in data["ranked"] + data["provisional"]]
        assert float(table[0]["weighted"]) == pytest.approx(data["ranked"][0]["weighted"], abs=1e-6)
        shot(page, f"sorted by weighted {size}")
    finally:
        context.close()
