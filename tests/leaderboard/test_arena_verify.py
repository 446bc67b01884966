"""`leaderboard verify` and /verify/ rebuild the arena columns from the chain alone (the BattleOpened and
Voted events, the voted answers' evidence on IPFS) and match the served board after real battles and votes
on a node; a vote tampered with in the site's database, once the board is refitted from it, is named."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from io import StringIO

import numpy as np
import pytest
from django.core.cache import cache
from django.core.management import call_command

from apps.chain import outbox
from apps.chain.evidence import LocalBlobStore
from apps.chain.models import ArenaBattle, OutboxItem
from apps.chain.submitter import Submitter
from apps.leaderboard import arena, arena_entries
from apps.leaderboard.models import ArenaBoard, ArenaEntry
from apps.leaderboard.verify import (ARENA_COLUMNS, STYLE_COLUMNS, WEIGHTED_COLUMNS, CidReader, RemoteSite, SiteBoards,
                                     rebuild_from_chain, verify_boards)
from lib import arena as lib_arena
from lib import records
from lib.reputation import GLOBAL_CONTEXT_ID
from tests.chain.conftest import drain, ledger, ledger_node, rand_id, reindex, world  # noqa: F401  (fixtures)
from tests.leaderboard.test_verify import checked, metadata

pytestmark = pytest.mark.chain
ARENA_KEYS = [key for key, _ in ARENA_COLUMNS + STYLE_COLUMNS]
WEIGHTED_KEYS = [key for key, _ in WEIGHTED_COLUMNS]


def planned_battles(n: int = 30, seed: int = 5) -> list[tuple[str, str, int, str, str]]:
    """(model A, model B, outcome, A's answer, B's answer) of n battles: alpha tends to win, a quarter are ties
    and some both bad; the answers' lengths and Markdown vary apart from the outcomes, so that the style fit
    is made (no resample is explained by style alone)."""
    rng = np.random.default_rng(seed)
    strength = {"alpha": 1.0, "beta": 0.3, "gamma": 0.0}
    decorations = ("{}", "# Title\n\n{}", "- {}\n- more\n- **bold**", "```\ncode\n```\n{}")
    texts = [decorations[int(rng.integers(0, 4))].format(" ".join(["word"] * int(rng.integers(3, 60))))
             for _ in range(2 * n)]
    out = []
    rng = np.random.default_rng(seed + 1)
    for k in range(n):
        a, b = (("alpha", "beta", "gamma")[int(i)] for i in rng.choice(3, 2, replace=False))
        u = rng.random()
        win = rng.random() < 1 / (1 + np.exp(strength[b] - strength[a]))
        out.append((a, b, 3 if u < 0.25 else 4 if u < 0.32 else 1 if win else 2, texts[2 * k], texts[2 * k + 1]))
    return out


BATTLES = planned_battles()
VOTES = len(BATTLES)
ALPHA_BATTLES = sum("alpha" in (a, b) for a, b, *_ in BATTLES)


@pytest.fixture(autouse=True)
def _fresh(settings):
    cache.clear()
    settings.LLMCHAIN_ARENA_BOOTSTRAP = 30
    settings.LLMCHAIN_ARENA_STYLE_BOOTSTRAP = 5
    yield
    cache.clear()


@pytest.fixture(scope="module")
def ipfs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("arena-ipfs")


@pytest.fixture
def arena_world(world, ledger, ledger_node, settings, ipfs_dir, django_capture_on_commit_callbacks):  # noqa: F811
    """Three models answer the same user's prompts in pairs; 30 battles voted (one more voided and voted,
    one opened and never voted), each answer's evidence on IPFS; indexed, and the arena refitted after
    the indexer's commit as on the site."""
    settings.LLMCHAIN_IPFS_DIR = ipfs_dir
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_RPC_URL = ledger_node.url
    settings.LLMCHAIN_DEPLOYMENT = ledger_node.deployment_file
    store = LocalBlobStore(ipfs_dir)
    dev = OutboxItem.objects.get(key=f"register:{world.developer}")
    models = {name: rand_id() for name in ("alpha", "beta", "gamma")}
    for name, model in models.items():
        outbox.enqueue("addModel", world.developer, {"modelId": model, "metadataCid": store.put(
            metadata(name, world.developer))}, depends_on=dev)
    submitter = Submitter(ledger)
    drain(submitter)
    voter = world.users[0]

    def answer(name: str, text: str):
        interaction = rand_id()
        record = records.interaction_evidence(interaction_id=interaction, context_id=world.context,
                                              context_name="reasoning", prompt="What is 40 + 2?",
                                              model_id=models[name], answer=text, references=[],
                                              metric={"name": "none"}, sa=0, wa=0)
        auto = outbox.enqueue("autoEval", world.oracle, {
            "interactionId": interaction, "modelId": models[name], "contextId": world.context, "user": voter,
            "hasReference": False, "sA": "0", "wA": "0", "evidenceCid": store.put(records.canonical(record))})
        return interaction, auto

    battles = []
    plan = [(a, b, o, ta, tb, False) for a, b, o, ta, tb in BATTLES]
    plan += [("beta", "alpha", 1, "I am beta, and 42.", "42", True), ("alpha", "gamma", None, "42", "41", False)]
    for a, b, outcome, text_a, text_b, voided in plan:
        (ia, _), (ib, auto_b) = answer(a, text_a), answer(b, text_b)
        battle_id = rand_id()
        opened = outbox.enqueue("openBattle", world.oracle, {"battleId": battle_id, "interactionA": ia,
                                                             "interactionB": ib, "voided": voided}, depends_on=auto_b)
        if outcome is not None:
            outbox.enqueue("vote", voter, {"battleId": battle_id, "outcome": outcome}, depends_on=opened)
        battles.append(battle_id)
    drain(submitter)
    with django_capture_on_commit_callbacks(execute=True):
        reindex(ledger)
    return {"ledger": ledger, "context": world.context, "models": models, "store": store, "battles": battles,
            "node": ledger_node}


