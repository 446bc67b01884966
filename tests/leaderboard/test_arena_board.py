"""The arena columns of the boards: fitted from the counted votes (ArenaBattle) after the indexer's commit,
equal to lib.arena on the same votes, ranked by the intervals, shown beside R (sortable, "—" without
battles, the win-rate matrix, escaped), and exported in the JSON and the CSV."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from django.core.management import call_command
from django.db import transaction

from apps.chain import indexer
from apps.chain.evidence import LocalBlobStore
from apps.chain.models import ArenaBattle, Context, LedgerInteraction
from apps.chat.models import Conversation, Interaction, RegisteredModel
from apps.leaderboard import arena, arena_entries, boards
from apps.leaderboard.models import AnswerStyle, ArenaBoard, ArenaEntry, BoardEntry
from lib import arena as lib_arena
from lib import records
from lib.reputation import GLOBAL_CONTEXT_ID
from tests.personas import developer, user

pytestmark = pytest.mark.django_db
CTX = "0x" + "ab" * 32
OTHER = "0x" + "cd" * 32
WAD = 10**18
WORDS = {1: "a", 2: "b", 3: "tie", 4: "bad"}


def mid(n: int) -> str:
    return "0x" + f"{n:02x}" * 32


def iid(k: int, side: str) -> str:
    return "0x" + f"{k:060x}" + ("aaaa" if side == "a" else "bbbb")


def entry(model: int, context: str = CTX, name: str | None = None) -> BoardEntry:
    return BoardEntry.objects.create(model_id=mid(model), context_id=context, name=name or f"model-{model}",
                                     ra=WAD // 2, rh=WAD // 2, r=WAD // 2, n_auto=6, n_human=0, block_number=3)


def battle(k: int, a: int, b: int, outcome: int | None, *, context: str = CTX, voided: bool = False,
           block: int | None = None, style: tuple | None = None) -> ArenaBattle:
    """Battle k between models a and b, voted `outcome` (None: not yet); `style` = (len_a, md_a, len_b, md_b)
    stores the answers' measured style as a refresh would."""
    row = ArenaBattle.objects.create(
        battle_id="0x" + f"{k:064x}", context_id=context, model_a=mid(a), model_b=mid(b), interaction_a=iid(k, "a"),
        interaction_b=iid(k, "b"), user="0x" + "11" * 20, voided=voided, block_number=10 + k, tx="0x" + "22" * 32,
        outcome=outcome, counted=None if outcome is None else not voided,
        vote_block=None if outcome is None else (block or 20 + k), vote_tx="" if outcome is None else "0x" + "33" * 32)
    if style is not None:
        AnswerStyle.objects.create(interaction_id=row.interaction_a, length=style[0], markdown=style[1], source="chat")
        AnswerStyle.objects.create(interaction_id=row.interaction_b, length=style[2], markdown=style[3], source="chat")
    return row


def random_votes(n: int, models: int, seed: int = 7, context: str = CTX, start: int = 0) -> None:
    """n counted votes where the lower-numbered model tends to win, with varied answer styles."""
    rng = np.random.default_rng(seed)
    for k in range(start, start + n):
        a, b = (int(x) for x in rng.choice(models, 2, replace=False) + 1)
        p_a = 1 / (1 + 10 ** ((a - b) * 60 / 400))  # 60 Elo points per step down the list
        outcome = int(rng.choice([1, 2, 3, 4], p=[0.8 * p_a, 0.8 * (1 - p_a), 0.15, 0.05]))
        battle(k, a, b, outcome, context=context,
               style=(int(rng.integers(40, 3000)), float(rng.random() * 30), int(rng.integers(40, 3000)),
                      float(rng.random() * 30)))


def refit(*contexts: str, django_capture_on_commit_callbacks) -> None:
    """What the indexer does when it folds votes: mark the boards in its transaction, refit after the commit."""
    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            indexer.folded.send(sender=indexer.fold, pairs=set(), models=set(), contexts=set(), arena=set(contexts))


