"""Real-browser test of the meta-evaluation on ScaleEval's recorded debates: two experts work through
imported disagreements with the keyboard and watch the report of judges against experts change.

The debates are the real ones in /work/shared/data/scaleeval (two results files and the responses,
linked into a scratch folder); the expected figures are worked out here by hand from the answers
given and the judges' recorded first-round verdicts. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import html
import io
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from apps.annotate.models import Debate, ExpertVerdict, QueueItem
from apps.annotate.report import debates_report
from lib.markdown import render
from tests.personas import expert

from .test_chat_in_browser import log_in

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "scaleeval"
PAIR = "claude_vs_gemini"
# 20 debates each; 9 and 13 of them end in disagreement. Brainstorming comes first in the queue.
FILES = (f"{PAIR}/helpfulness/multiagent_score/brainstorming.jsonl", f"{PAIR}/creativity/multiagent_score/write.jsonl")
JUDGES = ("gpt-4-turbo", "claude-2", "gpt-3.5-turbo")
# Upstream debate id -> the key pressed. In round 0 the judges said (gpt-4-turbo, claude-2, gpt-3.5-turbo):
# 22: 1 1 2 · 23: 1 1 0 · 24: 1 1 0 · 25: 1 1 unreadable ("4") · 29: 0 2 1.
ERIN = ((22, "1"), (23, "0"), (24, "s"), (25, "1"), (29, "2"))
FRANK = ((22, "1"), (23, "2"), (24, "s"), (25, "1"), (29, "2"))  # agrees with erin but on 23: a tie there

pytestmark = [
    pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not (DATA / "results").is_dir(),
                       reason=f"the ScaleEval data is not at {DATA} (results/ and responses/ from GAIR-NLP/scaleeval)"),
]


def scaleeval_folder(tmp_path: Path) -> Path:
    """A scaleeval folder holding only FILES (and every response), linked to the real data."""
    root = tmp_path / "scaleeval"
    for name in FILES:
        (root / "results" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "results" / name).symlink_to(DATA / "results" / name)
    (root / "responses").symlink_to(DATA / "responses", target_is_directory=True)
    return root


def recorded_counts() -> tuple[int, int]:
    """(debates, disagreements) in FILES, read straight from the JSON: a disagreement is a debate whose
    last round's scores are not one and the same 1, 2 or 0."""
    debates = disagreements = 0
    for name in FILES:
        for record in json.loads((DATA / "results" / name).read_text()):
            turns = {k: v for k, v in record.items() if k.startswith("Speaker ")}
            last = max(int(k.rsplit(" ", 1)[1]) if "Round" in k else 0 for k in turns)
            suffix = "Initial Evaluation" if last == 0 else f"Discussion Round {last}"
            scores = {str(v["score"]).strip() for k, v in turns.items() if k.endswith(suffix)}
            debates += 1
            disagreements += not (len(scores) == 1 and scores <= {"0", "1", "2"})
    return debates, disagreements


def imported(upstream_id: int) -> Debate:
    return Debate.objects.get(key=f"scaleeval:{PAIR}/helpfulness/brainstorming/{upstream_id}")


def first_round(debate: Debate) -> dict[str, int | None]:
    return {t.agent: t.verdict for t in debate.turns.filter(round=0)}


# --- the figures, by hand ----------------------------------------------------------------------

def gold_by_hand(answers: list[dict[int, str]]) -> tuple[dict[int, int], int]:
    """Upstream id -> the experts' majority verdict, and how many ids they tied on."""
    given: dict[int, list[int]] = {}
    for one_expert in answers:
        for upstream_id, key in one_expert.items():
            if key != "s":
                given.setdefault(upstream_id, []).append(int(key))
    gold, ties = {}, 0
    for upstream_id, verdicts in given.items():
        (top, count), *rest = Counter(verdicts).most_common()
        if rest and rest[0][1] == count:
            ties += 1
        else:
            gold[upstream_id] = top
    return gold, ties


def judges_by_hand(gold: dict[int, int]) -> dict[str, dict]:
    """Per judge: examples agreed/n/unreadable, and whether its favourite system matches the experts'."""
    def favourite(systems: list[str | None]) -> str | None:
        ranked = Counter(s for s in systems if s is not None).most_common()
        return None if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]) else ranked[0][0]

    def system(verdict: int | None, debate: Debate) -> str | None:
        return None if verdict is None else {1: debate.system_1, 2: debate.system_2, 0: "tie"}[verdict]

    out = {}
    debates = {upstream_id: imported(upstream_id) for upstream_id in gold}
    experts_favourite = favourite([system(g, debates[i]) for i, g in gold.items()])
    for judge in JUDGES:
        said = {i: first_round(d)[judge] for i, d in debates.items()}
        mine = favourite([system(said[i], debates[i]) for i in gold])
        compared = mine is not None and experts_favourite is not None
        out[judge] = {"n": len(gold), "agreed": sum(said[i] == g for i, g in gold.items()),
                      "unreadable": sum(v is None for v in said.values()),
                      "system": (int(compared and mine == experts_favourite), int(compared))}
    return out


