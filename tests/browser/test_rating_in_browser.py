"""Real-browser tests of the human evaluation: a new user chats with a replay model, the oracle
scores the answer on-chain, the user answers the 6-item questionnaire, humEval (from the user's
own key) and updateReputation go through the outbox, and the page and the board show Rh and R
moving exactly as ../shared/spec/REPUTATION.md says (computed here by hand from block
timestamps, as tests/oracle/test_human_evaluation.py does). Screenshots go to
test-artifacts/screenshots/."""

from __future__ import annotations

import json
import math
import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from apps.chain.client import ChainClient
from apps.chain.ledger import default_ledger
from apps.chain.models import Context, OutboxItem, Registration, Reputation
from apps.chain.models import LedgerInteraction
from apps.chat.accounts import profile_of
from apps.chat.models import Rating, RegisteredModel
from apps.chat.replay import import_mtbench
from lib.ids import b32
from tests.chat.factories import write_mtbench

from .test_chat_in_browser import send_prompt, sign_up_in_browser, start_chat, wait_answer

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PSI, XI, THETA, LAMBDA = 1 / 3, 2 / 3, 2 / 3, 1e-3
WAD = 10**18
GLOBAL = "0x" + "00" * 32
DAY_S = 86_400
EVAL_TIMEOUT_MS = 120_000  # the oracle loads BERTScore on CPU for its first job
RATING_TIMEOUT_MS = 60_000

QUESTIONS = ["Describe a lighthouse at night in two sentences.",
             "Write one sentence about a quiet harbour in the morning."]
# Three replay models per test, with names of their own: the chain lives for the whole session, so
# a model of another test may already hold a REP in `writing` (and surely does in the global
# context); the thresholds below are therefore taken from the chain's state, never assumed.
ANSWERS = {
    "beacon-7b": ["The lighthouse stands on the dark rocks. Its beam sweeps slowly over the black sea.",
                  "The harbour is still at dawn, the boats resting on calm water."],
    "keeper-13b": ["At night the lighthouse glows above the cliffs. A white beam turns across the waves.",
                   "Morning light falls on the quiet harbour and its sleeping boats."],
    "shoal-3b": ["A tall tower shines over the night sea. Its light circles and warns the ships.",
                 "In the morning the harbour is calm and the water barely moves."],
}
# reliability 5, completeness 4, utility 4 -> Sh = 10/12; familiarity 3, trust 4, uncertainty 2 -> Wh = 8/12.
FIRST = {"reliability": 5, "completeness": 4, "utility": 4, "familiarity": 3, "trust": 4, "uncertainty": 2}
SECOND = {"reliability": 2, "completeness": 3, "utility": 2, "familiarity": 4, "trust": 3, "uncertainty": 1}


# --- the spec, by hand (floats) --------------------------------------------------------------------

def norm(x: int) -> float:
    return (x - 1) / 4


def answer_score(a: dict) -> float:
    return (norm(a["reliability"]) + norm(a["completeness"]) + norm(a["utility"])) / 3


def user_weight(a: dict) -> float:
    return (norm(a["familiarity"]) + norm(a["trust"]) + 1 - norm(a["uncertainty"])) / 3


def decay(d_minutes: float) -> float:
    return (1 - math.exp(-LAMBDA * d_minutes)) / (1 + math.exp(-LAMBDA * d_minutes))


def update(rx: float, s: float, w: float, threshold: float) -> float:
    rate = PSI if s >= threshold else XI
    return (1 - rate * w) * rx + rate * w * s


# --- set-up and chain helpers ------------------------------------------------------------------

def replay_models(tmp_path, questions: list[str]) -> dict[str, RegisteredModel]:
    """The three replay models of ANSWERS in `writing`, each answering `questions`."""
    root = write_mtbench(tmp_path / "mt_bench",
                         {n: ("writing", [q, "Shorter."]) for n, q in enumerate(questions, start=1)},
                         {name: {n: [texts[n - 1], "Short."] for n in range(1, len(questions) + 1)}
                          for name, texts in ANSWERS.items()})
    counts = import_mtbench(root, contexts=list(Context.objects.all()), progress=lambda _: None)
    assert counts["models"] == 3
    return {m.name: m for m in RegisteredModel.objects.filter(name__in=ANSWERS)}