@pytest.fixture(autouse=True)
def _rounds(settings):
    settings.LLMCHAIN_ARENA_BOOTSTRAP = 40
    settings.LLMCHAIN_ARENA_STYLE_BOOTSTRAP = 6


@pytest.fixture
def arena_board(django_capture_on_commit_callbacks):
    """Four models in `math` with 240 counted votes (model 1 best), a voided battle, an unvoted one, and a
    fifth model on the board without any battle."""
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    for m in range(1, 6):
        entry(m)
        entry(m, GLOBAL_CONTEXT_ID)
    random_votes(240, 4)
    battle(900, 4, 1, 1, voided=True, style=(10, 0, 10, 0))  # "4 better", but an answer named its model
    battle(901, 4, 1, None)  # not voted yet
    refit(CTX, django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)


def expected_boards(context: str, bootstrap: int = 40, style_bootstrap: int = 6):
    """lib.arena's boards on the board's counted votes, in battle id order, seeded as the recipe says."""
    votes = ArenaBattle.objects.filter(counted=True, outcome__isnull=False).order_by("battle_id")
    if context != GLOBAL_CONTEXT_ID:
        votes = votes.filter(context_id=context)
    votes = list(votes)
    styles = {s.interaction_id: s for s in AnswerStyle.objects.all()}
    seed = arena.seed_for(context, len(votes), max(v.vote_block for v in votes))
    columns = lib_arena.Votes.from_columns(
        [v.model_a for v in votes], [v.model_b for v in votes], [WORDS[v.outcome] for v in votes],
        [styles[v.interaction_a].length for v in votes], [styles[v.interaction_b].length for v in votes],
        [styles[v.interaction_a].markdown for v in votes], [styles[v.interaction_b].markdown for v in votes])
    with arena.one_blas_thread():
        return (lib_arena.board(columns, bootstrap=bootstrap, seed=seed),
                lib_arena.style_board(columns, bootstrap=style_bootstrap, seed=seed), seed, len(votes))


def test_the_board_s_arena_is_lib_arena_on_the_counted_votes(arena_board):
    plain, styled, seed, n = expected_boards(CTX)
    assert n == 240, "the voided and the unvoted battles are not counted"
    board = boards.build_board(CTX)
    rows = {r.model_id: r for r in board.rows}
    for s in plain.standings:
        row, st = rows[s.model], styled.standing(s.model)
        assert (row.arena_elo, row.arena_ci_low, row.arena_ci_high) == pytest.approx((s.elo, s.ci_low, s.ci_high),
                                                                                     abs=1e-9)
        assert (row.arena_rank, row.battles, row.arena_wins, row.arena_ties, row.arena_losses) == \
            (s.rank, s.battles, s.wins, s.ties, s.losses)
        assert row.arena_win_rate == pytest.approx(s.win_rate)
        assert (row.style_elo, row.style_ci_low, row.style_ci_high) == pytest.approx((st.elo, st.ci_low, st.ci_high),
                                                                                     abs=1e-9)
        assert row.style_rank == st.rank
    assert [s.model for s in plain.standings][0] == mid(1) and rows[mid(1)].arena_elo > rows[mid(4)].arena_elo + 100
    assert sum(r.battles for r in board.rows) == 2 * 240
    five = rows[mid(5)]
    assert (five.arena_elo, five.arena_rank, five.battles, five.style_elo) == (None, None, 0, None)
    assert board.arena.votes == board.arena.style_votes == 240 and board.arena.seed == seed
    assert (board.arena.bootstrap, board.arena.style_bootstrap) == (40, 6) and not board.arena.stale
    assert [m for m, _ in board.arena.models] == [s.model for s in plain.standings]
    assert board.arena.win_rates == plain.win_rates
    assert [c["feature"] for c in board.arena.coefficients] == ["length", "markdown"]
    assert board.arena.coefficients[0]["value"] == pytest.approx(styled.coefficients[0].value)