def kappa_by_hand(answers: list[dict[int, str]]) -> float:
    """Fleiss' kappa over the items both experts answered (two raters each)."""
    rows = []
    for upstream_id in answers[0]:
        verdicts = [int(a[upstream_id]) for a in answers if a.get(upstream_id, "s") != "s"]
        if len(verdicts) == 2:
            rows.append([verdicts.count(c) for c in (0, 1, 2)])
    p_bar = sum(sum(c * (c - 1) for c in row) / 2 for row in rows) / len(rows)
    shares = [sum(row[c] for row in rows) / (2 * len(rows)) for c in range(3)]
    p_e = sum(p * p for p in shares)
    return (p_bar - p_e) / (1 - p_e)


# --- the pages ---------------------------------------------------------------------------------

def words(text: str) -> list[str]:
    return text.split()


def as_rendered(raw: str) -> list[str]:
    """The words a reader sees of `raw` once the page renders it as sanitized Markdown."""
    return words(html.unescape(re.sub(r"<[^>]+>", "", render(raw))))


def answer_the_queue(page, plan, shot=None) -> None:
    """Check each item shows its real debate (as text), then press the planned key."""
    for number, (upstream_id, key) in enumerate(plan):
        debate = imported(upstream_id)
        item = page.locator("#item")
        expect(item).to_have_attribute("data-item", str(debate.queue_item.pk))
        assert page.locator("pre.question").text_content().strip() == debate.question.strip()
        shown = page.locator(".submission .markdown")
        assert [words(shown.nth(i).text_content()) for i in (0, 1)] == [as_rendered(debate.submission_1),
                                                                         as_rendered(debate.submission_2)]
        turns = list(debate.turns.all())
        rounds = page.locator("details.round")
        expect(rounds).to_have_count(debate.rounds)
        reasoning = page.locator(".reasoning")
        expect(reasoning).to_have_count(len(turns))
        for i, turn in enumerate(turns):
            expect(rounds.nth(turn.round)).to_contain_text(f"{turn.agent} (speaker {turn.speaker})")
            assert words(reasoning.nth(i).text_content()) == as_rendered(turn.reasoning)
        if shot and number == 0:
            shot(page, "first-debate")
        page.keyboard.press(key)
        expect(page.locator("#item")).not_to_have_attribute("data-item", str(debate.queue_item.pk))


def cell(page, scenario: str, criterion: str, evaluator: str):
    return page.locator(f'#metaeval tr[data-scenario="{scenario}"][data-criterion="{criterion}"] '
                        f'td[data-evaluator="{evaluator}"]')


def expect_report(page, by_hand: dict[str, dict], gold: int, ties: int) -> None:
    """The brainstorming row shows the figures worked out by hand, and they are debates_report()'s."""
    row = page.locator('#metaeval tr[data-scenario="brainstorming"][data-criterion="helpfulness"]')
    expect(row.locator("td").nth(3)).to_have_text(str(gold))
    expect(row.locator("td").nth(4)).to_have_text(str(ties))
    computed = next(c for c in debates_report().cells if c.scenario == "brainstorming").scores
    for judge, want in by_hand.items():
        score = computed[judge]
        assert (score.example.n, score.example.agreed, score.example.unparseable) == (
            want["n"], want["agreed"], want["unreadable"])
        assert (score.system_agreed, score.system_compared) == want["system"]
        shown = cell(page, "brainstorming", "helpfulness", judge)
        expect(shown).to_have_attribute("data-rate", f"{want['agreed'] / want['n']:.3f}")
        unreadable = f", {want['unreadable']} unreadable" if want["unreadable"] else ""
        expect(shown).to_contain_text(f"{want['agreed']} of {want['n']}{unreadable}")
        expect(shown).to_contain_text("system {}/{}".format(*want["system"]))
    # No queued debate reached consensus, so the debate itself has no scored example; nor has the
    # writing cell, which nobody answered.
    expect(cell(page, "brainstorming", "helpfulness", "debate")).to_have_text("—")
    for evaluator in ("debate", *JUDGES):
        expect(cell(page, "writing", "creativity", evaluator)).to_have_text("—")


