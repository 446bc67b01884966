"""The peer self-evaluation of a context's answers, stored (`selfeval --save`) and shown on its board
as "Peer Elo" beside Debate Elo. The command tests run the real BERTScore; the board tests score with
a word-overlap scorer (tests/lib/test_selfeval.py) so that they stay fast."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.core.management import CommandError, call_command

from apps.chain.models import Context
from apps.leaderboard import boards, entries
from apps.leaderboard.models import BoardEntry
from apps.oracle.models import PeerRating
from apps.oracle.selfeval import context_selfeval, refresh_peer_ratings
from lib.reputation import GLOBAL_CONTEXT_ID
from tests.lib.test_selfeval import WordOverlap
from tests.oracle.test_selfeval_command import ANSWERS, run, writing_world  # noqa: F401  (fixture)

WAD = 10**18
UNRATED = "0x" + "ee" * 32  # ranked in `writing`, never asked the prompts


def stored(context) -> dict[str, PeerRating]:
    return {r.model_name: r for r in PeerRating.objects.filter(context_id=context.context_id)}


def ranked_enough(r: float) -> dict:
    """Three rated answers and a narrow band around R: enough to be ranked."""
    return {"band_lo": r - 0.01, "band_hi": r + 0.01, "band_n": 3}


@pytest.fixture
def board_world(writing_world):  # noqa: F811
    """The four models of `writing` on its board (R: sea-poet highest), and one model without answers."""
    writing = writing_world["writing"]
    for k, (name, model) in enumerate(sorted(writing_world["models"].items())):
        BoardEntry.objects.create(model_id=model.model_id, context_id=writing.context_id, name=name,
                                  r=int((0.5 + k / 10) * WAD), ra=WAD // 2, rh=WAD // 2, n_auto=5, n_human=3,
                                  block_number=10 + k, **ranked_enough(0.5 + k / 10))
    BoardEntry.objects.create(model_id=UNRATED, context_id=writing.context_id, name="<b>quiet</b>", r=WAD // 10,
                              ra=0, rh=0, n_auto=5, n_human=3, block_number=9, **ranked_enough(0.1))
    return writing_world


def cell(page: str, model_id: str) -> str:
    row = re.search(rf'<tr data-model="{model_id}">.*?</tr>', page, re.S).group(0)
    return re.search(r'<td class="peer-elo">(.*?)</td>', row, re.S).group(1)


# --- storing a run -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_save_stores_the_contexts_selfeval_and_a_rerun_replaces_it(writing_world):  # noqa: F811
    writing = writing_world["writing"]
    text, data = run("--context", "writing", "--save")
    assert "saved 4 peer ratings in context writing" in text and data["saved"] == 4
    expected = context_selfeval(writing).evaluation.final
    rows = stored(writing)
    assert set(rows) == set(ANSWERS)
    for name, row in rows.items():
        assert row.elo == pytest.approx(expected.ratings[name])
        assert (row.wins, row.ties, row.losses) == (expected.records[name].wins, expected.records[name].ties,
                                                    expected.records[name].losses)
        assert row.model_id == writing_world["models"][name].model_id
        assert (row.prompts, row.rounds, row.seed) == (3, 1, 0)
        assert row.params["metric"] == "bertscore" and row.params["elo_k"] == 4
    first_ids = {r.pk for r in rows.values()}

    _, again = run("--context", writing.context_id, "--save", "--seed", "7", "--json-only")
    rows = stored(writing)
    assert {r.pk for r in rows.values()}.isdisjoint(first_ids), "the run's rows replace the last run's"
    assert len(rows) == 4 and {r.seed for r in rows.values()} == {7}
    assert {name: round(r.elo, 2) for name, r in rows.items()} == again["ratings"]


@pytest.mark.slow
def test_all_contexts_refreshes_those_with_answers_and_skips_the_others_with_a_line(writing_world):  # noqa: F811
    text, data = run("--all-contexts", "--save")
    assert "skipped context maths: no single-turn prompt in context maths was answered by three models" in text
    assert data["contexts"]["writing"] == {"saved": 4, "prompts": 3}
    assert "skipped" in data["contexts"]["maths"]
    assert set(stored(writing_world["writing"])) == set(ANSWERS)
    assert not PeerRating.objects.exclude(context_id=writing_world["writing"].context_id).exists()


def test_a_context_with_too_few_answers_is_an_error_and_changes_nothing(writing_world,  # noqa: F811
                                                                        django_capture_on_commit_callbacks):
    maths = Context.objects.get(name="maths")  # asked one prompt, of one model
    PeerRating.objects.create(context_id=maths.context_id, model_id=UNRATED, model_name="old", elo=1010, wins=2,
                              ties=0, losses=1, prompts=1, rounds=1, seed=0)
    entries.bump()
    before = entries.version(maths.context_id)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(CommandError, match="no single-turn prompt in context maths was answered by three"):
            call_command("selfeval", "--context", "maths", "--save", stdout=io.StringIO())
    assert callbacks == [] and entries.version(maths.context_id) == before
    assert list(PeerRating.objects.values_list("model_name", "elo")) == [("old", 1010)]


def test_save_needs_a_context_and_all_contexts_needs_save(tmp_path, db):
    with pytest.raises(CommandError, match="use it with --context or --all-contexts"):
        call_command("selfeval", "--responses", str(tmp_path), "--save", stdout=io.StringIO())
    with pytest.raises(CommandError, match="add --save"):
        call_command("selfeval", "--all-contexts", stdout=io.StringIO())


# --- the boards ------------------------------------------------------------------------------------

def test_the_board_shows_peer_elo_beside_debate_elo_with_the_record_in_the_title(client, board_world):
    writing = board_world["writing"]
    assert refresh_peer_ratings(writing, scorer=WordOverlap()) == 4
    rows = stored(writing)
    page = client.get("/", {"context": writing.context_id}).content.decode()
    sea = rows["sea-poet"]
    assert f"{sea.elo:.0f}" in cell(page, sea.model_id)
    assert (f'title="peer self-evaluation: {sea.wins} wins, {sea.ties} ties, {sea.losses} losses"'
            in cell(page, sea.model_id))
    assert "—" in cell(page, UNRATED)
    header = page[page.index("<thead>"):page.index("</thead>")]
    order = [header.index(f'data-sort="{key}"') for key in ("r", "debate_elo", "peer_elo")]
    assert order == sorted(order)
    assert 'name="board-column" value="peer-elo"' in page, "one of the columns a click away"
    assert f"?context={writing.context_id}&amp;sort=peer_elo&amp;dir=desc" in header
    help_line = re.search(r'<p class="peer-help">(.*?)</p>', page, re.S).group(1)
    assert "answers to the same 3 prompts" in help_line and "not on-chain" in help_line
    assert sea.computed_at.strftime("%Y-%m-%d %H:%M") in help_line


@pytest.mark.parametrize("direction", ["desc", "asc"])
def test_sorting_by_peer_elo_puts_models_without_one_last(board_world, direction):
    writing = board_world["writing"]
    refresh_peer_ratings(writing, scorer=WordOverlap())
    rated = sorted(stored(writing).values(), key=lambda r: r.elo, reverse=direction == "desc")
    board = boards.build_board(writing.context_id, "peer_elo", direction)
    assert [row.model_id for row in board.ranked] == [r.model_id for r in rated] + [UNRATED]
    assert {row.model_id: row.rank for row in board.ranked}[UNRATED] == 5, "the rank stays by R"


def test_json_and_csv_exports_carry_peer_elo(client, board_world):
    writing = board_world["writing"]
    refresh_peer_ratings(writing, scorer=WordOverlap())
    rows = stored(writing)
    sea = rows["sea-poet"]
    data = client.get(f"/api/boards/{writing.context_id}", {"sort": "peer_elo"}).json()
    assert data["sort"] == "peer_elo" and "not on-chain" in data["peer"] and data["peer_computed_at"]
    by_id = {r["model_id"]: r for r in data["ranked"]}
    assert by_id[sea.model_id]["peer_elo"] == pytest.approx(sea.elo)
    assert by_id[sea.model_id]["peer_record"] == {"wins": sea.wins, "ties": sea.ties, "losses": sea.losses}
    assert by_id[UNRATED]["peer_elo"] is None and by_id[UNRATED]["peer_record"] is None
    assert data["ranked"][-1]["model_id"] == UNRATED

    body = client.get(f"/api/boards/{writing.context_id}.csv", {"sort": "peer_elo", "dir": "asc"}).content.decode()
    table = list(csv.reader(io.StringIO(body)))
    # Columns added later (the arena's) come after these: a reader's earlier column positions hold.
    at = table[0].index("peer_elo")
    assert table[0] == boards.CSV_HEADER and table[0][at:at + 4] == ["peer_elo", "peer_wins", "peer_ties", "peer_losses"]
    by_id = {r[2]: r for r in table[1:]}
    assert by_id[sea.model_id][at:at + 4] == [f"{sea.elo:.1f}", str(sea.wins), str(sea.ties), str(sea.losses)]
    assert by_id[UNRATED][at:at + 4] == ["", "", "", ""]
    assert table[-1][2] == UNRATED


def test_a_refresh_re_renders_the_served_board_once_it_commits(client, board_world,
                                                              django_capture_on_commit_callbacks):
    writing = board_world["writing"]
    entries.bump()  # boards are cached from here on
    sea_id = board_world["models"]["sea-poet"].model_id

    def served():
        return client.get("/", {"context": writing.context_id}).content.decode()

    page = served()
    assert "—" in cell(page, sea_id) and "no peer self-evaluation has been run" in page
    versions = (entries.version(writing.context_id), entries.version(GLOBAL_CONTEXT_ID))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        refresh_peer_ratings(writing, scorer=WordOverlap())
    assert served() == page, "nothing moves before the commit"
    for callback in callbacks:
        callback()
    assert entries.version(writing.context_id) != versions[0]
    page = served()
    assert f"{stored(writing)['sea-poet'].elo:.0f}" in cell(page, sea_id)
    assert client.get(f"/api/boards/{writing.context_id}").json()["peer_computed_at"]


def test_names_are_escaped(client, board_world):
    writing = board_world["writing"]
    refresh_peer_ratings(writing, scorer=WordOverlap())
    page = client.get("/", {"context": writing.context_id, "sort": "peer_elo"}).content.decode()
    assert "<b>quiet</b>" not in page and "&lt;b&gt;quiet&lt;/b&gt;" in page


def test_the_global_board_has_no_peer_elo_and_says_why(client, board_world):
    writing = board_world["writing"]
    refresh_peer_ratings(writing, scorer=WordOverlap())
    sea = board_world["models"]["sea-poet"]
    BoardEntry.objects.create(model_id=sea.model_id, context_id=GLOBAL_CONTEXT_ID, name="sea-poet", r=WAD // 2,
                              ra=0, rh=0, n_auto=5, n_human=3, block_number=10, **ranked_enough(0.5))
    board = boards.build_board(GLOBAL_CONTEXT_ID, "peer_elo")
    assert [row.peer_elo for row in board.rows] == [None]
    assert "the global board has none" in board.peer_text
    data = client.get(f"/api/boards/{GLOBAL_CONTEXT_ID}").json()
    assert data["ranked"][0]["peer_elo"] is None and data["peer_computed_at"] is None
