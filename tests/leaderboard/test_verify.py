"""`leaderboard verify` and /verify/: every board rebuilt from the chain alone (events, state, IPFS
names) matches the served one after real evaluations, and any tampered cell of the served board
is reported, exactly that one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import F

from apps.chain import outbox
from apps.chain.evidence import EvidenceCorrupt, LocalBlobStore
from apps.chain.models import Context, IndexerCursor, OutboxItem
from apps.chain.ledger import Ledger
from apps.chain.submitter import Submitter
from apps.leaderboard import entries, verify
from apps.leaderboard.boards import BoardRow
from apps.leaderboard.models import BoardEntry
from apps.leaderboard.views import verify as verify_page
from apps.leaderboard.verify import (CidReader, SiteBoards, check_state, compare, rebuild_from_chain,
                                     verify_boards)
from lib import records
from lib.reputation import GLOBAL_CONTEXT_ID
from tests.chain.conftest import drain, ledger, ledger_node, rand_id, reindex, world  # noqa: F401  (fixtures)
from tests.support import new_account

pytestmark = pytest.mark.chain
REPO = Path(__file__).resolve().parents[2]
WAD = 10**18
DAY = 86_400


def metadata(name: str, owner: str) -> bytes:
    return records.canonical(records.model_metadata(name=name, provider="test", owner=owner, endpoint_kind="replay"))


@pytest.fixture(autouse=True)
def _no_cached_chain():
    cache.clear()  # the verify page keeps the chain side in the (process-wide) cache
    yield
    cache.clear()


# --- the comparison alone ----------------------------------------------------------------------

def checked(client, **params):
    """The verify page once its check is made: until then it says it is checking (and reloads itself)."""
    deadline = time.monotonic() + 60
    while True:
        page = client.get("/verify/", params)
        if b'id="checking"' not in page.content or time.monotonic() > deadline:
            return page
        time.sleep(0.2)


def row(model: int, r: float, n: int = 6, **kw) -> BoardRow:
    fields = dict(model_id="0x" + f"{model:02x}" * 32, name=f"m{model}", r=int(r * WAD), ra=WAD // 2, rh=WAD // 2,
                  n_auto=n, n_human=0, block_number=7, band_lo=r - 0.01, band_hi=r + 0.01, band_n=3)
    return BoardRow(**{**fields, **kw})


def test_compare_reports_each_differing_cell_and_models_on_one_side_only():
    chain = [row(1, 0.9), row(2, 0.8), row(3, 0.7, n=1)]
    served = [replace(r, rank=i) for i, r in enumerate(chain[:2], start=1)] + [chain[2]]
    assert all(r.ok for r in compare(served, chain, 5))

    tampered = [replace(served[0], band_hi=served[0].band_hi + 5e-7), replace(served[1], name="m2!"), row(9, 0.1, n=1)]
    reports = {r.model_id: r for r in compare(tampered, chain, 5)}
    assert reports[chain[0].model_id].ok, "bands agree to 1e-6"
    assert [c.column for c in reports[chain[1].model_id].cells if not c.equal] == ["name"]
    only_chain, only_served = reports[chain[2].model_id], reports[row(9, 0).model_id]
    assert (only_chain.side, only_served.side) == ("chain", "served")
    assert only_chain.differing == only_served.differing == len(only_chain.cells)
    assert only_chain.cells[0].served_text == "—" and only_chain.cells[0].chain_text == "provisional"


def test_ranks_follow_the_served_minimum():
    chain = [row(1, 0.9, n=3), row(2, 0.5)]
    served = [replace(chain[1], rank=1), chain[0]]  # with a minimum of 5, m1 is provisional
    assert all(r.ok for r in compare(served, chain, 5))
    bad = compare(served, chain, 2)  # with 2 it would be ranked first
    assert [(r.model_id[-2:], [c.column for c in r.cells if not c.equal]) for r in bad] == \
        [("01", ["rank"]), ("02", ["rank"])]


def test_a_figure_is_written_finer_where_the_two_sides_would_otherwise_read_the_same():
    text = verify._figure_text
    assert (text("share", 0.8), text("share", 0.8, 0.8), text("share", 0.801, 0.8)) == ("80%", "80%", "80.10%")
    assert (text("correlation", 0.42, 0.39), text("correlation", 0.4213, 0.4201)) == ("0.42", "0.4213")
    assert (text("share", 0.8, True), text("weight", 0.123456, 0.1), text("count", 57)) == ("80%", "0.1235", "57")


# --- the chain side, with no database at all -----------------------------------------------------

def test_the_chain_side_is_rebuilt_without_any_database(fresh_chain, admin, oracle, tmp_path):
    """No db mark: pytest-django refuses every query here, so the rebuild reads only the node and IPFS."""
    d = fresh_chain
    store = LocalBlobStore(tmp_path / "ipfs")
    dev, users = new_account(), [new_account() for _ in range(3)]
    for account in (dev, *users):
        d.fund(account.address)
    d.transact(admin, "identity", "register", dev.address, 2, "")
    for u in users:
        d.transact(admin, "identity", "register", u.address, 1, "")
    ctx, alpha, beta = b"\xc7" * 32, b"\xa7" * 32, b"\xb7" * 32
    d.transact(admin, "reputation", "addContext", ctx, "poetry")
    d.transact(dev, "reputation", "addModel", alpha, store.put(metadata("alpha <i>7b</i>", dev.address)))
    d.transact(dev, "reputation", "addModel", beta, store.put(metadata("beta", dev.address)))
    d.transact(dev, "reputation", "updateModelMetadata", beta, store.put(metadata("beta v2", dev.address)))
    answers = [(5, 4, 4, 3, 4, 2), (2, 1, 2, 4, 4, 1), (4, 4, 5, 5, 5, 1)]
    for k, (user, likert) in enumerate(zip(users, answers)):
        iid = bytes([0x70 + k]) * 32
        d.transact(oracle, "reputation", "autoEval", iid, alpha, ctx, user.address, k != 1, 6 * 10**17 + k, WAD // 2,
                   "bafyevidence")
        d.set_next_timestamp(d.latest_timestamp() + DAY)  # a full weight: D is capped at a day
        d.transact(user, "reputation", "humEval", iid, *likert)
        d.transact(oracle, "reputation", "updateReputation", iid)
    d.transact(oracle, "reputation", "autoEval", b"\x7f" * 32, beta, ctx, users[0].address, True, WAD // 3,
               WAD // 2, "bafyevidence")
    node_ledger = Ledger(d.client, d.deployment)

    chain = rebuild_from_chain(node_ledger, CidReader(store))

    assert chain.ok, chain.issues  # the contract's state equals its last events, sums included
    assert chain.contexts[GLOBAL_CONTEXT_ID] == "Global" and chain.contexts["0x" + ctx.hex()] == "poetry"
    head_time = d.latest_timestamp()
    for c in (ctx, bytes(32)):
        rows = {r.model_id: r for r in chain.rows["0x" + c.hex()]}
        a, b = rows["0x" + alpha.hex()], rows["0x" + beta.hex()]
        assert (a.name, b.name) == ("alpha <i>7b</i>", "beta v2")  # beta: its latest metadata record
        assert (a.ra, a.rh, a.r, a.n_auto, a.n_human) == node_ledger.reputation(alpha, c)
        assert (b.ra, b.rh, b.r, b.n_auto, b.n_human) == node_ledger.reputation(beta, c)
        assert a.n_human == 3 and a.band_n == 3 and a.band_lo is not None and a.band_lo <= a.band_hi
        assert b.band_lo is None and b.band_n == 0
        assert a.changed_at.timestamp() <= b.changed_at.timestamp() == head_time
    # A state that disagrees with the last event is reported, and so are the context's sums.
    pair = ("0x" + alpha.hex(), "0x" + ctx.hex())
    issues = check_state(node_ledger, {**chain.last, pair: (1, 2, 3, 4, 5)}, chain.contexts, chain.head)
    assert [(i.model_id, i.context_id) for i in issues] == [pair, (None, pair[1])]
    assert "on-chain is (Ra 0." in issues[0].text and "nAuto 4, nHuman 5)" in issues[0].text


def test_the_chain_is_rebuilt_once_per_block_and_replayed_only_when_events_came(fresh_chain, admin, monkeypatch,
                                                                               tmp_path):
    d = fresh_chain
    node_ledger = Ledger(d.client, d.deployment)
    store = CidReader(LocalBlobStore(tmp_path))
    head = d.client.block_number()
    first = verify.chain_at_block(node_ledger, head, store)
    again = verify.chain_at_block(node_ledger, head, store)  # the same block: the cached rebuild
    assert (again.head, again.built_at) == (first.head, first.built_at) == (head, first.built_at)

    def no_replay(*args):
        raise AssertionError("the events were replayed although none was added")

    monkeypatch.setattr(verify, "fetch_all", no_replay)
    d.client.request("evm_mine", [])  # a new block without any event of the contracts
    same = verify.chain_at_block(node_ledger, head + 1, store)
    assert same.head == head + 1 and same.rows == first.rows and same.ok  # the state re-read there

    monkeypatch.undo()
    d.transact(admin, "reputation", "addContext", b"\xc8" * 32, "haiku")
    fresh = verify.chain_at_block(node_ledger, head + 2, store)
    assert fresh.head == head + 2 and fresh.contexts["0x" + "c8" * 32] == "haiku"
    assert "0x" + "c8" * 32 not in verify.chain_at_block(node_ledger, head + 1, store).contexts, \
        "the chain at an earlier block is the chain at that block"


def test_without_a_database_even_the_ipfs_reader_stays_off_it(tmp_path):
    store = LocalBlobStore(tmp_path)
    cid = store.put(b"hello")
    assert CidReader(store).get(cid) == b"hello"
    (store.path(cid)).write_bytes(b"hellO")
    with pytest.raises(EvidenceCorrupt, match="corrupt"):
        CidReader(store).get(cid)


# --- against the site's own boards (indexed by the real indexer) ----------------------------------

@pytest.fixture(scope="module")
def ipfs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verify-ipfs")  # one for the module: the chain outlives each test


@pytest.fixture
def boards_world(world, ledger, ledger_node, settings, ipfs_dir):  # noqa: F811
    """Two models in a fresh context: alpha with three rated evaluations (ranked, with a band), beta
    with one unrated one (provisional) and renamed once; indexed, so the board table is filled."""
    settings.LLMCHAIN_IPFS_DIR = ipfs_dir
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_RPC_URL = ledger_node.url
    settings.LLMCHAIN_DEPLOYMENT = ledger_node.deployment_file
    store = LocalBlobStore(ipfs_dir)
    alpha, beta = rand_id(), rand_id()
    dev = OutboxItem.objects.get(key=f"register:{world.developer}")
    cid = {name: store.put(metadata(name, world.developer)) for name in ("alpha-7b", "beta", "beta v2")}
    added = [outbox.enqueue("addModel", world.developer, {"modelId": m, "metadataCid": cid[n]}, depends_on=dev)
             for m, n in ((alpha, "alpha-7b"), (beta, "beta"))]
    submitter = Submitter(ledger)
    drain(submitter)
    outbox.enqueue("updateModelMetadata", world.developer, {"modelId": beta, "metadataCid": cid["beta v2"]},
                   depends_on=added[1])
    a = replace(world, model=alpha)
    for user, answers in zip(world.users, [(5, 4, 4, 3, 4, 2), (2, 1, 2, 4, 4, 1), (4, 4, 5, 5, 5, 1)]):
        a.evaluation(user, answers=answers)
    iid = rand_id()
    outbox.enqueue("autoEval", world.oracle, {
        "interactionId": iid, "modelId": beta, "contextId": world.context, "user": world.users[0],
        "hasReference": False, "sA": "0", "wA": "0", "evidenceCid": "bafyevidence"})
    drain(submitter)
    reindex(ledger)
    return {"ledger": ledger, "context": world.context, "alpha": alpha, "beta": beta, "store": store,
            "node": ledger_node, "world": a, "submitter": submitter}


def differing(report) -> list[tuple[str, str]]:
    return [(r.model_id, c.column) for r in report.rows for c in r.cells if not c.equal]


@pytest.mark.django_db
def test_the_served_boards_match_the_chain_and_each_tamper_is_reported(boards_world, django_db_blocker):
    w = boards_world
    with django_db_blocker.block():  # the rebuild cannot touch the database even inside a db test
        chain = rebuild_from_chain(w["ledger"], CidReader(w["store"]))
    reports = {r.context_id: r for r in verify_boards(chain, SiteBoards())}
    assert all(r.ok for r in reports.values()), [(r.title, r.verdict, differing(r)) for r in reports.values()]
    mine = reports[w["context"]]
    assert mine.chain_name == mine.served_name == "reasoning" and mine.models == 2
    rows = {r.model_id: r for r in mine.rows}
    cells = {c.column: c for c in rows[w["alpha"]].cells}
    assert cells["name"].chain == "alpha-7b" and cells["rank"].chain == 1 and cells["n_human"].chain == 3
    assert cells["band_lo"].chain is not None and cells["band_hi"].chain is not None
    assert {c.column: c for c in rows[w["beta"]].cells}["name"].served == "beta v2"
    # 11 reputation cells, 10 arena cells (no battle here: "none" on both sides) and 4 weighted cells a model,
    # the board's 11 validity figures (no vote here: not enough human signal, on both sides) and its 5 figures
    # of people's ratings (answers without a text on IPFS: none counted, on both sides).
    assert mine.verdict == f"The served board matches the chain: 2 models, {1 + 2 * 25 + 11 + 5} cells checked."

    # R of alpha in the context, one wei off: that cell and no other.
    BoardEntry.objects.filter(model_id=w["alpha"], context_id=w["context"]).update(r=F("r") + 1)
    report, = verify_boards(chain, SiteBoards(), [w["context"]])
    assert differing(report) == [(w["alpha"], "r")] and not report.ok
    assert report.verdict.startswith("The served board does not match the chain: 1 cell differs")

    out = StringIO()
    call_command("leaderboard", "rebuild", stdout=out)  # repairs the table from the indexed rows
    assert out.getvalue().startswith("rebuilt ") and verify_boards(chain, SiteBoards(), [w["context"]])[0].ok

    # A name on the global board.
    BoardEntry.objects.filter(model_id=w["beta"], context_id=GLOBAL_CONTEXT_ID).update(name="gamma")
    report, = verify_boards(chain, SiteBoards(), [GLOBAL_CONTEXT_ID])
    assert differing(report) == [(w["beta"], "name")]
    name = {c.column: c for r in report.rows if r.model_id == w["beta"] for c in r.cells}["name"]
    assert (name.served, name.chain) == ("gamma", "beta v2")

    # A missing entry: beta is only on the chain's board, all its cells differ.
    BoardEntry.objects.filter(model_id=w["beta"], context_id=w["context"]).delete()
    report, = verify_boards(chain, SiteBoards(), [w["context"]])
    beta = next(r for r in report.rows if r.model_id == w["beta"])
    assert beta.side == "chain" and beta.differing == 25
    assert {m for m, _ in differing(report)} == {w["beta"]}


@pytest.mark.django_db
def test_the_command_exits_0_when_all_match_1_on_a_difference_2_on_bad_input(boards_world):
    w = boards_world
    out = StringIO()
    call_command("leaderboard", "verify", stdout=out)
    text = out.getvalue()
    assert "OK: " in text and "boards match the chain" in text and "alpha-7b" in text, text
    assert "*" not in text.split("OK: ")[0].replace("* marks", "")

    BoardEntry.objects.filter(model_id=w["alpha"], context_id=w["context"]).update(n_human=F("n_human") + 1)
    out = StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("leaderboard", "verify", "--context", w["context"], stdout=out)
    assert exit_.value.code == 1
    text = out.getvalue()
    assert "MISMATCH: 1 of 67 cells differ in 1 of 1 boards" in text, text
    marked = [line for line in text.splitlines() if "*" in line and not line.startswith(("MISMATCH", " * The", " * the"))]
    assert len(marked) == 2 and all("*3" in line or "*4" in line for line in marked), marked  # served 4, chain 3
    assert " * the number of ratings of alpha-7b in reasoning differs: served 4, rebuilt 3\n" in text  # in words

    out = StringIO()
    with pytest.raises(SystemExit):
        call_command("leaderboard", "verify", "--context", w["context"], "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["ok"] is False and data["boards"][0]["cells_differing"] == 1
    cell, = [c for r in data["boards"][0]["rows"] for c in r["cells"] if not c["equal"]]
    assert cell == {"column": "n_human", "served": "4", "chain": "3", "equal": False}

    # A served name is anyone's text: it reaches the terminal without its control characters.
    BoardEntry.objects.filter(model_id=w["beta"], context_id=w["context"]).update(name="beta\x1b[2J")
    out = StringIO()
    with pytest.raises(SystemExit):
        call_command("leaderboard", "verify", "--context", w["context"], stdout=out)
    assert "*beta\\x1b[2J" in out.getvalue() and "\x1b" not in out.getvalue()

    for args, message in ((["--context", "0xnope"], "--context"),
                          (["--context", "0x" + "ee" * 32], "no context"),
                          (["--rpc", "http://127.0.0.1:9"], "cannot reach the node"),
                          (["--identity", w["node"].deployment.identity], "--identity needs --reputation"),
                          (["--served", "ftp://example.org"], r"--served must be an http\(s\) URL")):
        with pytest.raises(CommandError, match=message) as error:
            call_command("leaderboard", "verify", *args, stdout=StringIO())
        assert error.value.returncode == 2, args


@pytest.mark.django_db(transaction=True)
def test_a_visitor_verifies_a_live_site_with_only_a_node_and_the_addresses(boards_world, live_server):
    """The command in its own process, with no access to the site's database: the chain from the node
    and the addresses, the served boards from the running site's JSON API."""
    w = boards_world
    d = w["node"].deployment
    env = {**os.environ, "LLMCHAIN_IPFS_DIR": str(w["store"].root), "LLMCHAIN_IPFS_BACKEND": "local",
           "DATABASE_URL": "sqlite:////nonexistent/never-opened.sqlite3"}

    def visitor(*extra):
        return subprocess.run([sys.executable, "manage.py", "leaderboard", "verify", "--rpc", w["node"].url,
                               "--reputation", d.reputation, "--identity", d.identity, "--from-block",
                               str(d.deployBlock), "--served", live_server.url, *extra],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)

    run = visitor()
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{live_server.url} against chain" in run.stdout and "OK: " in run.stdout

    # The API serves its board from a cache keyed by the board table's version: a change made
    # behind the indexer's back is served only once the version moves, as bump() does.
    BoardEntry.objects.filter(model_id=w["alpha"], context_id=w["context"]).update(ra=F("ra") - 1)
    entries.bump()
    run = visitor("--context", w["context"], "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    report, = json.loads(run.stdout)["boards"]
    assert [(r["model_id"], c["column"]) for r in report["rows"] for c in r["cells"] if not c["equal"]] == \
        [(w["alpha"], "ra")]

    # A board the site serves for a context the chain never had: found through the site's board list.
    invented = "0x" + "fe" * 32
    Context.objects.create(context_id=invented, name="invented", block_number=1)
    BoardEntry.objects.create(model_id=w["alpha"], context_id=invented, name="alpha", ra=1, rh=1, r=1, n_auto=9,
                              n_human=0, block_number=1)
    entries.bump()
    run = visitor("--json")
    assert run.returncode == 1, run.stdout + run.stderr
    listed = {b["context_id"]: b for b in json.loads(run.stdout)["boards"]}
    assert json.loads(run.stdout)["chain"]["lambda_wad"] == 10**15  # the deployment's λ, read at the head
    assert listed[invented]["chain_name"] is None and listed[invented]["served_name"] == "invented"
    assert not listed[invented]["ok"]

    run = visitor("--rpc", "http://127.0.0.1:9")  # the later --rpc wins: a node that is not there
    assert run.returncode == 2 and "cannot reach the node" in run.stderr, run.stderr


# --- the page ------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_page_shows_the_verdict_and_highlights_tampered_cells(boards_world, client, settings, monkeypatch):
    w = boards_world
    page = checked(client, context=w["context"])
    html = page.content.decode()
    assert page.status_code == 200
    assert "The served board matches the chain: 2 models, 67 cells checked." in html, html
    assert "the decay rate it was deployed with (0.001 per minute)" in html
    assert 'class="mismatch"' not in html and "alpha-7b" in html

    entry = BoardEntry.objects.get(model_id=w["alpha"], context_id=w["context"])
    BoardEntry.objects.filter(pk=entry.pk).update(name='<script>alert("x")</script>', band_lo=entry.band_lo + 0.01)
    # A change behind the indexer's back (no new block, no new version) is checked at once.
    # The weighted score's low end, served from the tampered band, differs with it (and is named in words).
    html = checked(client, context=w["context"]).content.decode()
    assert "3 cells differ" in html
    assert html.count('class="mismatch"') == 3 and 'data-column="weighted_low" class="mismatch"' in html
    assert "The low end of the weighted score of alpha-7b in reasoning differs: served " in html
    assert "The low end of the R band of " in html  # every differing cell in words, the forged name escaped
    assert '<script>alert("x")' not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert 'data-column="name" class="mismatch"' in html and 'data-column="band_lo" class="mismatch"' in html
    # Past the view's NAMED_SHOWN, the differences are counted in words, not named.
    named = html.split('<ul class="issues named">')[1].split("</ul>")[0].count("<li>")
    monkeypatch.setattr(verify_page, "NAMED_SHOWN", 1)
    shown = checked(client, context=w["context"]).content.decode().split('<ul class="issues named">')[1]
    assert shown.split("</ul>")[0].count("<li>") == 2 and f"And {named - 1} more, highlighted below." in shown

    assert client.get("/verify/", {"context": "0xnope"}).status_code == 400
    assert client.get("/verify/", {"context": "0x" + "ee" * 32}).status_code == 404
    settings.LLMCHAIN_RPC_URL = "http://127.0.0.1:9"
    cache.clear()  # nothing checked before: the chain must be read
    down = checked(client)
    assert down.status_code == 503 and "The chain cannot be read" in down.content.decode()
    assert "127.0.0.1:9" not in down.content.decode()  # no address of the site's own services on a public page


@pytest.mark.django_db
def test_while_evaluations_keep_landing_verify_never_reports_a_mismatch_and_still_names_a_tampered_cell(
        boards_world, client):
    w = boards_world
    ledger, submitter, world = w["ledger"], w["submitter"], w["world"]
    checked_blocks = []
    for n in range(4):
        # New evaluations of alpha on the chain, not folded yet: the chain is ahead of the served board.
        world.evaluation(world.users[n % len(world.users)], sa=(3 + n) * 10**17)
        drain(submitter)
        assert ledger.client.block_number() > IndexerCursor.objects.get().last_block
        html = checked(client, context=w["context"]).content.decode()
        assert "The served board matches the chain" in html, html[html.find('id="verdict"'):][:400]
        block = int(html.split('data-block="')[1].split('"')[0])
        assert block == IndexerCursor.objects.get().last_block, "checked at the block the served board is at"
        assert f"Checked at block {block}" in html
        checked_blocks.append(block)
        reindex(ledger)  # the indexer folds them; the next check is at a later block
    assert checked_blocks == sorted(set(checked_blocks)), checked_blocks

    world.evaluation(world.users[0])
    drain(submitter)
    BoardEntry.objects.filter(model_id=w["alpha"], context_id=w["context"]).update(n_auto=F("n_auto") + 1)
    html = checked(client, context=w["context"]).content.decode()
    assert "1 cell differs" in html and html.count('class="mismatch"') == 1
    assert 'data-column="n_auto" class="mismatch"' in html
