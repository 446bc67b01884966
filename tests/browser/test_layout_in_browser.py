"""The pages as people use them on a phone and in the dark: the menu folds behind a button
on a phone and opens with it; the dark theme follows the system's setting; a board scrolls inside its
frame with the model column in view; the conversation list is searched, renamed and deleted in the
browser; the expert queue's verdict bar is on screen without scrolling, a saved verdict is confirmed,
and a long item folds."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.annotate.models import ExpertVerdict
from apps.chat.models import Conversation

from .test_accessibility import SIZES
from .world import build, log_in

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LUMINANCE = """(sel) => {
    const [r, g, b] = getComputedStyle(document.querySelector(sel)).backgroundColor.match(/\\d+/g).map(Number);
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
}"""


def open_as(chromium, site, who: str | None, size: str = "desktop", scheme: str = "light", viewport=None):
    """A browser context (signed in as `who`, if any) at `size` ("desktop" or "phone"), or at `viewport`."""
    context = chromium.new_context(base_url=site.url, viewport=viewport or SIZES[size], color_scheme=scheme,
                                   is_mobile=size == "phone", has_touch=size == "phone")
    page = context.new_page()
    if who:
        log_in(page, who)
    return context, page


@pytest.fixture
def world(site, tmp_path):
    return build(tmp_path)


def test_the_menu_folds_on_a_phone_and_the_theme_follows_the_system(site, chromium, world, shot):
    context, page = open_as(chromium, site, None, "phone", "dark")
    try:
        page.goto("/")
        menu = page.get_by_role("button", name="Menu")
        expect(menu).to_be_visible()
        expect(menu).to_have_attribute("aria-expanded", "false")
        expect(page.locator("#site-nav")).to_be_hidden()
        menu.click()
        expect(menu).to_have_attribute("aria-expanded", "true")
        expect(page.locator("#site-nav").get_by_role("link", name="Models")).to_be_visible()
        shot(page, "phone-dark-menu-open")
        page.locator("#site-nav").get_by_role("link", name="Boards").focus()
        page.keyboard.press("Escape")
        expect(page.locator("#site-nav")).to_be_hidden()
        expect(menu).to_be_focused()
        menu.click()
        page.locator("#site-nav").get_by_role("link", name="Models").click()
        expect(page).to_have_url(re.compile(r"/models/$"))
        assert page.evaluate(LUMINANCE, "body") < 0.15  # dark
        # The board scrolls inside its frame, and its model column stays in view while it does.
        page.goto(f"/?context={world.context}")
        frame = page.locator(".table-frame").first
        assert frame.evaluate("f => f.scrollWidth > f.clientWidth")
        name_cell = page.locator("table.board.ranked tbody tr").first.locator("td").nth(1)
        frame.evaluate("f => { f.scrollLeft = 400; }")
        scrolled = frame.evaluate("f => f.scrollLeft")
        assert scrolled > 100
        # Sticky: the model column stops at the frame's left edge instead of leaving with the scroll.
        assert name_cell.bounding_box()["x"] >= frame.bounding_box()["x"] - 1
        assert page.evaluate("document.documentElement.scrollWidth") <= SIZES["phone"]["width"]
    finally:
        context.close()
    context, page = open_as(chromium, site, None, "desktop", "light")
    try:
        page.goto("/")
        expect(page.get_by_role("button", name="Menu")).to_be_hidden()
        expect(page.locator("#site-nav").get_by_role("link", name="Models")).to_be_visible()
        assert page.evaluate(LUMINANCE, "body") > 0.9  # light
        assert page.evaluate(LUMINANCE, "header") < 0.2  # the dark header, readable in both
    finally:
        context.close()


def test_conversations_are_searched_renamed_and_deleted_in_the_browser(site, chromium, world, shot):
    context, page = open_as(chromium, site, "alice", "phone", "light")
    try:
        page.goto("/chat/")
        listed = page.locator("#conversation-list ul.conversations > li")
        expect(listed).to_have_count(1)
        search = page.get_by_label("Search your conversations")
        search.fill("volcano")  # htmx asks as the user types
        expect(page.locator("#conversation-list")).to_contain_text("No conversation matches “volcano”")
        search.fill("counter")  # a word from the answer's code
        expect(listed).to_have_count(1)
        expect(page.locator("#conversation-list")).to_contain_text("1 conversation matches “counter”")
        shot(page, "searched")

        listed.first.locator("summary").click()
        box = listed.first.get_by_label("New name")
        box.fill("Word counts in Python")
        listed.first.get_by_role("button", name="Rename").click()
        expect(page.locator("ul.messages")).to_contain_text("Renamed to “Word counts in Python”")
        expect(page.locator("#conversation-list a").first).to_have_text("Word counts in Python")
        assert Conversation.objects.get(pk=world.conversation).title == "Word counts in Python"

        page.locator("#conversation-list details.manage summary").first.click()
        page.locator("#conversation-list").get_by_role("link", name="Delete…").click()
        expect(page.locator(".deletion-note")).to_contain_text("on-chain records")
        expect(page.locator(".deletion-note")).to_contain_text("IPFS")
        shot(page, "delete-asks")
        page.get_by_role("button", name="Delete this conversation").click()
        expect(page).to_have_url(re.compile(r"/chat/$"))
        expect(page.locator("ul.messages")).to_contain_text("Deleted “Word counts in Python”")
        expect(page.locator("#conversation-list")).to_contain_text("None yet.")
        assert not Conversation.objects.filter(pk=world.conversation).exists()
    finally:
        context.close()


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_the_verdict_bar_is_on_screen_a_verdict_is_confirmed_and_a_long_item_folds(site, chromium, world, shot,
                                                                                   size):
    context, page = open_as(chromium, site, "erin", size, "light")
    try:
        page.goto("/annotate/")
        bar = page.locator(".verdict-bar")
        height = SIZES[size]["height"]
        box = bar.bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= height + 1, f"the bar is off screen: {box}"
        assert page.evaluate("document.documentElement.scrollHeight") > height  # the item is longer than a screen
        page.mouse.wheel(0, 1200)
        page.wait_for_timeout(200)
        box = bar.bounding_box()
        assert box["y"] + box["height"] <= height + 1  # still there after scrolling
        # A long part folds away.
        debate = page.locator("details.fold").nth(1)
        expect(debate.locator(".reasoning").first).to_be_visible()
        debate.locator("summary").first.click()
        expect(debate.locator(".reasoning").first).to_be_hidden()
        shot(page, f"{size}-queue-folded")
        page.get_by_role("button", name="Submission 2 is better").click()
        confirmed = page.locator("ul.messages [role=status]")
        expect(confirmed).to_contain_text("Saved: “Submission 2 is better” on item")
        expect(page.locator("#done")).to_contain_text("Nothing left for you here")
        assert ExpertVerdict.objects.get(item_id=world.item).verdict == 2
    finally:
        context.close()