def test_experts_answer_imported_debates_and_the_report_follows(site, page, shot, tmp_path):
    out = io.StringIO()
    call_command("import_scaleeval", str(scaleeval_folder(tmp_path)), stdout=out)
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    debates, disagreements = recorded_counts()
    assert (debates, disagreements) == (40, 22)
    assert (summary["imported"], summary["queued"], summary["failed_files"]) == (debates, disagreements, 0)
    assert QueueItem.objects.count() == disagreements
    # The administrator asks two experts for each brainstorming disagreement.
    QueueItem.objects.filter(debate__scenario="brainstorming").update(required_verdicts=2)
    erin, frank = expert("erin"), expert("frank")

    log_in(page, "erin")
    expect(page.get_by_role("link", name="Annotate")).to_be_visible()
    page.get_by_role("link", name="Judges vs experts").click()
    expect(page).to_have_url(re.compile(r"/annotate/report/$"))
    headers = page.locator("#metaeval thead th")
    for name in ("Debate", *JUDGES):
        expect(headers.filter(has_text=re.compile(rf"^{re.escape(name)}$"))).to_have_count(1)
    for scenario, criterion in (("brainstorming", "helpfulness"), ("writing", "creativity")):
        row = page.locator(f'#metaeval tr[data-scenario="{scenario}"][data-criterion="{criterion}"]')
        expect(row.locator("td").nth(2)).to_have_text("20")  # debates
        expect(row.locator("td").nth(3)).to_have_text("0")  # expert verdicts
        for evaluator in ("debate", *JUDGES):
            expect(cell(page, scenario, criterion, evaluator)).to_have_text("—")
    expect(page.locator("#expert-agreement")).to_contain_text("No debate has verdicts from two experts yet")
    shot(page, "report-before")

    page.get_by_role("link", name="Annotate").click()
    page.locator('select[name="scenario"]').select_option("brainstorming")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"/annotate/\?scenario=brainstorming(&|$)"))
    expect(page.locator("#progress")).to_contain_text("Answered by you: 0 · still open for you: 9 · in the queue: 9")
    answer_the_queue(page, ERIN[:1], shot)
    # Debate 23's claude-2 wrapped its reply in "<function1>...</function1>": shown as text, never a tag.
    expect(page.locator(".reasoning").filter(has_text="<function1>")).not_to_have_count(0)
    assert page.locator("function1").count() == 0
    answer_the_queue(page, ERIN[1:])
    expect(page.locator("#progress")).to_contain_text("Answered by you: 4")
    expect(page.locator("#progress")).to_contain_text("skipped this session: 1")
    answers = {imported(i).queue_item.pk: int(k) for i, k in ERIN if k != "s"}
    assert dict(ExpertVerdict.objects.filter(expert=erin).values_list("item_id", "verdict")) == answers
    assert imported(24).queue_item.verdicts.count() == 0

    page.get_by_role("link", name="Judges vs experts").click()
    gold, ties = gold_by_hand([dict(ERIN)])
    by_hand = judges_by_hand(gold)
    # What the answers were chosen to give: each judge agrees on a different share.
    assert {j: (by_hand[j]["agreed"], by_hand[j]["n"]) for j in JUDGES} == {
        "gpt-4-turbo": (2, 4), "claude-2": (3, 4), "gpt-3.5-turbo": (1, 4)}
    expect_report(page, by_hand, gold=4, ties=0)
    shot(page, "report-after-erin")

    page.locator("header").get_by_role("button", name="Log out").click()
    log_in(page, "frank")
    expect(page.get_by_role("link", name="Annotate")).to_be_visible()
    page.goto("/annotate/?scenario=brainstorming")
    answer_the_queue(page, FRANK)
    assert dict(ExpertVerdict.objects.filter(expert=frank).values_list("item__debate__key", "verdict")) == {
        imported(i).key: int(k) for i, k in FRANK if k != "s"}
    kappa = kappa_by_hand([dict(ERIN), dict(FRANK)])
    agreement = page.locator("section.agreement tbody tr", has_text="brainstorming").locator("td")
    for column, text in enumerate(("brainstorming", "4", "8", f"{kappa:.2f}")):  # debates, verdicts, κ
        expect(agreement.nth(column)).to_have_text(text)
    shot(page, "queue-after-frank")

    page.get_by_role("link", name="Judges vs experts").click()
    gold, ties = gold_by_hand([dict(ERIN), dict(FRANK)])
    by_hand = judges_by_hand(gold)
    assert (by_hand["gpt-4-turbo"]["agreed"], by_hand["gpt-4-turbo"]["n"]) == (2, 3)  # the tie on 23 drops out
    expect_report(page, by_hand, gold=3, ties=1)
    expect(page.locator('#expert-agreement tr[data-scenario="brainstorming"]')).to_contain_text(f"{kappa:.2f}")
    shot(page, "report-after-frank")
    assert page.console_errors == []