def writing_id() -> str:
    return Context.objects.get(name="writing").context_id


def block_time(ledger, tx_hash: str) -> int:
    receipt = ledger.client.request("eth_getTransactionReceipt", [tx_hash])
    block = ledger.client.request("eth_getBlockByNumber", [receipt["blockNumber"], False])
    return int(block["timestamp"], 16)


def sign_up_and_wait_a_day(site, page, username: str) -> str:
    """Sign up in the browser, wait for the registration on-chain, then move the chain's clock on a day.

    D, the weight's time factor, counts from the user's registration (block timestamp) for a
    first rating and is capped at 1440 minutes: a day later the first rating counts fully, without
    the test waiting a day. anvil's evm_increaseTime shifts every later block's timestamp."""
    sign_up_in_browser(page, username)
    address = profile_of(get_user_model().objects.get(username=username)).address
    site.wait("the user's registration on-chain and indexed",
              lambda: Registration.objects.filter(address__iexact=address).exists(), 60)
    client = ChainClient(site.chain.url)
    before = int(client.get_block("latest")["timestamp"], 16)
    client.request("evm_increaseTime", [DAY_S])
    client.request("evm_mine", [])
    assert int(client.get_block("latest")["timestamp"], 16) - before >= DAY_S
    return address


def chat_and_wait_evaluation(page, model: str, prompt: str) -> int:
    """One question to a replay model in a new conversation; waits until its autoEval is on-chain."""
    page.goto("/chat/")
    start_chat(page, "writing", f"{model} (replay)")
    send_prompt(page, prompt)
    assert wait_answer(page, 30_000)
    turn = page.locator("#messages .turn").last
    pk = int(turn.get_attribute("id").removeprefix("turn-"))
    expect(turn.locator(".evaluation")).to_have_attribute("data-status", "onchain", timeout=EVAL_TIMEOUT_MS)
    return pk


def reputation_snapshot(site, ledger, model_id: str, context_id: str) -> dict[str, Reputation]:
    """The indexed REP rows of a context once they agree with the contract's running sums (so no
    event is missing), and the model's own row exists."""
    def ready():
        rows = {r.model_id: r for r in Reputation.objects.filter(context_id=context_id)}
        exists, n, sum_ra, sum_rh, sum_r = ledger.view("reputation", "contextStats", b32(context_id))
        if model_id in rows and n == len(rows) and sum_rh == sum(r.rh for r in rows.values()) \
                and sum_r == sum(r.r for r in rows.values()) and sum_ra == sum(r.ra for r in rows.values()):
            return rows
        return None
    return site.wait(f"the indexed REPs of {context_id[:10]} to match the chain", ready, 30)


def board_row(page, context_id: str, model_id: str) -> dict[str, str]:
    """The model's row on the board of a context, as text (R, Ra, Rh with the board's decimals)."""
    page.goto(f"/?context={context_id}")
    row = page.locator("table.board tbody tr", has=page.locator(f'code[title="{model_id}"]'))
    expect(row).to_have_count(1)
    return {key: row.locator(f"td.{css}").inner_text() for key, css in
            (("r", "r"), ("ra", "ra"), ("rh", "rh"), ("n_auto", "n-auto"), ("n_human", "n-human"))}


def fill_questionnaire(page, pk: int, answers: dict) -> None:
    section = page.locator(f"#rating-{pk}")
    expect(section).to_have_attribute("data-status", "none")
    for field, value in answers.items():
        section.locator(f'fieldset.likert[data-field="{field}"] input[type=radio][value="{value}"]').check()


