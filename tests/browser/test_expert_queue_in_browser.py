"""Real-browser test of the expert queue: an expert works through disagreements with the keyboard
(1, 2, 0 give a verdict, s skips; typing a note never triggers them). Screenshots go to
test-artifacts/screenshots/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.annotate.models import ExpertVerdict, QueueItem
from tests.annotate.queue_factories import disagreement
from tests.personas import expert

from .test_chat_in_browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_expert_answers_the_queue_with_the_keyboard(site, page, shot):
    erin = expert("erin")
    first, second, third = (disagreement(n, reasoning=f"<script>window.pwned = {n}</script> I prefer 1.")
                            for n in (1, 2, 3))
    log_in(page, "erin")
    page.get_by_role("link", name="Annotate").click()
    expect(page).to_have_url(re.compile(r"/annotate/$"))
    expect(page.locator("pre.question")).to_have_text("Question 1?")
    expect(page.locator(".reasoning").first).to_contain_text("<script>window.pwned = 1</script>")
    expect(page.locator(".unparseable").first).to_contain_text("no verdict marker")
    expect(page.locator("#progress")).to_contain_text("Answered by you: 0")
    assert page.evaluate("window.pwned === undefined")
    shot(page, "first-item")

    page.keyboard.press("1")
    expect(page.locator("pre.question")).to_have_text("Question 2?")
    expect(page.locator("#progress")).to_contain_text("Answered by you: 1")

    page.get_by_text("Add a note").click()  # the note folds in the verdict bar
    note = page.get_by_label("Note (optional)")
    note.fill("")
    note.press_sequentially("2 of 3 steps")  # digits typed into the note submit nothing
    expect(page.locator("pre.question")).to_have_text("Question 2?")
    note.evaluate("el => el.blur()")
    page.keyboard.press("2")
    expect(page.locator("pre.question")).to_have_text("Question 3?")

    page.keyboard.press("s")
    expect(page.locator("#done")).to_contain_text("Nothing left for you here")
    shot(page, "done")

    answers = {v.item_id: (v.verdict, v.note) for v in ExpertVerdict.objects.filter(expert=erin)}
    assert answers == {first.pk: (1, ""), second.pk: (2, "2 of 3 steps")}
    assert QueueItem.objects.get(pk=third.pk).status == "open"
    assert page.console_errors == []
