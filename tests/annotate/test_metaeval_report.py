"""The meta-evaluation report: each judge and the debate against the experts' verdicts."""

from __future__ import annotations

import io
import itertools
import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from apps.annotate.models import Debate, DebateTurn, ExpertVerdict, QueueItem
from apps.annotate.report import debates_report
from tests.personas import expert

pytestmark = pytest.mark.django_db
JUDGES = ("gpt-4-turbo", "claude-2")
_keys = itertools.count()


def debate(judges: dict[str, int | None], consensus: int | None = None, *, scenario="coding",
           criterion="helpfulness", systems=("gpt-3.5-turbo", "claude-instant"), experts=()) -> Debate:
    """A debate whose judges gave these independent verdicts (None: unreadable), answered by `experts`."""
    d = Debate.objects.create(source="live", key=f"live:test/{next(_keys)}", scenario=scenario, criterion=criterion,
                              question="Q?", submission_1="A", submission_2="B", system_1=systems[0],
                              system_2=systems[1], consensus=consensus, rounds=1 if consensus is not None else 3)
    for speaker, (agent, verdict) in enumerate(judges.items(), start=1):
        DebateTurn.objects.create(debate=d, round=0, speaker=speaker, agent=agent, verdict=verdict,
                                  unparseable="" if verdict is not None else "no number")
        # a later round changes its mind: only round 0 is the judge on its own
        DebateTurn.objects.create(debate=d, round=1, speaker=speaker, agent=agent, verdict=0)
    if experts:
        item = QueueItem.objects.create(debate=d, required_verdicts=len(experts))
        for verdict in experts:
            answer(item, verdict)
    return d


def answer(item: QueueItem, verdict: int) -> ExpertVerdict:
    return ExpertVerdict.objects.create(item=item, expert=expert(f"expert{next(_keys)}"), verdict=verdict)


def run() -> tuple[str, dict]:
    out = io.StringIO()
    call_command("metaeval", "debates", stdout=out)
    lines = out.getvalue().strip().splitlines()
    return out.getvalue(), json.loads(lines[-1])


def cell(data: dict, scenario="coding", criterion="helpfulness") -> dict:
    return next(c for c in data["cells"] if (c["scenario"], c["criterion"]) == (scenario, criterion))


def test_each_judge_is_scored_by_its_independent_verdict_against_the_experts_majority():
    debate({"gpt-4-turbo": 1, "claude-2": 2}, experts=(1, 1, 2))
    debate({"gpt-4-turbo": 2, "claude-2": 2}, experts=(2,))
    _, data = run()
    judges = cell(data)["evaluators"]
    assert (judges["gpt-4-turbo"]["agreed"], judges["gpt-4-turbo"]["n"], judges["gpt-4-turbo"]["rate"]) == (2, 2, 1.0)
    assert (judges["claude-2"]["agreed"], judges["claude-2"]["rate"]) == (1, 0.5)


def test_a_tie_among_experts_gives_no_gold_and_is_counted():
    debate({"gpt-4-turbo": 1, "claude-2": 1}, experts=(1, 2))
    _, data = run()
    assert (cell(data)["gold"], cell(data)["gold_ties"]) == (0, 1)
    assert cell(data)["evaluators"]["gpt-4-turbo"]["rate"] is None


def test_an_unreadable_verdict_counts_as_a_disagreement_and_is_reported():
    debate({"gpt-4-turbo": None, "claude-2": 1}, experts=(1,))
    _, data = run()
    gpt = cell(data)["evaluators"]["gpt-4-turbo"]
    assert (gpt["n"], gpt["agreed"], gpt["unparseable"], gpt["rate"]) == (1, 0, 1, 0.0)


def test_the_debate_is_scored_only_where_it_reached_consensus_and_reports_its_coverage():
    debate({"gpt-4-turbo": 1, "claude-2": 1}, consensus=1, experts=(1,))
    debate({"gpt-4-turbo": 1, "claude-2": 2}, consensus=None, experts=(2,))
    _, data = run()
    scored = cell(data)["evaluators"]["debate"]
    assert (scored["n"], scored["agreed"], scored["rate"], scored["coverage"]) == (1, 1, 1.0, 0.5)