def test_the_global_board_counts_every_context_s_votes(arena_board, django_capture_on_commit_callbacks):
    Context.objects.create(context_id=OTHER, name="code", block_number=2)
    for m in (1, 2):
        entry(m, OTHER)
    random_votes(30, 2, seed=3, context=OTHER, start=1000)
    refit(OTHER, django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)
    plain, _, _, n = expected_boards(GLOBAL_CONTEXT_ID)
    assert n == 270
    rows = {r.model_id: r for r in boards.build_board(GLOBAL_CONTEXT_ID).rows}
    for s in plain.standings:
        assert rows[s.model].arena_elo == pytest.approx(s.elo, abs=1e-9) and rows[s.model].battles == s.battles
    other = {r.model_id: r for r in boards.build_board(OTHER).rows}
    assert other[mid(1)].battles + other[mid(2)].battles == 60 and set(other) == {mid(1), mid(2)}


def test_a_model_is_ranked_below_another_only_when_the_intervals_say_so():
    """Model 1 beats everyone by far; 2 and 3 split their votes: 2 and 3 share rank 2 although 2 has the
    higher Elo, since their intervals overlap (Chatbot Arena's rule)."""
    rows = []
    for k in range(60):
        rows += [(mid(1), mid(2), 1 if k % 10 else 2), (mid(1), mid(3), 1 if k % 10 else 3)]
    rows += [(mid(2), mid(3), 1 if k % 2 else 2) for k in range(41)]
    columns = arena.VoteColumns.of((a, b, o, None, None, None, None, k) for k, (a, b, o) in enumerate(rows))
    result = arena.compute(CTX, columns, bootstrap=100, style_bootstrap=0)
    assert [x.model_id for x in result.lines] == [mid(1), mid(2), mid(3)]
    assert [x.rank for x in result.lines] == [1, 2, 2]
    for x in result.lines:  # the rule itself: 1 + the models whose lower bound is above this upper bound
        assert x.rank == 1 + sum(o.ci_low > x.ci_high for o in result.lines)
    assert result.lines[1].elo > result.lines[2].elo and result.lines[1].ci_low < result.lines[2].ci_high
    assert result.style_problem == "no vote has the text of both its answers known yet"
    assert all(x.style_elo is None for x in result.lines)


def test_the_same_votes_give_the_same_intervals_and_a_new_vote_new_draws():
    rows = [(mid(1 + k % 3), mid(1 + (k + 1) % 3), 1 + k % 4, None, None, None, None, k) for k in range(90)]
    first = arena.compute(CTX, arena.VoteColumns.of(rows), bootstrap=30, style_bootstrap=0)
    again = arena.compute(CTX, arena.VoteColumns.of(rows), bootstrap=30, style_bootstrap=0)
    assert first == again and first.seed == arena.seed_for(CTX, 90, 89)
    more = arena.compute(CTX, arena.VoteColumns.of(rows + [(mid(1), mid(2), 3, None, None, None, None, 95)]),
                         bootstrap=30, style_bootstrap=0)
    assert more.seed != first.seed


def test_votes_folded_mark_the_boards_stale_and_the_refit_follows_the_commit(django_capture_on_commit_callbacks):
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    entry(1), entry(2)
    random_votes(20, 2)
    with django_capture_on_commit_callbacks() as callbacks:  # the fold's transaction, not committed yet
        with transaction.atomic():
            indexer.folded.send(sender=indexer.fold, pairs=set(), models=set(), contexts=set(), arena={CTX})
    marked = {b.context_id: b for b in ArenaBoard.objects.all()}
    assert set(marked) == {CTX, GLOBAL_CONTEXT_ID} and all(b.stale for b in marked.values())
    assert not ArenaEntry.objects.exists(), "nothing is fitted inside the indexer's transaction"
    page = boards.build_board(CTX)
    assert page.arena.stale and page.rows[0].arena_elo is None
    assert len(callbacks) == 1
    callbacks[0]()  # the commit
    assert not any(b.stale for b in ArenaBoard.objects.all())
    assert ArenaEntry.objects.filter(context_id=CTX).count() == ArenaEntry.objects.filter(
        context_id=GLOBAL_CONTEXT_ID).count() == 2
    assert boards.build_board(CTX).arena.votes == 20


