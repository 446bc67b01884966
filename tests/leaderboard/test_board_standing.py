"""One version of a board is built once per process and shared by all its views (every sort, direction,
the page and the exports): what a board's version moving costs is one build, and each view's order
and rendering of rows it shares."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.chain.models import Context
from apps.leaderboard import arena_entries, boards, entries, weighting
from apps.leaderboard.templatetags import reputation
from tests.leaderboard.test_boards import CTX, mid, rep

pytestmark = pytest.mark.django_db


@pytest.fixture
def board():
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    rep(1, 0.7, n_human=3, name="alpha", band=(0.61, 0.78))
    rep(2, 0.9, n_human=4, name="bravo", band=(0.85, 0.93))
    rep(3, 0.5, n_auto=9, name="charlie")  # not ranked
    entries.bump({CTX})


def test_every_order_of_one_version_shares_its_rows_and_a_new_version_is_built_again(board):
    first = boards.build_board(CTX, "r", "desc")
    with CaptureQueriesContext(connection) as seen:
        other = boards.build_board(CTX, "name", "asc")
    assert len(seen) == 1, [q["sql"] for q in seen]  # the board's version, nothing else
    assert [r.name for r in other.rows] == ["alpha", "bravo", "charlie"] and [r.name for r in first.rows] == [
        "bravo", "alpha", "charlie"]
    assert {id(r) for r in first.rows} == {id(r) for r in other.rows}
    assert other.generated_at == first.generated_at, "the time its rows were read, not of this order"
    rep(4, 0.8, n_human=3, name="delta", band=(0.7, 0.9))
    entries.bump({CTX})  # what the indexer does when it folds an evaluation here
    again = boards.build_board(CTX, "name", "asc")
    assert [r.name for r in again.rows] == ["alpha", "bravo", "delta", "charlie"]
    assert not {id(r) for r in again.rows} & {id(r) for r in first.rows}


def test_the_validity_figures_are_queried_again_when_the_votes_change_not_at_every_evaluation(board, monkeypatch):
    calls = []
    real = weighting.site_votes
    monkeypatch.setattr(weighting, "site_votes", lambda context_id: calls.append(context_id) or real(context_id))
    boards.build_board(CTX)
    entries.bump({CTX})  # an evaluation folded
    boards.build_board(CTX)
    assert calls == [CTX]
    arena_entries.mark_stale({CTX})  # a vote folded: the indexer moves the arena's generation
    entries.bump({CTX})
    boards.build_board(CTX)
    assert calls == [CTX, CTX]


def test_a_row_of_the_table_is_rendered_once_for_every_order(board, client, monkeypatch):
    rendered = []
    real = reputation.board_tr
    monkeypatch.setattr(reputation, "board_tr", lambda row: rendered.append(row.model_id) or real(row))
    pages = [client.get("/", {"context": CTX, "sort": sort, "dir": direction}).content.decode()
             for sort in ("r", "ra", "name") for direction in ("asc", "desc")]
    assert sorted(rendered) == [mid(1), mid(2), mid(3)]
    assert all(f'data-model="{mid(2)}"' in page for page in pages)
    by_name = {d: page[page.index('class="board ranked"'):] for d, page in zip(("asc", "desc"), pages[-2:])}
    assert by_name["asc"].index(f'data-model="{mid(1)}"') < by_name["asc"].index(f'data-model="{mid(2)}"')
    assert by_name["desc"].index(f'data-model="{mid(1)}"') > by_name["desc"].index(f'data-model="{mid(2)}"')


def test_while_a_board_moves_its_views_show_one_standing_for_a_while_and_say_which(board, client, settings,
                                                                                   monkeypatch):
    settings.LLMCHAIN_BOARD_MAX_STALE_S = 4  # a standing is used for 2 s after its version moved
    clock = [100.0]
    monkeypatch.setattr(boards.time, "monotonic", lambda: clock[0])
    first = client.get("/", {"context": CTX})
    shown = first[boards.VERSION_HEADER]
    assert shown == entries.version(CTX) and client.get(f"/api/boards/{CTX}")[boards.VERSION_HEADER] == shown
    rep(4, 0.8, n_human=3, name="delta", band=(0.7, 0.9))
    entries.bump({CTX})
    clock[0] += 1.5
    again = client.get("/", {"context": CTX, "sort": "name"})
    assert again[boards.VERSION_HEADER] == shown and "delta" not in again.content.decode()
    clock[0] += 1
    now = client.get("/", {"context": CTX, "sort": "ra"})
    assert now[boards.VERSION_HEADER] == entries.version(CTX) != shown and "delta" in now.content.decode()
    assert boards.build_board(CTX).version == entries.version(CTX), "by default, the board as it is now"


def test_verify_reads_the_table_as_it_is_not_the_standing_kept_for_its_version(board):
    from apps.leaderboard.models import BoardEntry
    from apps.leaderboard.verify import SiteBoards

    boards.build_board(CTX)
    BoardEntry.objects.filter(context_id=CTX, model_id=mid(1)).update(name="tampered")  # behind the indexer
    assert "alpha" in [r.name for r in boards.build_board(CTX).rows], "kept for the version"
    assert "tampered" in [r.name for r in SiteBoards().board(CTX).rows]


def test_the_rating_figures_are_read_again_when_a_rating_is_folded_or_rolled_back_not_at_every_evaluation(
        monkeypatch):
    """Folded through the indexer: an evaluation moves the board's version and leaves its ratings
    generation; a rating of an answer with a reference moves both, and so does its rollback."""
    from apps.chain import indexer
    from lib.ids import hex32
    from tests.leaderboard.test_incremental_entries import Chain

    calls = []
    real = weighting.site_ratings
    monkeypatch.setattr(weighting, "site_ratings", lambda context_id: calls.append(context_id) or real(context_id))
    chain = Chain(seed=3)
    evaluated = None
    while evaluated is None:  # an evaluation with a reference
        events = chain.call()
        if events[0]["event"] == "AutoEvaluated" and events[0]["args"]["hasReference"]:
            evaluated = events
        chain.open = chain.open[-1:]
    ctx = hex32(evaluated[0]["args"]["contextId"])
    Context.objects.create(context_id=ctx, name="ctx", block_number=1)
    with indexer.transaction.atomic():
        indexer.fold(evaluated)

    def figures():
        return boards.build_board(ctx).ratings

    assert figures()["unread"] == 0 and calls == [ctx]
    generation = entries.ratings_generation(ctx)
    chain.rnd.random = lambda: 0.9  # the next call is another evaluation
    with indexer.transaction.atomic():
        indexer.fold(chain.call())
    assert figures()["unread"] == 0 and calls == [ctx], "an evaluation does not read every rating again"
    assert entries.ratings_generation(ctx) == generation
    chain.rnd.random = lambda: 0.5  # a rating of the first answer
    before = entries.version(ctx)
    rated = chain.call()
    assert rated[0]["event"] == "HumanEvaluated"
    with indexer.transaction.atomic():
        indexer.fold(rated)
    assert entries.ratings_generation(ctx) == generation + 1 and entries.version(ctx) != before
    assert figures()["unread"] == 1 and calls == [ctx, ctx], "the rated answer's length is not known here"
    assert entries.ratings_generation(boards.GLOBAL_CONTEXT_ID) >= 1
    with indexer.transaction.atomic():
        indexer.rollback("chain", rated[0]["block"] - 1, {})
    assert entries.ratings_generation(ctx) == generation + 2
    assert figures()["unread"] == 0 and calls == [ctx, ctx, ctx]