def submit_and_wait_onchain(page, pk: int) -> None:
    section = page.locator(f"#rating-{pk}")
    section.get_by_role("button", name="Send my rating").click()
    expect(section).to_have_attribute("data-status", re.compile(r"waiting|queued|onchain"))
    expect(section).to_have_attribute("data-status", re.compile(r"onchain|failed"), timeout=RATING_TIMEOUT_MS)
    assert section.get_attribute("data-status") == "onchain", section.inner_text()


def moves(page, pk: int) -> dict[str, dict[str, tuple[str, str]]]:
    """The moves table: {context: {"rh": (before, after), "r": (before, after)}} as displayed."""
    out = {}
    for row in page.locator(f"#rating-{pk} table.moves tr[data-context]").all():
        cells = {}
        for name in ("rh", "r"):
            before, _, after = row.locator(f"td.{name}").text_content().partition(" → ")
            cells[name] = (before.strip(), after.strip())
        out[row.get_attribute("data-context")] = cells
    return out


def shown(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}f}"


# --- the tests -----------------------------------------------------------------------------------

def test_a_new_user_chats_rates_and_sees_rh_and_r_move_on_the_board(site, oracle_worker, page, shot, tmp_path):
    models = replay_models(tmp_path, QUESTIONS[:1])
    model = models["beacon-7b"]
    ledger = default_ledger()
    address = sign_up_and_wait_a_day(site, page, "rhea")
    pk = chat_and_wait_evaluation(page, "beacon-7b", QUESTIONS[0])
    conversation_url = page.url
    writing = writing_id()

    # Before rating: the model got its REP with its autoEval, in `writing` and globally.
    snapshot = {c: reputation_snapshot(site, ledger, model.model_id, c) for c in (writing, GLOBAL)}
    for c, rows in snapshot.items():
        mine = rows[model.model_id]
        others = [r for m, r in rows.items() if m != model.model_id]
        # REPUTATION.md: a new REP starts at the mean over the models already holding one (0.5 when
        # first). The others' Rh and R have not moved since (only Ra moves with autoEval, and only
        # this test rates), so the mean is still theirs.
        for x in ("rh", "r"):
            start = sum(getattr(r, x) for r in others) // len(others) if others else WAD // 2
            assert getattr(mine, x) == start, (c, x, getattr(mine, x), start)
        assert (mine.n_auto, mine.n_human) == (1, 0)
    # With only this model rated so far in a fresh `writing`, Rh and R start at 0.5; the other
    # replay models were only asked for references and hold no REP there.
    assert not {models["keeper-13b"].model_id, models["shoal-3b"].model_id} & set(snapshot[writing])
    board_before = board_row(page, writing, model.model_id)
    mine_before = snapshot[writing][model.model_id]
    assert board_before["rh"] == shown(mine_before.rh / WAD) and board_before["r"] == shown(mine_before.r / WAD)
    assert board_before["n_human"] == "0"

    # The questionnaire, with the weight the rating would get now.
    page.goto(conversation_url)
    fill_questionnaire(page, pk, FIRST)
    preview = page.locator(f"#rating-{pk} p.note.weight")
    expect(preview).to_contain_text("This is your first rating, 1440.0 minutes after you signed up")
    fd_full = decay(1440)
    expect(preview).to_contain_text(f"so this one would count for {fd_full:.3f} of a full rating ({fd_full:.3f} a day "
                                    "after the last)")
    expect(preview.get_by_role("link", name="How is this computed?")).to_have_attribute("href", "/how/#weight")
    shot(page, "questionnaire")
    submit_and_wait_onchain(page, pk)
    section = page.locator(f"#rating-{pk}")
    expect(section.locator("table.moves tr[data-context]")).to_have_count(2)
    for cell in section.locator("table.moves td.r").all():
        expect(cell).to_contain_text("→")  # R moved too (updateReputation indexed), not "…"
    did = section.locator("p.did")
    expect(did).to_contain_text("your familiarity, trust and certainty set it, and time since you signed up")
    expect(did).not_to_contain_text("count for less")
    expect(did).to_contain_text(re.compile(r"[+-]\d\.\d{4} from your rating and [+-]\d\.\d{4} from the automatic score"))
    assert section.locator("code.tx").count() == 2
    shot(page, "rating-onchain")
    shown_moves = moves(page, pk)
    assert set(shown_moves) == {"writing", "global"}

    # By hand, from REPUTATION.md.
    rating = Rating.objects.select_related("hum_item__transaction", "update_item__transaction").get(
        interaction_id=pk)
    hum_tx, update_tx = rating.hum_item.transaction.tx_hash, rating.update_item.transaction.tx_hash
    assert [c.get_attribute("title") for c in section.locator("code.tx").all()] == [hum_tx, update_tx]
    job = rating.interaction.evaluation
    sa, wa = int(job.sa) / WAD, int(job.wa) / WAD
    onchain = LedgerInteraction.objects.get(interaction_id=rating.interaction.interaction_id)
    assert onchain.has_reference and (onchain.sa, onchain.wa) == (int(job.sa), int(job.wa))
    registered = Registration.objects.get(address__iexact=address).registered_at
    d = min((block_time(ledger, hum_tx) - registered) / 60, 1440)
    assert d == 1440  # the day the clock moved on
    sh, wh = answer_score(FIRST), user_weight(FIRST) * decay(d)
    s_theta, w_theta = THETA * sh + (1 - THETA) * sa, THETA * wh + (1 - THETA) * wa
    assert abs(onchain.sh / WAD - sh) < 1e-9 and abs(onchain.wh / WAD - wh) < 1e-9
    assert abs(int(onchain.d_minutes) / WAD - d) < 1e-9

    board_after = board_row(page, writing, model.model_id)
    shot(page, "board-after")
    for c, label in ((writing, "writing"), (GLOBAL, "global")):
        rows = snapshot[c]
        mine = rows[model.model_id]
        # thresholds: the means over every model holding a REP in the context, just before the move
        rh_mean = sum(r.rh for r in rows.values()) / len(rows) / WAD
        r_mean = sum(r.r for r in rows.values()) / len(rows) / WAD
        rh = update(mine.rh / WAD, sh, wh, rh_mean)
        r = update(mine.r / WAD, s_theta, w_theta, r_mean)
        got_ra, got_rh, got_r, n_auto, n_human = ledger.reputation(b32(model.model_id), b32(c))
        assert abs(got_rh / WAD - rh) < 1e-9 and abs(got_r / WAD - r) < 1e-9, (label, got_rh, rh, got_r, r)
        assert (got_ra, n_auto, n_human) == (mine.ra, 1, 1)
        assert shown_moves[label] == {"rh": (shown(mine.rh / WAD), shown(rh)), "r": (shown(mine.r / WAD), shown(r))}
        if c == writing:
            assert (board_after["rh"], board_after["r"]) == (shown(rh), shown(r)), (board_after, rh, r)
            assert board_after["ra"] == board_before["ra"] and board_after["n_human"] == "1"
            assert float(board_after["rh"]) > float(board_before["rh"])  # a good answer (Sh 0.83) pulls Rh up
    assert not page.console_errors, page.console_errors


