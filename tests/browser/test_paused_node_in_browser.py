"""The site as a person sees it while its chain node is paused (SIGSTOP, as a stalled node or network
looks): the conversation page, a rating, an arena vote, verify and the boards each answer within a
second in Chromium; the top of every page says the chain is not answering and what that means; the
rating's button shows it is being sent and sends once. On a phone too, the conversation, the global
board and verify answer within a second with the banner on the first screen, above the heading. After the node resumes, the rating reaches the
chain exactly once. (tests/oracle/test_paused_node.py checks the same server-side, with the test client.)"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter

import pytest
from playwright.sync_api import expect

from apps.chain.demo import context_id
from apps.chain.indexer import fetch_all
from apps.chain.ledger import default_ledger
from apps.chain.models import Context, LedgerInteraction, OutboxItem, Registration
from apps.chat.accounts import profile_of
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import Battle, Conversation, Rating, RegisteredModel
from apps.chat.ratings import queue_waiting_ratings
from apps.chat.replay import import_mtbench
from apps.leaderboard.views import verify as verify_view
from lib.ids import hex32
from tests.chat.factories import write_mtbench
from tests.chat.test_ratings import auto_eval_queued
from tests.personas import user

from .test_layout_in_browser import open_as
from .world import log_in

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LIMIT_S = 1.0
DETECTED_S = 15  # a probe's timeout plus its refresh (apps/chain/health.py), with room for a busy machine
QUESTION = "Describe a lantern on a quay in one sentence."
ANSWERS = {"alder-7b": "A lantern swings on the quay, its small flame steady in the wet wind.",
           "birch-13b": "On the quay a lantern glows yellow over the ropes and the dark water."}
# The time from the navigation's start to the last byte of the page, as the browser measured it.
ANSWERED_MS = "() => { const n = performance.getEntriesByType('navigation')[0]; return n.responseEnd - n.startTime; }"
# Records whether the rating form, while its request is out, disabled its button and showed "Sending…".
WATCH_FORM = """(form) => {
  window.__seen = {disabled: false, sending: false};
  const button = form.querySelector('button[type=submit]'), sending = form.querySelector('.sending');
  new MutationObserver(() => {
    if (button.disabled) window.__seen.disabled = true;
    if (form.classList.contains('htmx-request') && getComputedStyle(sending).display !== 'none')
      window.__seen.sending = true;
  }).observe(form, {attributes: true, subtree: true});
}"""


def two_replay_models(tmp_path) -> list[RegisteredModel]:
    root = write_mtbench(tmp_path / "mt_bench", {1: ("writing", [QUESTION, "Shorter."])},
                         {name: {1: [answer, "Short."]} for name, answer in ANSWERS.items()})
    import_mtbench(root, contexts=[Context.objects.get(context_id=context_id("writing"))], progress=lambda _: None)
    return list(RegisteredModel.objects.filter(name__in=ANSWERS).order_by("name"))


def answered(alice, conversation: Conversation, text: str):
    interaction = begin_interaction(alice, conversation, QUESTION)
    finish_interaction(interaction, text)
    return interaction


def battle_to_vote_on(alice, writing: Context, models: list[RegisteredModel]) -> Battle:
    """A battle whose two answers are in, as the arena's sockets leave it (the arena draws only models
    that answer free prompts; these two replay models answer this question)."""
    sides = [Conversation.objects.create(user=alice, model=m, context=writing, arena=True,
                                         title=f"Arena · writing · model {label}")
             for m, label in zip(models, "AB")]
    battle = Battle.objects.create(user=alice, context=writing, conversation_a=sides[0], conversation_b=sides[1],
                                   battle_id=hex32(os.urandom(32)))
    for side, model in zip(sides, models):
        answered(alice, side, ANSWERS[model.name])
    return battle


def goto_timed(page, path: str) -> tuple[float, float]:
    """Open `path`: (seconds until the page's last byte, as the browser measured it; seconds until loaded)."""
    started = time.monotonic()
    page.goto(path)
    return page.evaluate(ANSWERED_MS) / 1000, time.monotonic() - started


def answer_time(page, path: str, click) -> float:
    """Seconds from `click` until the answer to the POST it sends to `path` has fully arrived."""
    started = time.monotonic()
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith(path)) as sent:
        click()
    sent.value.finished()
    return time.monotonic() - started