def differing(report) -> list[tuple[str, str]]:
    return [(r.model_id, c.column) for r in report.rows for c in r.cells if not c.equal]


def chain_side(w, **kw):
    return rebuild_from_chain(w["ledger"], CidReader(w["store"]), **kw)


@pytest.mark.django_db
def test_the_arena_rebuilt_from_the_events_matches_the_served_board_and_a_tampered_vote_is_named(
        arena_world, django_db_blocker, client):
    w = arena_world
    ctx, alpha = w["context"], w["models"]["alpha"]
    assert ArenaBattle.objects.filter(counted=True).count() == VOTES and not ArenaBoard.objects.filter(
        generation__gt=0, computed_generation=0).exists(), "indexed, and refitted after the commit"
    with django_db_blocker.block():  # the chain side reads the node and IPFS only
        chain = chain_side(w)
    assert chain.style_checked and chain.answers_unreadable == 0 and chain.counted_votes == VOTES
    assert len(chain.answers) == 2 * VOTES, "the voided battle's and the unvoted battle's answers are not read"
    reports = {r.context_id: r for r in verify_boards(chain, SiteBoards())}
    assert all(r.ok for r in reports.values()), [(r.title, differing(r)) for r in reports.values()]

    mine = reports[ctx]
    cells = {(r.model_id, c.column): c for r in mine.rows for c in r.cells}
    assert {key for _, key in cells} >= set(ARENA_KEYS)
    assert cells[(alpha, "battles")].chain == ALPHA_BATTLES and cells[(alpha, "arena_rank")].chain == 1
    assert cells[(alpha, "style_elo")].chain is not None and cells[(alpha, "arena_elo")].chain > 1000
    # The chain side's numbers are lib.arena's on the votes as the events give them.
    votes = chain.votes[ctx]
    words = {1: "a", 2: "b", 3: "tie", 4: "bad"}
    seed = arena.seed_for(ctx, len(votes), max(v.vote_block for v in votes))
    expected = lib_arena.board(lib_arena.Votes.from_columns([v.model_a for v in votes], [v.model_b for v in votes],
                                                            [words[v.outcome] for v in votes]), bootstrap=30, seed=seed)
    for s in expected.standings:
        assert cells[(s.model, "arena_elo")].served == pytest.approx(s.elo, abs=1e-9)
        assert cells[(s.model, "arena_ci_low")].served == pytest.approx(s.ci_low, abs=1e-9)
        assert (cells[(s.model, "battles")].served, cells[(s.model, "arena_rank")].served) == (s.battles, s.rank)
    assert any(n.startswith(f"Arena: {VOTES} counted votes rebuilt from the chain's records of each battle and its vote")
               for n in mine.notes)
    assert reports[GLOBAL_CONTEXT_ID].ok and {c.column: c for r in reports[GLOBAL_CONTEXT_ID].rows if r.model_id ==
                                              alpha for c in r.cells}["battles"].served == ALPHA_BATTLES

    # The served JSON carries the same floats: read as another site's board, it matches too.
    data = client.get(f"/api/boards/{ctx}").json()
    remote = [RemoteSite._row(r) for r in data["ranked"] + data["provisional"]]
    assert {(r.model_id, r.arena_elo, r.battles) for r in remote} == {(k[0], c.served, cells[(k[0], "battles")].served)
                                                                     for k, c in cells.items() if k[1] == "arena_elo"}

    # Tamper: one of alpha's wins becomes its opponent's in the database, and the board is refitted from it.
    won = ArenaBattle.objects.filter(context_id=ctx, model_a=alpha, outcome=1, counted=True).first()
    loser = won.model_b
    ArenaBattle.objects.filter(pk=won.pk).update(outcome=2)
    arena_entries.refresh_board(ctx, reload=True)  # from the database, as `leaderboard rebuild` does
    report, = verify_boards(chain, SiteBoards(), [ctx])
    bad = differing(report)
    assert not report.ok and (alpha, "arena_elo") in bad and (loser, "arena_elo") in bad
    # The weighted score, served from the refitted Elo, moves with it: those cells differ too.
    assert (alpha, "arena_win_rate") in bad and not [c for m, c in bad if c not in ARENA_KEYS + WEIGHTED_KEYS], bad
    assert report.verdict.startswith("The served board does not match the chain")

    out = StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("leaderboard", "verify", "--context", ctx, "--json", stdout=out)
    assert exit_.value.code == 1
    board = json.loads(out.getvalue())["boards"][0]
    named = {(r["model_id"], c["column"]) for r in board["rows"] for c in r["cells"] if not c["equal"]}
    assert (alpha, "arena_elo") in named and (loser, "arena_win_rate") in named
    out = StringIO()
    with pytest.raises(SystemExit):
        call_command("leaderboard", "verify", "--context", ctx, stdout=out)
    table = out.getvalue()
    assert "MISMATCH: " in table and "*" + f"{alpha[:10]}" not in table  # the row is named by its short id
    assert any(line.startswith(alpha[:10]) and "*" in line for line in table.splitlines()), table

    # Refitting from the untampered vote repairs it.
    ArenaBattle.objects.filter(pk=won.pk).update(outcome=1)
    arena_entries.refresh_board(ctx, reload=True)  # from the database, as `leaderboard rebuild` does
    assert verify_boards(chain, SiteBoards(), [ctx])[0].ok