def test_with_a_refit_worker_the_indexer_only_marks_and_the_command_refits(settings,
                                                                           django_capture_on_commit_callbacks):
    settings.LLMCHAIN_ARENA_REFIT = "worker"
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    entry(1), entry(2)
    random_votes(20, 2)
    with django_capture_on_commit_callbacks() as callbacks:
        with transaction.atomic():
            indexer.folded.send(sender=indexer.fold, pairs=set(), models=set(), contexts=set(), arena={CTX})
    assert not callbacks and all(b.stale for b in ArenaBoard.objects.all())
    out = io.StringIO()
    call_command("leaderboard", "arena", stdout=out)
    assert out.getvalue().strip() == "refitted the arena of 2 boards"
    assert not any(b.stale for b in ArenaBoard.objects.all()) and boards.build_board(CTX).arena.votes == 20


def test_a_refit_never_overwrites_a_newer_one(arena_board, monkeypatch):
    """A slow refit that read generation g finishes after a faster one stored g + 1: it keeps g + 1's rows."""
    ArenaBoard.objects.filter(context_id=CTX).update(generation=5, computed_generation=4)
    real_compute = arena.compute

    def slower(context_id, columns, **kw):
        result = real_compute(context_id, columns, **kw)
        # meanwhile another refit, of a newer generation (a vote folded since), stored its result
        ArenaBoard.objects.filter(context_id=CTX).update(generation=6, computed_generation=6, votes=241)
        return result

    monkeypatch.setattr(arena, "compute", slower)
    arena_entries.refresh_board(CTX)
    state = ArenaBoard.objects.get(context_id=CTX)
    assert (state.computed_generation, state.votes) == (6, 241) and not state.stale


def test_new_votes_are_read_alone_and_a_rollback_reads_the_context_again(arena_board, monkeypatch,
                                                                         django_capture_on_commit_callbacks):
    """The refit after a fold reads only the votes folded since the last one; votes that went back (a reorg)
    or any other change to the voted rows make it read the whole context again."""
    held = arena_entries._votes[CTX]
    assert len(held.battle) == 240 and held.watermark == max(ArenaBattle.objects.exclude(vote_block=None)
                                                             .values_list("vote_block", flat=True))
    reads = []
    real_read = arena_entries._read
    monkeypatch.setattr(arena_entries, "_read", lambda c, h: reads.append((c, h.watermark)) or real_read(c, h))
    battle(2000, 3, 2, 3, block=5000, style=(300, 1.0, 200, 0.0))
    refit(CTX, django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)
    assert reads and all(w >= held.watermark for _, w in reads), "only the votes after the last one read"
    plain, styled, _, n = expected_boards(CTX)
    rows = {r.model_id: r for r in boards.build_board(CTX).rows}
    assert n == 241 and all(rows[s.model].arena_elo == pytest.approx(s.elo, abs=1e-9) for s in plain.standings)
    assert all(rows[s.model].style_elo == pytest.approx(styled.standing(s.model).elo, abs=1e-9)
               for s in plain.standings)

    # A rollback: the indexer empties some votes and sends `folded` from its rollback.
    reads.clear()
    ArenaBattle.objects.filter(battle_id__in=["0x" + f"{k:064x}" for k in (0, 1, 2000)]).update(
        outcome=None, counted=None, vote_block=None)
    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            indexer.folded.send(sender=indexer.rollback, pairs=set(), models=set(), contexts=set(), arena={CTX})
    assert (CTX, -1) in reads, "the context read again from the start"
    plain, _, _, n = expected_boards(CTX)
    rows = {r.model_id: r for r in boards.build_board(CTX).rows}
    assert n == 238 and all(rows[s.model].arena_elo == pytest.approx(s.elo, abs=1e-9) for s in plain.standings)
    # A change behind the indexer's back that moves the votes' count is read again too.
    ArenaBattle.objects.filter(battle_id="0x" + f"{3:064x}").update(outcome=None, counted=None, vote_block=None)
    refit(CTX, django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)
    assert boards.build_board(CTX).arena.votes == 237