def says_at_the_top(page) -> None:
    banner = page.locator("main .chain-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("not answering")
    expect(banner).to_contain_text("everything is saved here and sent when it is back")
    box, heading = banner.bounding_box(), page.locator("main h1").first.bounding_box()
    assert box["y"] + box["height"] <= page.viewport_size["height"], "the banner is below the first screen"
    assert box["y"] < heading["y"], "the banner is under the page's heading"


def test_with_the_node_paused_pages_rating_and_vote_answer_at_once_and_the_rating_lands_once_after(
        site, page, chromium, shot, tmp_path, request):
    writing = Context.objects.get(context_id=context_id("writing"))
    models = two_replay_models(tmp_path)
    alice = user("alice")
    site.wait("the models and alice on-chain", lambda: not OutboxItem.objects.exclude(status="confirmed").exists()
              and Registration.objects.filter(address__iexact=profile_of(alice).address).exists(), 60)
    rated = answered(alice, start_conversation(alice, models[0], writing), ANSWERS[models[0].name])
    auto_eval_queued(rated)  # what the oracle does once it has scored the answer
    site.wait("the answer's automatic score on-chain and indexed",
              lambda: LedgerInteraction.objects.filter(interaction_id=rated.interaction_id).exists(), 60)
    battle = battle_to_vote_on(alice, writing, models)

    log_in(page, "alice")
    phone_context, phone = open_as(chromium, site, "alice", "phone")
    request.addfinalizer(phone_context.close)
    pages = {"conversation": f"/chat/{rated.conversation_id}/", "arena": f"/arena/{battle.pk}/",
             "global board": "/", "board": f"/?context={writing.context_id}",
             "verify": f"/verify/?context={writing.context_id}"}
    for path in pages.values():
        page.goto(path)  # what the site's process reads once, read while the node answers
    expect(page.locator("#verdict")).to_have_attribute("data-ok", "true", timeout=30_000)
    expect(page.locator("main .chain-banner")).to_have_count(0)

    node = site.chain.proc.pid
    took, loaded = {}, {}
    os.kill(node, signal.SIGSTOP)
    try:
        paused = time.monotonic()
        # Every page answers at once while the site has not noticed yet, then says it at the top.
        polls = []
        while True:
            polls.append(goto_timed(page, pages["board"]))
            if page.locator("main .chain-banner").count():
                break
            assert time.monotonic() - paused < DETECTED_S, "the pages never said the chain is not answering"
            page.wait_for_timeout(500)
        took["board (until noticed)"] = max(s for s, _ in polls)
        print(f"noticed {time.monotonic() - paused:.1f} s after the pause, in {len(polls)} loads")
        for name, path in pages.items():
            took[name], loaded[name] = goto_timed(page, path)
            says_at_the_top(page)
            if name == "global board":
                shot(page, "global-board-paused")
            if name != "verify":
                continue
            # A check made at the served board's block stands; one not made yet waits for the node, saying so.
            expect(page.locator("#verdict[data-ok=true], #checking")).to_have_count(1)
            if page.locator("#checking").count():
                expect(page.locator("#checking")).to_contain_text("the chain is not answering right now")
                # The node known to be down, the page does not wait for a check that cannot be made.
                assert took[name] < verify_view.WAIT_S, took[name]
            else:
                expect(page.locator("#checked-block")).to_contain_text("Checked at block")
        shot(page, "verify-paused")

        # The rating: the button says it is working and cannot send twice; the answer comes at once.
        page.goto(pages["conversation"])
        section = page.locator(f"#rating-{rated.pk}")
        for field, value in {"reliability": 4, "completeness": 5, "utility": 3, "familiarity": 2, "trust": 4,
                             "uncertainty": 1}.items():
            section.locator(f'fieldset.likert[data-field="{field}"] input[value="{value}"]').check()
        section.locator("form.questionnaire").evaluate(WATCH_FORM)
        posts = []
        page.on("request", lambda r: r.method == "POST" and r.url.endswith(f"/{rated.pk}/rating")
                and posts.append(r.url))
        took["rating"] = answer_time(page, f"/{rated.pk}/rating",
                                     section.get_by_role("button", name="Send my rating").dblclick)
        expect(section).to_have_attribute("data-status", "waiting")
        assert page.evaluate("window.__seen") == {"disabled": True, "sending": True}
        assert len(posts) == 1, posts
        expect(section).to_contain_text("Your rating")
        expect(section).to_contain_text("your rating is saved and will be sent")
        says_at_the_top(page)
        shot(page, "rating-paused")

        # The arena vote.
        page.goto(pages["arena"])
        took["vote"] = answer_time(page, f"/arena/{battle.pk}/vote",
                                   page.locator("#arena-vote-box").get_by_role("button", name="A is better").click)
        expect(page.locator("#arena-vote-box h2")).to_have_text("Your vote: A is better")
        says_at_the_top(page)
        shot(page, "vote-paused")

        # On a phone: as fast, the banner on the first screen above the heading, the rating saved.
        for name in ("conversation", "global board", "verify"):
            took[f"phone {name}"], loaded[f"phone {name}"] = goto_timed(phone, pages[name])
            says_at_the_top(phone)
            if name == "conversation":
                expect(phone.locator(f"#rating-{rated.pk}")).to_have_attribute("data-status", "waiting")
                shot(phone, "conversation-paused-phone")
        expect(phone.locator("#verdict[data-ok=true], #checking")).to_have_count(1)

        print("with the node paused, answered in (s):", {k: round(v, 3) for k, v in took.items()},
              "loaded in (s):", {k: round(v, 3) for k, v in loaded.items()},
              f"paused for {time.monotonic() - paused:.1f} s")
        slow = {name: round(s, 2) for name, s in took.items() if s >= LIMIT_S}
        assert not slow, f"waited on the paused node: {slow}"
    finally:
        os.kill(node, signal.SIGCONT)

    # Once the node is back, the oracle worker's pass queues the saved rating; it goes out once.
    assert queue_waiting_ratings() == 1 and queue_waiting_ratings() == 0
    steps = OutboxItem.objects.filter(function__in=["humEval", "updateReputation"])
    site.wait("the rating's two steps confirmed, and indexed", lambda: steps.filter(status="confirmed").count() == 2
              and LedgerInteraction.objects.filter(interaction_id=rated.interaction_id).exclude(human_tx="").exists(),
              60)
    # Past the window after which the submitter sends a transaction again (and a few blocks more), so a
    # second copy still on its way would have landed: the rating reached the chain exactly once.
    time.sleep(int(site.env["LLMCHAIN_RESEND_AFTER_S"]) + 3)
    ledger = default_ledger()
    mine = [e for e in fetch_all(ledger, ledger.deployment.deployBlock, ledger.client.block_number())
            if e["args"].get("interactionId") is not None
            and hex32(e["args"]["interactionId"]) == rated.interaction_id]
    # One automatic score, one rating, and the three moves of the reputation they make (the automatic
    # score's, the rating's people's part, then R), in the context and on the global board.
    assert [e["event"] for e in mine].count("HumanEvaluated") == 1, mine
    moves = Counter(hex32(e["args"]["contextId"]) for e in mine if e["event"] == "ReputationUpdated")
    assert moves == {writing.context_id: 3, "0x" + "00" * 32: 3}, moves
    assert sorted(steps.values_list("function", flat=True)) == ["humEval", "updateReputation"]
    assert Rating.objects.filter(interaction=rated).count() == 1
    page.goto(pages["conversation"])
    expect(section).to_have_attribute("data-status", re.compile(r"queued|onchain"))
    # The pages stop saying it once a probe finds the node again (later tests share this site).
    deadline = time.monotonic() + DETECTED_S
    while page.locator("main .chain-banner").count():
        assert time.monotonic() < deadline, "the pages still say the chain is not answering"
        page.wait_for_timeout(500)
        page.reload()
    assert not page.console_errors, page.console_errors
