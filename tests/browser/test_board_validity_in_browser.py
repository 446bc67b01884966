"""A visitor opens a board on the running site: under the table, a plain line says how far the
automatic score agrees with the board's people, or, on a site with no votes yet (as a `make run` demo
has), that it cannot be checked yet: no figure is made up."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_board_without_votes_says_the_automatic_score_cannot_be_checked_against_people_yet(site, page, shot):
    page.goto("/")
    line = page.locator("p.validity")
    expect(line).to_contain_text("The automatic score cannot be checked against people here yet: 0 arena votes "
                                 "between two scored answers, 30 needed.", timeout=20_000)
    expect(line.locator("a")).to_have_attribute("href", "/metaeval/")
    shot(page, "board validity line")