def test_a_vote_rolled_back_leaves_the_board(arena_board, django_capture_on_commit_callbacks):
    ArenaBattle.objects.filter(context_id=CTX).update(outcome=None, counted=None, vote_block=None)
    refit(CTX, django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)
    board = boards.build_board(CTX)
    assert board.arena.votes == 0 and all(r.arena_elo is None and r.battles == 0 for r in board.rows)
    assert not ArenaEntry.objects.filter(context_id=CTX).exists()


def test_answers_are_read_from_the_chat_else_from_the_evidence_and_unknown_ones_leave_the_style_fit(
        settings, tmp_path, django_capture_on_commit_callbacks):
    settings.LLMCHAIN_IPFS_DIR = tmp_path
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    dev, alice = developer(), user()
    model = RegisteredModel.objects.create(owner=dev, name="answerer", provider="p", model_id=mid(1),
                                           metadata_cid="bafy1")
    conversation = Conversation.objects.create(user=alice, model=model, context=Context.objects.get(context_id=CTX))
    chat_answer = "# Plan\n\n- one\n- two\n\n**done**"
    Interaction.objects.create(conversation=conversation, interaction_id=iid(0, "a"), prompt="q",
                                   answer=chat_answer, status=Interaction.Status.DONE)
    evidence_answer = "A plain answer, with no Markdown at all."
    record = records.interaction_evidence(
        interaction_id=iid(0, "b"), context_id=CTX, context_name="math", prompt="q", model_id=mid(2),
        answer=evidence_answer, references=[], metric={"name": "none"}, sa=0, wa=0)
    cid = LocalBlobStore(tmp_path).put(records.canonical(record))
    for k, (interaction, evidence_cid) in enumerate([(iid(0, "b"), cid), (iid(1, "a"), "not-a-cid")]):
        LedgerInteraction.objects.create(interaction_id=interaction, model_id=mid(2 - k), context_id=CTX,
                                        user="0x" + "11" * 20, has_reference=False, sa=0, wa=0,
                                        evidence_cid=evidence_cid, auto_tx="0x", auto_block=1)
    battle(0, 1, 2, 1)
    battle(1, 1, 2, 3)  # neither answer can be read: counted on the board, left out of the style fit
    refit(CTX, django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)
    styles = {s.interaction_id: s for s in AnswerStyle.objects.all()}
    assert set(styles) == {iid(0, "a"), iid(0, "b")}
    assert (styles[iid(0, "a")].length, styles[iid(0, "a")].source) == (len(chat_answer), "chat")
    assert styles[iid(0, "a")].markdown == pytest.approx(lib_arena.markdown_density(chat_answer))
    assert styles[iid(0, "a")].markdown > 0
    assert (styles[iid(0, "b")].length, styles[iid(0, "b")].markdown) == (len(evidence_answer), 0.0)
    assert styles[iid(0, "b")].source == "evidence"
    state = ArenaBoard.objects.get(context_id=CTX)
    assert (state.votes, state.style_votes) == (2, 1)

    # Battle 1's evidence becomes readable (pinned late): the next refit counts it in the style fit.
    store = LocalBlobStore(tmp_path)
    for side, model in (("a", 1), ("b", 2)):
        text = f"Answer {side}:\n\n- a list item" * (3 if side == "a" else 1)
        cid = store.put(records.canonical(records.interaction_evidence(
            interaction_id=iid(1, side), context_id=CTX, context_name="math", prompt="q", model_id=mid(model),
            answer=text, references=[], metric={"name": "none"}, sa=0, wa=0)))
        LedgerInteraction.objects.update_or_create(interaction_id=iid(1, side), defaults=dict(
            model_id=mid(model), context_id=CTX, user="0x" + "11" * 20, has_reference=False, sa=0, wa=0,
            evidence_cid=cid, auto_tx="0x", auto_block=1))
    refit(CTX, django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)
    state = ArenaBoard.objects.get(context_id=CTX)
    assert (state.votes, state.style_votes) == (2, 2) and AnswerStyle.objects.count() == 4


