"""Arena mode in a real browser: a blind battle with both answers streaming side by side,
a vote, the vote on-chain (the oracle scores both answers; the battle is opened and the user's
signed vote cast in one relayed transaction), the reveal once it is final, and the arena board moving; a battle where a model named itself
is voted on, revealed, recorded on-chain as not counted, and left off the board."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.chain.demo import context_id
from apps.chain.models import ArenaBattle
from apps.chat.models import Battle
from apps.chat.registry import ModelFields, register_model
from tests.browser.conftest import wait_for_js
from tests.openai_endpoint import OpenAIEndpoint
from tests.personas import developer, user

from .test_layout_in_browser import open_as

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ANSWER_TIMEOUT_MS = 120_000
ON_CHAIN_S = 240  # the oracle scores both answers (BERTScore on CPU, loaded on its first job), then two calls
BOTH_STREAMING = """() => { const panes = [...document.querySelectorAll('#arena .pane')];
  return panes.length === 2 && panes.every(p => { const t = p.querySelector('.turn');
    return t && (t.dataset.status === 'streaming' || t.dataset.status === 'done')
      && t.querySelector('.answer').textContent.trim().length > 0; }); }"""


@pytest.fixture
def contenders(site, model_server, request):
    """In `writing`: two models answered by the built-in model server (real, streaming). In `math`:
    two scripted endpoints, one of which names itself in its answer."""
    dave = developer("dave")
    writing, math = context_id("writing"), context_id("math")
    from apps.chain.models import Context

    for name in ("seagull-135m", "pelican-135m"):
        register_model(dave, ModelFields(name=name, provider="Harbour lab", endpoint_url=model_server.url,
                                         endpoint_model=model_server.model, api_key=model_server.api_key,
                                         contexts=(writing,)))
    parrot = OpenAIEndpoint(models=("parrot",), answer="I am Parrot, a friendly model: two plus two is four.")
    heron = OpenAIEndpoint(models=("heron",), answer="Two plus two is four, and four is even.")
    for endpoint in (parrot, heron):
        request.addfinalizer(endpoint.close)
    register_model(dave, ModelFields(name="parrot-7b", provider="Bird lab", endpoint_url=parrot.url,
                                     endpoint_model="parrot", contexts=(math,)))
    register_model(dave, ModelFields(name="heron-7b", provider="Bird lab", endpoint_url=heron.url,
                                     endpoint_model="heron", contexts=(math,)))
    from apps.chat.models import RegisteredModel

    RegisteredModel.objects.update(healthy=True)
    user("alice")
    return Context.objects.get(context_id=writing), Context.objects.get(context_id=math)


def _battle(page, context_name: str, prompt: str) -> Battle:
    page.goto("/arena/")
    page.locator("select[name=context]").select_option(label=context_name)
    page.get_by_role("button", name="Start a battle").click()
    expect(page).to_have_url(re.compile(r"/arena/\d+/$"))
    battle = Battle.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[1]))
    expect(page.locator("#arena-prompt button[type=submit]")).to_be_enabled(timeout=10_000)  # both sockets open
    page.locator("#prompt").fill(prompt)
    page.keyboard.press("Enter")
    return battle


def _both_done(page) -> None:
    for side in ("a", "b"):
        expect(page.locator(f'#arena .pane[data-side="{side}"] .turn')).to_have_attribute(
            "data-status", "done", timeout=ANSWER_TIMEOUT_MS)


def reveal_comes_first(page) -> None:
    """Once the names are revealed, the vote and its reveal stand above the answers and their rating
    forms (one per side), on the first screen."""
    expect(page.locator(".arena-vote .reveal")).to_be_visible()
    ratings = page.locator("#arena .pane section.rating")
    expect(ratings).to_have_count(2)
    vote = page.locator("#arena-vote-box").bounding_box()
    assert vote["y"] + vote["height"] <= page.viewport_size["height"], ("the reveal is below the first screen", vote)
    for box in [page.locator("#arena .pane").nth(n).bounding_box() for n in range(2)] + [
            ratings.nth(n).bounding_box() for n in range(2)]:
        assert vote["y"] + vote["height"] <= box["y"], ("the reveal comes after the answers or their forms", vote, box)


def _names(battle: Battle) -> tuple[str, str]:
    return battle.conversation_a.model.name, battle.conversation_b.model.name


def test_a_blind_battle_streams_both_answers_reveals_after_the_vote_and_moves_the_arena_board(
        site, oracle_worker, chromium, contenders, shot):
    writing, math = contenders
    context, page = open_as(chromium, site, "alice")
    try:
        battle = _battle(page, "writing", "Describe a harbour at dawn in two sentences.")
        wait_for_js(page, BOTH_STREAMING, timeout=ANSWER_TIMEOUT_MS)  # both panes fill as the models answer
        shot(page, "arena-streaming")
        _both_done(page)
        main = page.locator("main")
        for name in ("seagull", "pelican"):
            expect(main).not_to_contain_text(name)  # hidden until the vote
        vote = page.locator("form.vote")
        expect(vote).to_contain_text("Which answer is better?")
        shot(page, "arena-before-vote")
        vote.get_by_role("button", name="B is better").click()
        a_name, b_name = _names(battle)
        # The names wait for the vote to be final on-chain: no other vote can replace it by then.
        expect(page.locator(".arena-vote .on-its-way")).to_contain_text("on its way to the chain")
        for name in ("seagull", "pelican"):
            expect(main).not_to_contain_text(name)
        battle.refresh_from_db()
        assert (battle.outcome, battle.self_named) == ("b", "")

        site.wait("the vote on-chain and indexed", lambda: ArenaBattle.objects.filter(
            battle_id=battle.battle_id, outcome__isnull=False).exists(), ON_CHAIN_S)
        expect(page.locator(".arena-vote .reveal")).to_contain_text(f"Model A was {a_name}, model B was {b_name}",
                                                                    timeout=30_000)
        expect(page.locator('.pane[data-side="a"] h2')).to_contain_text(a_name)
        reveal_comes_first(page)
        shot(page, "arena-revealed")
        phone_context, phone = open_as(chromium, site, "alice", "phone")
        try:
            phone.goto(f"/arena/{battle.pk}/")
            reveal_comes_first(phone)
            shot(phone, "arena-revealed-phone")
        finally:
            phone_context.close()
        row = ArenaBattle.objects.get(battle_id=battle.battle_id)
        assert (row.outcome, row.counted, row.voided) == (2, True, False)
        assert row.user == battle.user.profile.address
        expect(page.locator(".arena-vote .chain-status")).to_contain_text("it counts on the arena board",
                                                                          timeout=30_000)

        # The board moves: B, which won, stands above A on the arena columns of `writing`.
        winner, loser = battle.conversation_b.model, battle.conversation_a.model
        board = site.wait("the arena board to count the vote", lambda: _arena(page, writing, winner, loser), 60)
        assert board[winner.model_id]["battles"] == board[loser.model_id]["battles"] == 1
        assert board[winner.model_id]["arena_elo"] > board[loser.model_id]["arena_elo"]

        # A battle where a model names itself: revealed, kept, recorded as not counted, off the board.
        battle = _battle(page, "math", "What is two plus two?")
        _both_done(page)
        expect(main).not_to_contain_text("Parrot")  # its answer names it: masked until the vote is final
        page.locator("form.vote").get_by_role("button", name="A is better").click()
        side = "A" if battle.conversation_a.model.name == "parrot-7b" else "B"
        expect(page.locator(".arena-vote .not-counted")).to_contain_text(f"model {side} named itself")
        site.wait("the voided vote on-chain", lambda: ArenaBattle.objects.filter(
            battle_id=battle.battle_id, outcome__isnull=False).exists(), ON_CHAIN_S)
        expect(page.locator(".arena-vote .not-counted")).to_contain_text("parrot-7b named itself", timeout=30_000)
        shot(page, "arena-not-counted")
        row = ArenaBattle.objects.get(battle_id=battle.battle_id)
        assert (row.outcome, row.counted, row.voided) == (1, False, True)
        math_board = _board(page, math)
        assert all(m.get("battles", 0) in (0, None) for m in math_board.values()), math_board
    finally:
        context.close()


def _board(page, context) -> dict[str, dict]:
    """The board's JSON for `context`, by model id."""
    response = page.request.get(f"/api/boards/{context.context_id}")
    assert response.ok, response.text()
    data = response.json()
    return {r["model_id"]: r for r in data["ranked"] + data["provisional"]}


def _arena(page, context, *models):
    board = _board(page, context)
    if all((board.get(m.model_id) or {}).get("battles") for m in models):
        return board
    return None