def test_system_level_agreement_compares_which_system_each_side_prefers_most_often():
    # Submissions come in either order; gold prefers gpt-3.5-turbo twice out of three.
    pair, flipped = ("gpt-3.5-turbo", "claude-instant"), ("claude-instant", "gpt-3.5-turbo")
    debate({"gpt-4-turbo": 1, "claude-2": 2}, systems=pair, experts=(1,))
    debate({"gpt-4-turbo": 2, "claude-2": 1}, systems=flipped, experts=(2,))
    debate({"gpt-4-turbo": 1, "claude-2": 2}, systems=pair, experts=(2,))
    _, data = run()
    judges = cell(data)["evaluators"]
    assert (judges["gpt-4-turbo"]["system_agreed"], judges["gpt-4-turbo"]["system_compared"]) == (1, 1)
    assert (judges["claude-2"]["system_agreed"], judges["claude-2"]["system_compared"]) == (0, 1)


def test_the_rates_change_when_an_expert_answers():
    d = debate({"gpt-4-turbo": 1, "claude-2": 2}, experts=(1,))
    other = debate({"gpt-4-turbo": 1, "claude-2": 2})
    before = run()[1]["overall"]["claude-2"]
    answer(QueueItem.objects.create(debate=other), 2)
    after = run()[1]["overall"]["claude-2"]
    assert (before["n"], before["rate"]) == (1, 0.0)
    assert (after["n"], after["rate"]) == (2, 0.5)
    answer(d.queue_item, 2)  # now a tie on the first debate: it drops out
    assert run()[1]["overall"]["claude-2"]["n"] == 1


def test_cells_are_per_scenario_and_criterion_and_the_overall_pools_them():
    debate({"gpt-4-turbo": 1, "claude-2": 1}, scenario="math", criterion="reasoning", experts=(1,))
    debate({"gpt-4-turbo": 2, "claude-2": 1}, scenario="coding", criterion="helpfulness", experts=(1,))
    debate({"gpt-4-turbo": 2, "claude-2": 1}, scenario="coding", criterion="helpfulness")
    _, data = run()
    assert [(c["scenario"], c["criterion"], c["debates"], c["gold"]) for c in data["cells"]] == [
        ("coding", "helpfulness", 2, 1), ("math", "reasoning", 1, 1)]
    assert (data["overall"]["gpt-4-turbo"]["n"], data["overall"]["gpt-4-turbo"]["rate"]) == (2, 0.5)


def test_the_command_prints_a_table_then_one_json_line():
    debate({"gpt-4-turbo": 1, "claude-2": 2}, experts=(1,))
    text, data = run()
    assert "scenario" in text.splitlines()[0] and "gpt-4-turbo" in text.splitlines()[0]
    assert "1.000 (1/1" in text
    assert set(data) == {"cells", "overall", "expert_verdicts"}


def test_the_report_on_no_data_is_empty():
    text, data = run()
    assert data["cells"] == [] and data["expert_verdicts"] == 0
    assert debates_report().evaluators == ["debate"]


def test_the_page_is_public_and_shows_the_rates(client):
    debate({"gpt-4-turbo": 1, "claude-2": 2}, experts=(1,))
    page = client.get(reverse("metaeval-report"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="metaeval"' in html and "gpt-4-turbo" in html and 'data-rate="1.000"' in html


def test_the_page_escapes_names_from_imported_data(client):
    debate({"<script>alert(1)</script>": 1}, scenario="<b>odd</b>", experts=(1,))
    html = client.get(reverse("metaeval-report")).content.decode()
    assert "<script>alert(1)" not in html and "<b>odd</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_page_is_linked_from_every_page_and_shows_how_far_the_experts_agree(client):
    debate({"gpt-4-turbo": 1, "claude-2": 2}, scenario="coding", experts=(1, 1))
    debate({"gpt-4-turbo": 1, "claude-2": 2}, scenario="coding", experts=(2, 2))
    assert 'href="/annotate/report/"' in client.get(reverse("models")).content.decode()
    html = client.get(reverse("metaeval-report")).content.decode()
    assert 'id="expert-agreement"' in html
    assert '<tr data-scenario="coding"><td class="label">coding</td><td>2</td><td>4</td>' in html
    assert "<td>1.00</td>" in html  # every pair of experts agreed