def test_a_quick_second_rating_is_told_it_counts_for_less(site, oracle_worker, page, shot, tmp_path):
    replay_models(tmp_path, QUESTIONS)
    ledger = default_ledger()
    sign_up_and_wait_a_day(site, page, "quinn")
    first = chat_and_wait_evaluation(page, "keeper-13b", QUESTIONS[0])
    fill_questionnaire(page, first, FIRST)
    submit_and_wait_onchain(page, first)
    # Rhea's first rating: its time counts from signing up, and the sentence says so.
    expect(page.locator(f"#rating-{first} p.did")).to_contain_text("time since you signed up raises it up to a day")

    second = chat_and_wait_evaluation(page, "keeper-13b", QUESTIONS[1])
    page.reload()  # the preview as of now, after the first rating is on-chain
    fill_questionnaire(page, second, SECOND)
    preview = page.locator(f"#rating-{second} p.note.weight")
    expect(preview).to_contain_text("Your previous rating was")
    text = preview.inner_text()
    got = re.search(r"previous rating was ([\d.]+) minutes ago, so this one would count for ([\d.]+) of a full "
                    r"rating \(([\d.]+) a day after the last\)", text)
    assert got, text
    minutes, fd, full = map(float, got.groups())
    assert minutes < 30 and fd < 0.01 and full == round(decay(1440), 3)
    assert "count for less" in text
    shot(page, "second-questionnaire")
    submit_and_wait_onchain(page, second)
    section = page.locator(f"#rating-{second}")
    expect(section.locator("p.did")).to_contain_text("after your previous rating, and ratings close together count for less")
    shot(page, "second-rating-onchain")

    ratings = {r.interaction_id: r for r in Rating.objects.select_related("hum_item__transaction", "interaction")}
    t1 = block_time(ledger, ratings[first].hum_item.transaction.tx_hash)
    t2 = block_time(ledger, ratings[second].hum_item.transaction.tx_hash)
    d = (t2 - t1) / 60  # minutes since this user's previous human evaluation, not rounded
    assert 0 < d < 30
    wh = user_weight(SECOND) * decay(d)
    onchain = LedgerInteraction.objects.get(interaction_id=ratings[second].interaction.interaction_id)
    assert abs(int(onchain.d_minutes) / WAD - d) < 1e-9
    assert abs(onchain.wh / WAD - wh) < 1e-9, (onchain.wh / WAD, wh)
    *_, wh_chain, human_done, _, _ = ledger.view("reputation", "interaction", b32(onchain.interaction_id))
    assert human_done and abs(wh_chain / WAD - wh) < 1e-9
    said = section.locator("p.did").inner_text()
    got = re.search(r"counted for ([\d.]+) of a full rating \(it came (\d+) minutes after", said)
    assert got and got.groups() == (f"{wh:.3f}", f"{d:.0f}"), said
    assert wh < 0.01 * user_weight(SECOND)
    assert not page.console_errors, page.console_errors