@pytest.mark.django_db
def test_the_command_says_what_it_checked_and_skip_style_leaves_the_style_columns_out(arena_world):
    w = arena_world
    ctx, alpha = w["context"], w["models"]["alpha"]
    out = StringIO()
    call_command("leaderboard", "verify", "--context", ctx, stdout=out)
    text = out.getvalue()
    assert "OK: 1 boards match the chain" in text, text
    # The chain (this module's node) may hold the battles of the tests before: the totals are the chain's.
    assert re.search(r"arena: \d+ counted votes from BattleOpened/Voted; style-controlled columns checked from "
                     r"\d+ answers read from IPFS\n", text), text
    assert f"Arena: {VOTES} counted votes rebuilt from the chain's records of each battle and its vote" in text
    assert "Arena Elo" in text and "Style Elo" in text

    ArenaEntry.objects.filter(context_id=ctx, model_id=alpha).update(style_elo=1.0)  # a style cell only
    out = StringIO()
    call_command("leaderboard", "verify", "--context", ctx, "--skip-style", stdout=out)
    text = out.getvalue()
    assert "OK: " in text and "style-controlled columns NOT checked (--skip-style)" in text and "Style Elo" not in text
    with pytest.raises(SystemExit):
        call_command("leaderboard", "verify", "--context", ctx, stdout=StringIO())


@pytest.mark.django_db
def test_answers_the_verifier_cannot_read_are_said_and_left_out_of_its_style_fit(arena_world, tmp_path):
    w = arena_world
    names_only = LocalBlobStore(tmp_path)  # an IPFS with the models' metadata and none of the evidence
    for blob in w["store"].root.glob("*/*"):
        if records.parse(blob.read_bytes())["schema"] == records.MODEL_SCHEMA:
            names_only.put(blob.read_bytes())
    chain = rebuild_from_chain(w["ledger"], CidReader(names_only))
    assert chain.answers_unreadable >= 2 * VOTES and not chain.answers  # the earlier tests' battles too
    report, = verify_boards(chain, SiteBoards(), [w["context"]])
    assert {c for _, c in differing(report)} <= {key for key, _ in STYLE_COLUMNS} and differing(report)
    assert any("could not be read from IPFS here" in n for n in report.notes)
    plain_only = replace(chain, style_checked=False)
    assert verify_boards(plain_only, SiteBoards(), [w["context"]])[0].ok


@pytest.mark.django_db
def test_the_page_compares_the_arena_columns(arena_world, client):
    w = arena_world
    html = checked(client, context=w["context"]).content.decode()
    assert "The served board matches the chain: 3 models" in html, html[:3000]
    assert 'data-column="arena_elo"' in html and 'data-column="style_elo"' in html
    assert f"Arena: {VOTES} counted votes rebuilt from the chain&#x27;s records of each battle and its vote" in html
    ArenaEntry.objects.filter(context_id=w["context"], model_id=w["models"]["gamma"]).update(battles=99)
    html = checked(client, context=w["context"]).content.decode()  # a changed board is checked anew
    assert html.count('class="mismatch"') == 1 and 'data-column="battles" class="mismatch"' in html
