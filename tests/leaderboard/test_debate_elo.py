"""The boards show, beside R, each model's Bradley–Terry rating from the debates settled in the context."""

from __future__ import annotations

import csv
import io
import re

import pytest

from apps.annotate import queue
from apps.annotate.models import Debate, ExpertVerdict, QueueItem
from apps.annotate.outcomes import context_outcomes, debate_ratings, outcome
from apps.chain.models import Context
from apps.leaderboard import boards, entries
from lib.pairwise import Outcome, bradley_terry
from tests.leaderboard.test_boards import CTX, GLOBAL, mid, rep
from tests.personas import expert

pytestmark = pytest.mark.django_db
OTHER = "0x" + "cd" * 32
_n = iter(range(1, 10**6))


def debate(m1: int | str, m2: int | str, consensus: int | None = None, *, context: str = CTX,
           verdicts: list[int] | None = None, required: int = 1, source: str = "live") -> Debate:
    """A debate between two models' answers: settled by consensus, or queued (verdicts: the experts'
    answers so far, resolved once there are `required`)."""
    n = next(_n)
    d = Debate.objects.create(
        source=source, key=f"{source}:elo/{n}", criterion="helpfulness", question=f"Q{n}?",
        submission_1="<b>answer one</b>", submission_2="<script>two</script>", consensus=consensus, rounds=2,
        context_id=context, model_1=mid(m1) if isinstance(m1, int) else m1,
        model_2=mid(m2) if isinstance(m2, int) else m2)
    if consensus is None:
        verdicts = verdicts or []
        resolved = len(verdicts) >= required
        item = QueueItem.objects.create(debate=d, required_verdicts=required,
                                        status="resolved" if resolved else "open",
                                        resolved_at=d.created_at if resolved else None)
        for k, v in enumerate(verdicts):
            ExpertVerdict.objects.create(item=item, expert=expert(f"expert{n}x{k}"), verdict=v)
    return d


@pytest.fixture
def debated():
    """Models 1-3 debated in `math`, model 4 ranked there but never debated."""
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    for m, name in ((1, "alpha"), (2, "bravo"), (3, "charlie"), (4, "delta")):
        rep(m, 0.5 + m / 100, name=name, n_human=3, band=(0.5 + m / 100 - 0.001, 0.5 + m / 100 + 0.001))
    debate(1, 2, consensus=1)  # alpha beat bravo
    debate(2, 3, consensus=1)
    debate(2, 3, consensus=0)  # a tie
    debate(3, 1, verdicts=[2, 2, 1], required=3)  # experts: alpha (submission 2) better
    debate(1, 3, verdicts=[1, 2], required=2)  # experts split: no outcome
    debate(1, 3, verdicts=[1], required=2)  # still queued: no outcome
    debate(1, 2, consensus=2, context=OTHER)  # another context


EXPECTED = [Outcome(mid(1), mid(2), 1), Outcome(mid(2), mid(3), 1), Outcome(mid(2), mid(3), 0.5),
            Outcome(mid(3), mid(1), 0)]


def claim(expert_, d: Debate) -> QueueItem:
    """The expert takes this debate's queue item (passing over the fixture's other open items)."""
    others = QueueItem.objects.exclude(debate=d).values_list("pk", flat=True)
    item = queue.next_item(expert_, skipped=list(others))
    assert item.debate_id == d.pk
    return item


def cell(page: str, model: int) -> str:
    row = re.search(rf'<tr data-model="{mid(model)}">.*?</tr>', page, re.S).group(0)
    return re.search(r'<td class="debate-elo">(.*?)</td>', row, re.S).group(1)


def test_a_debate_outcome_is_the_consensus_else_the_experts_majority_once_resolved(debated):
    outcomes = [outcome(d) for d in Debate.objects.filter(context_id=CTX).order_by("id")]
    assert outcomes == [1, 1, 0, 2, None, None]


def test_context_outcomes_are_the_settled_debates_in_two_queries(debated, django_assert_num_queries):
    with django_assert_num_queries(2):
        assert context_outcomes(CTX) == EXPECTED


def test_the_column_is_bradley_terry_of_the_context_outcomes(debated):
    expected = bradley_terry(EXPECTED)
    board = boards.build_board(CTX)
    by_id = {row.model_id: row for row in board.rows}
    for m, games in ((1, 2), (2, 3), (3, 3)):
        assert by_id[mid(m)].debate_elo == pytest.approx(expected[mid(m)])
        assert by_id[mid(m)].debate_games == games
    assert by_id[mid(4)].debate_elo is None and by_id[mid(4)].debate_games == 0
    assert debate_ratings(CTX)[mid(1)] == (pytest.approx(expected[mid(1)]), 2)


def test_imported_and_self_play_debates_do_not_count(debated):
    debate(4, 1, consensus=1, context="", source="scaleeval")  # imported: no context
    debate(4, "", consensus=1)  # one side not a registered model
    debate(4, 4, consensus=1)  # a model against itself says nothing
    assert context_outcomes(CTX) == EXPECTED
    assert set(debate_ratings(CTX)) == {mid(1), mid(2), mid(3)}


def test_the_global_board_rates_the_debates_of_every_context(debated):
    rep(1, 0.5, context=GLOBAL, name="alpha")
    assert context_outcomes(GLOBAL) == EXPECTED + [Outcome(mid(1), mid(2), 0)]
    row = boards.build_board(GLOBAL).rows[0]
    assert row.debate_games == 3 and row.debate_elo == pytest.approx(bradley_terry(context_outcomes(GLOBAL))[mid(1)])


