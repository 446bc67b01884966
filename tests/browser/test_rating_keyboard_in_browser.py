"""Ratings people finish, in the browser: the questionnaire answered by keyboard
(1-5 on the focused question, Tab to the next), familiarity and trust prefilled from the user's last
rating and shown as such, and optional reasons sent with it."""

from __future__ import annotations

import secrets

import pytest
from playwright.sync_api import expect

from apps.chat.models import Conversation, Interaction, Rating

from .test_layout_in_browser import open_as
from .world import build

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FOCUSED_QUESTION = "() => document.activeElement.closest('fieldset.likert')?.dataset.field"


@pytest.fixture
def world(site, tmp_path):
    built = build(tmp_path)
    # Alice rated another answer of the same model in the same context before.
    conversation = Conversation.objects.get(pk=built.conversation)
    earlier = Interaction.objects.create(conversation=conversation, prompt="Earlier question", answer="Earlier answer",
                                         status=Interaction.Status.DONE, interaction_id="0x" + secrets.token_hex(32))
    Rating.objects.create(interaction=earlier, user=conversation.user, reliability=3, completeness=3, utility=3,
                          familiarity=4, trust=2, uncertainty=3)
    return built


def test_the_questionnaire_is_answered_by_keyboard_with_prefilled_answers(site, chromium, world, shot):
    context, page = open_as(chromium, site, "alice")
    try:
        page.goto(f"/chat/{world.conversation}/")
        form = page.locator("form.questionnaire")
        expect(form).to_be_visible()
        familiarity = form.locator('fieldset[data-field="familiarity"]')
        expect(familiarity).to_have_class("likert prefilled")
        expect(familiarity.locator('input[value="4"]')).to_be_checked()
        expect(familiarity).to_contain_text("Prefilled with your last answer (4)")
        expect(form.locator('fieldset[data-field="trust"] input[value="2"]')).to_be_checked()

        form.locator('fieldset[data-field="reliability"] input[value="1"]').focus()
        for key, field in (("5", "reliability"), ("4", "completeness"), ("3", "utility")):
            assert page.evaluate(FOCUSED_QUESTION) == field
            page.keyboard.press(key)
            expect(form.locator(f'fieldset[data-field="{field}"] input[value="{key}"]')).to_be_checked()
            page.keyboard.press("Tab")  # to the next question
        assert page.evaluate(FOCUSED_QUESTION) == "familiarity"
        page.keyboard.press("5")  # changes the prefilled answer: it is the user's own now
        expect(familiarity.locator('input[value="5"]')).to_be_checked()
        expect(familiarity).not_to_have_class("likert prefilled")
        page.keyboard.press("Tab")
        assert page.evaluate(FOCUSED_QUESTION) == "trust"  # kept as prefilled: Tab goes on
        page.keyboard.press("Tab")
        page.keyboard.press("1")
        expect(form.locator('fieldset[data-field="uncertainty"] input[value="1"]')).to_be_checked()

        form.locator("details.reasons summary").click()
        form.get_by_label("Clear and well explained").check()
        form.get_by_label("Comment").fill("Exactly what I needed.")
        shot(page, "keyboard-rating")
        form.get_by_role("button", name="Send my rating").click()
        expect(page.locator("section.rating .reasons-given")).to_contain_text("Reasons: clear.")
        rating = Rating.objects.exclude(interaction__prompt="Earlier question").get()
        assert (rating.reliability, rating.completeness, rating.utility, rating.familiarity, rating.trust,
                rating.uncertainty) == (5, 4, 3, 5, 2, 1)
        assert rating.tags == ["clear"] and rating.comment == "Exactly what I needed."
    finally:
        context.close()