def test_a_style_fit_the_votes_cannot_support_is_said_not_invented(django_capture_on_commit_callbacks):
    """Two votes where the longer answer always won: style explains them perfectly, and no finite
    coefficient exists. The plain columns stand; the style ones are "—" with the reason."""
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    entry(1), entry(2)
    battle(0, 1, 2, 1, style=(900, 0, 100, 0))
    battle(1, 1, 2, 2, style=(100, 0, 900, 0))
    refit(CTX, django_capture_on_commit_callbacks=django_capture_on_commit_callbacks)
    board = boards.build_board(CTX)
    assert all(r.arena_elo is not None and r.style_elo is None for r in board.rows)
    assert "style fit has no finite scores" in board.arena.style_problem


# --- the page and the exports ------------------------------------------------------------------------

def test_the_page_shows_the_arena_beside_r_sortable_with_the_matrix(arena_board, client):
    board = boards.build_board(CTX, "arena_elo")
    assert [r.model_id for r in board.rows][:4] == [mid(1), mid(2), mid(3), mid(4)] and board.rows[4].model_id == \
        mid(5), "models without battles last"
    page = client.get("/", {"context": CTX, "sort": "arena_elo"}).content.decode()
    for label in ("Arena Elo", "Style-controlled Elo", "Battles"):
        assert f">{label}<" in page or f">{label} <" in page, label
    assert 'aria-sort="descending" data-sort="arena_elo"' in page
    assert f"?context={CTX}&amp;sort=style_elo&amp;dir=desc" in page
    assert page.index(">model-1<") < page.index(">model-4<") < page.index(">model-5<")
    one = next(r for r in boards.build_board(CTX).rows if r.model_id == mid(1))
    # One line: the score, its interval beside it, the arena rank in the title.
    assert f"{one.arena_elo:.0f}</span> <small class=\"muted\">{one.arena_ci_low:.0f}–{one.arena_ci_high:.0f}</small>" in page
    assert f"; arena rank {one.arena_rank}\">" in page
    assert f">{one.battles}</span> <small class=\"muted\">{100 * one.arena_win_rate:.0f}% won</small>" in page
    row5 = page[page.index(f'<tr data-model="{mid(5)}"'):]
    row5 = row5[:row5.index("</tr>")]
    assert row5.count("—") >= 3 and "no counted arena vote on this board" in row5
    assert "Who beats whom" in page and 'hx-trigger="toggle once"' in page and "win-matrix" not in page
    assert f'hx-get="/boards/arena-matrix?context={CTX}"' in page, "the matrix loads when it is opened"
    assert "What do the arena columns mean?" in page and "1 plus the number of models whose whole" in page
    assert "240 counted votes on this board" in page
    ascending = client.get("/", {"context": CTX, "sort": "battles", "dir": "asc"}).content.decode()
    assert ascending.index(f'<tr data-model="{mid(5)}"') > ascending.index(f'<tr data-model="{mid(1)}"')


def test_the_win_rate_matrix_is_its_own_part_of_the_board(arena_board, client):
    plain, *_ = expected_boards(CTX)
    part = client.get("/boards/arena-matrix", {"context": CTX}, headers={"HX-Request": "true"}).content.decode()
    assert part.lstrip().startswith("<p") and "<html" not in part and '<table class="win-matrix">' in part
    assert part.count('<td class="wr self">') == 4 and part.count("<tr data-model=") == 4
    one_vs_two = plain.win_rates[0][1]
    assert f">{one_vs_two:.2f}</td>" in part
    assert part.index(f'<tr data-model="{mid(1)}"') < part.index(f'<tr data-model="{mid(4)}"'), "best first"
    page = client.get("/boards/arena-matrix", {"context": CTX}).content.decode()
    assert "<html" in page and "math arena: who beats whom" in page and '<table class="win-matrix">' in page
    assert client.get("/boards/arena-matrix", {"context": "0xnope"}).status_code == 400
    assert client.get("/boards/arena-matrix", {"context": "0x" + "ee" * 32}).status_code == 404
    data = client.get(f"/api/boards/{CTX}/arena").json()
    assert [m["model_id"] for m in data["models"]] == [s.model for s in plain.standings]
    assert data["win_rates"] == [list(r) for r in plain.win_rates] and data["votes"] == 240