@pytest.mark.parametrize("direction", ["desc", "asc"])
def test_sorting_by_debate_elo_puts_unrated_models_last(debated, direction):
    board = boards.build_board(CTX, "debate_elo", direction)
    rated = sorted(bradley_terry(EXPECTED).items(), key=lambda kv: kv[1], reverse=direction == "desc")
    assert [row.model_id for row in board.ranked] == [m for m, _ in rated] + [mid(4)]
    assert {row.model_id: row.rank for row in board.ranked}[mid(4)] == 1, "the rank stays by R"


def test_the_page_shows_the_column_beside_r_with_the_debates_counted(client, debated):
    page = client.get("/", {"context": CTX}).content.decode()
    expected = bradley_terry(EXPECTED)
    assert f"{expected[mid(2)]:.0f}" in cell(page, 2) and "3 debates" in cell(page, 2)
    assert 'title="rating from 2 settled debates"' in cell(page, 1)
    assert "—" in cell(page, 4) and "debate" not in cell(page, 4).replace("no settled debate", "")
    header = page[page.index("<thead>"):page.index("</thead>")]
    assert header.index('data-sort="r"') < header.index('data-sort="debate_elo"')
    assert 'name="board-column" value="debate-elo"' in page, "one of the columns a click away"
    assert f"?context={CTX}&amp;sort=debate_elo&amp;dir=desc" in header
    assert "Debate Elo is a rating on the Elo scale" in page and "not on-chain" in page


def test_names_and_model_output_are_escaped(client, debated):
    rep(9, 0.5, name="<script>m</script>")
    debate(9, 1, consensus=1)
    page = client.get("/", {"context": CTX}).content.decode()
    assert "<script>m</script>" not in page and "&lt;script&gt;m&lt;/script&gt;" in page
    assert "<script>two</script>" not in page and "<b>answer one</b>" not in page
    assert "1 debate<" in cell(page, 9)


def test_an_expert_resolving_a_disagreement_changes_the_served_board(client, debated,
                                                                     django_capture_on_commit_callbacks):
    erin = expert("erin")
    entries.bump()  # boards are cached from here on
    queued = debate(4, 1)  # delta's first debate, queued for an expert

    def served():
        return client.get("/", {"context": CTX}).content.decode(), client.get(f"/api/boards/{CTX}").json()

    page, data = served()
    assert "—" in cell(page, 4)
    debate(4, 2, consensus=1)  # saved behind the boards' back: unseen until a bump
    assert served()[0] == page, "served from the cache"
    with django_capture_on_commit_callbacks(execute=True):
        queue.submit(erin, claim(erin, queued).pk, 1)
    page, data = served()
    expected = bradley_terry(context_outcomes(CTX))
    assert "2 debates" in cell(page, 4) and f"{expected[mid(4)]:.0f}" in cell(page, 4)
    delta = next(r for r in data["ranked"] if r["model_id"] == mid(4))
    assert delta["debate_elo"] == pytest.approx(expected[mid(4)]) and delta["debate_games"] == 2


def test_resolving_bumps_the_context_and_global_boards_only_on_commit(debated, django_capture_on_commit_callbacks):
    erin = expert("erin")
    entries.bump()
    queued = debate(4, 1)
    before = (entries.version(CTX), entries.version(GLOBAL), entries.version(OTHER))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        queue.submit(erin, claim(erin, queued).pk, 2)
    assert (entries.version(CTX), entries.version(GLOBAL)) == before[:2], "nothing moves before the commit"
    for callback in callbacks:
        callback()
    after = (entries.version(CTX), entries.version(GLOBAL), entries.version(OTHER))
    assert after[0] != before[0] and after[1] != before[1] and after[2] == before[2]


def test_a_verdict_that_does_not_resolve_or_a_debate_without_context_bumps_nothing(
        django_capture_on_commit_callbacks):
    erin, frank = expert("erin"), expert("frank")
    pending = debate(4, 1, required=2).queue_item
    imported = debate(4, 1, context="", source="scaleeval").queue_item  # an imported disagreement
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert queue.next_item(erin).pk == pending.pk
        queue.submit(erin, pending.pk, 1)  # 1 of 2 verdicts
        assert queue.next_item(frank, skipped=[pending.pk]).pk == imported.pk
        queue.submit(frank, imported.pk, 1)
    assert QueueItem.objects.get(pk=imported.pk).status == "resolved"
    assert callbacks == []


def test_json_and_csv_exports_carry_the_rating(client, debated):
    expected = bradley_terry(EXPECTED)
    data = client.get(f"/api/boards/{CTX}", {"sort": "debate_elo"}).json()
    assert data["sort"] == "debate_elo" and data["dir"] == "desc" and "not on-chain" in data["debate"]
    rows = {r["model_id"]: r for r in data["ranked"]}
    assert rows[mid(3)]["debate_elo"] == pytest.approx(expected[mid(3)]) and rows[mid(3)]["debate_games"] == 3
    assert rows[mid(4)]["debate_elo"] is None and rows[mid(4)]["debate_games"] == 0
    assert data["ranked"][-1]["model_id"] == mid(4)

    body = client.get(f"/api/boards/{CTX}.csv", {"sort": "debate_elo", "dir": "asc"}).content.decode()
    table = list(csv.reader(io.StringIO(body)))
    assert table[0] == boards.CSV_HEADER and table[0][17:19] == ["debate_elo", "debate_games"]
    by_id = {r[2]: dict(zip(table[0], r)) for r in table[1:]}
    assert by_id[mid(1)]["debate_elo"] == f"{expected[mid(1)]:.1f}" and by_id[mid(1)]["debate_games"] == "2"
    assert by_id[mid(4)]["debate_elo"] == "" and by_id[mid(4)]["debate_games"] == "0"
    assert client.get(f"/api/boards/{CTX}", {"sort": "elo"}).status_code == 400