def test_a_forged_rating_post_is_refused(site, page, shot, tmp_path):
    replay_models(tmp_path, QUESTIONS[:1])
    sign_up_in_browser(page, "tessa")
    start_chat(page, "writing", "shoal-3b (replay)")
    send_prompt(page, QUESTIONS[0])
    wait_answer(page, 30_000)
    pk = int(page.locator("#messages .turn").last.get_attribute("id").removeprefix("turn-"))
    expect(page.locator(f"#rating-{pk} form.questionnaire")).to_be_visible()

    post = """async ({url, header}) => {
        const body = new FormData();
        for (const [k, v] of Object.entries(%s)) body.append(k, String(v));
        const headers = header ? {'X-CSRFToken': JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRFToken']} : {};
        const r = await fetch(url, {method: 'POST', body, headers, credentials: 'same-origin'});
        return {status: r.status, text: await r.text()};
    }""" % json.dumps(FIRST)
    url = f"/chat/interactions/{pk}/rating"
    forged = page.evaluate(post, {"url": url, "header": False})
    assert forged["status"] == 403, forged
    assert "CSRF" in forged["text"]
    assert not Rating.objects.exists()
    assert not OutboxItem.objects.filter(function__in=["humEval", "updateReputation"]).exists()

    # The same request with the page's token is let through (the refusal above was the CSRF check):
    # with an invalid answer, so that it too records nothing.
    bad = page.evaluate(post.replace("String(v)", "k === 'trust' ? '9' : String(v)"), {"url": url, "header": True})
    assert bad["status"] == 400 and "Choose an answer from 1 to 5." in bad["text"], bad
    assert not Rating.objects.exists()

    page.reload()
    expect(page.locator(f"#rating-{pk}")).to_have_attribute("data-status", "none")
    expect(page.locator(f"#rating-{pk} form.questionnaire")).to_be_visible()
    shot(page, "after-forged-post")