def test_model_names_in_the_arena_are_escaped(arena_board, client):
    BoardEntry.objects.filter(model_id=mid(2)).update(name='<img src=x onerror="alert(1)">')
    page = client.get("/", {"context": CTX}).content.decode()
    assert "<img src=x" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    matrix = client.get("/boards/arena-matrix", {"context": CTX}).content.decode()
    escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    assert "<img src=x" not in matrix and f'<th scope="row" title="{mid(2)}">{escaped}</th>' in matrix
    assert f'<th scope="col" title="{mid(2)}">{escaped}</th>' in matrix


def test_a_board_without_votes_says_so(client):
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    entry(1)
    page = client.get("/", {"context": CTX}).content.decode()
    assert "No arena vote has been counted on this board yet" in page and "win-matrix" not in page
    data = client.get(f"/api/boards/{CTX}").json()
    assert data["arena"] is None and "Arena Elo turns those votes into one score per model" in data["arena_text"]
    row = (data["ranked"] + data["provisional"])[0]
    assert (row["arena_elo"], row["battles"]) == (None, 0)


def test_the_json_and_the_csv_carry_the_arena_columns(arena_board, client):
    board = boards.build_board(CTX)
    rows = {r.model_id: r for r in board.rows}
    data = client.get(f"/api/boards/{CTX}", {"sort": "arena_elo"}).json()
    assert data["sort"] == "arena_elo"
    served = {r["model_id"]: r for r in data["ranked"] + data["provisional"]}
    for model, row in rows.items():
        r = served[model]
        assert (r["arena_elo"], r["arena_ci_low"], r["arena_ci_high"], r["battles"]) == \
            (row.arena_elo, row.arena_ci_low, row.arena_ci_high, row.battles)
        assert (r["arena_rank"], r["arena_win_rate"], r["style_elo"], r["style_rank"]) == \
            (row.arena_rank, row.arena_win_rate, row.style_elo, row.style_rank)
    a = data["arena"]
    assert (a["votes"], a["bootstrap"], a["style_bootstrap"], a["stale"]) == (240, 40, 6, False)
    assert a["matrix_url"] == f"/api/boards/{CTX}/arena" and a["style_bootstrap_failed"] == 0
    assert a["seed"] == board.arena.seed and a["style_problem"] == "" and "Elo" in a["text"]

    text = client.get(f"/api/boards/{CTX}.csv", {"sort": "arena_elo"}).content.decode()
    table = list(csv.reader(io.StringIO(text)))
    assert table[0] == boards.CSV_HEADER
    line = dict(zip(table[0], table[1]))
    one = rows[line["model_id"]]
    assert line["model_id"] == mid(1) and line["arena_elo"] == f"{one.arena_elo:.6f}"
    assert (line["arena_ci_low"], line["arena_ci_high"]) == (f"{one.arena_ci_low:.6f}", f"{one.arena_ci_high:.6f}")
    assert (line["battles"], line["arena_rank"], line["style_rank"]) == (str(one.battles), str(one.arena_rank),
                                                                         str(one.style_rank))
    five = dict(zip(table[0], table[-1]))
    assert five["model_id"] == mid(5) and (five["arena_elo"], five["battles"], five["arena_rank"]) == ("", "0", "")


def test_two_processes_marking_a_new_board_stale_at_once_both_count(monkeypatch):
    """The indexer and a rebuild both find no row for a new board: the one that inserts second moves the
    row the first created instead of failing on its unique context."""
    from django.db.models import QuerySet

    context = "0x" + "ab" * 32
    real_update = QuerySet.update
    raced = []

    def update(self, **fields):
        if self.model is ArenaBoard and not raced:
            raced.append(True)
            ArenaBoard.objects.create(context_id=context, generation=1)  # the other process, just before
            return 0
        return real_update(self, **fields)

    monkeypatch.setattr(QuerySet, "update", update)
    arena_entries._next_generation(context)
    assert raced and ArenaBoard.objects.get(context_id=context).generation == 2
