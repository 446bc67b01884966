"""The demo `make run` fills a fresh site with (ops/demo.py): accounts per role whose passwords are
shown once, steps that add nothing the second time, and data folders that may be missing."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import authenticate, get_user_model

from apps.annotate.models import MetaEvalRun
from apps.chain.demo import DEMO_CONTEXTS
from apps.chain.models import OutboxItem
from apps.oracle.models import EvaluationJob
from ops import demo
from ops.management.commands.up import sign_in_text
from tests.chat.factories import make_contexts, write_mtbench

pytestmark = pytest.mark.django_db

TOPICAL_CHAT = Path(django_settings.LLMCHAIN_DATA_DIR) / "topical_chat_usr.json"


def test_the_demo_accounts_get_their_roles_and_random_passwords_stored_hashed():
    accounts = {a.role: a for a in demo.ensure_accounts()}
    assert sorted(accounts) == ["admin", "developer", "expert", "user"]
    users = get_user_model().objects
    for role, account in accounts.items():
        assert account.username.startswith("demo-") and len(account.password) >= 16
        stored = users.get(username=account.username)
        assert stored.password != account.password and stored.check_password(account.password)
        assert stored.last_name == f"{role} (demo data)"
        assert authenticate(username=account.username, password=account.password) == stored
    assert len({a.password for a in accounts.values()}) == 4
    assert users.get(username="demo-developer").profile.is_developer
    assert users.get(username="demo-expert").profile.is_expert
    assert OutboxItem.objects.filter(function="grantRole", key__startswith="grantRole:expert:").count() == 1
    admin = users.get(username="demo-admin")
    assert admin.is_staff and admin.is_superuser
    assert not users.get(username="demo-user").is_staff


def test_a_second_start_creates_no_account_and_shows_no_password():
    first = demo.ensure_accounts()
    calls = OutboxItem.objects.count()
    again = demo.ensure_accounts()
    assert [a.username for a in again] == [a.username for a in first]
    assert all(a.password is None for a in again)
    assert OutboxItem.objects.count() == calls and get_user_model().objects.count() == 4
    text = sign_in_text("http://127.0.0.1:8000", False, again)
    assert "from an earlier start: demo-user, demo-developer, demo-expert, demo-admin" in text
    assert not any(a.password and a.password in text for a in first)


def test_the_start_up_text_ends_with_what_to_open_and_each_new_accounts_password():
    accounts = demo.ensure_accounts()
    text = sign_in_text("http://127.0.0.1:8000", False, accounts)
    assert "open http://127.0.0.1:8000/" in text and "http://127.0.0.1:8000/login/" in text
    for a in accounts:
        assert re.search(rf"^  {a.role} +{a.username} +{re.escape(a.password)} +then http://127\.0\.0\.1:8000"
                         rf"{demo.ROLE_PAGES[a.role]}$", text, re.M)
    no_demo = sign_in_text("http://127.0.0.1:8000", True, [])
    assert "Sign up at http://127.0.0.1:8000/signup/" in no_demo and "demo-" not in no_demo


def test_missing_data_folders_are_said_and_skipped(settings, tmp_path):
    settings.LLMCHAIN_DATA_DIR = tmp_path / "nothing"
    settings.LLMCHAIN_MTBENCH_DIR = tmp_path / "nothing" / "mt_bench"
    said = []
    assert demo.fill(said.append) == 0
    assert said == [f"demo: no ScaleEval data at {tmp_path / 'nothing' / 'scaleeval'}: the expert queue starts empty",
                    f"demo: no MT-Bench data at {tmp_path / 'nothing' / 'mt_bench'}: no replay models, the boards "
                    "start empty",
                    f"demo: no Topical-Chat USR data at {tmp_path / 'nothing' / 'topical_chat_usr.json'}: no example "
                    "meta-evaluation run"]


def test_the_replay_subset_is_queued_once(settings, tmp_path, monkeypatch):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    make_contexts(*DEMO_CONTEXTS)  # the demo waits for the starting contexts on-chain
    questions = {q: ("writing" if q < 5 else "math", [f"Q{q}?", f"Q{q} again?"]) for q in range(1, 9)}
    settings.LLMCHAIN_MTBENCH_DIR = write_mtbench(
        tmp_path / "mt_bench", questions,
        {name: {q: [f"{name} {q}", "again"] for q in questions} for name in ("ant", "bee", "cat")})
    monkeypatch.setattr(demo, "DEMO_REPLAY_MODELS", ("ant", "bee"))
    monkeypatch.setattr(demo, "DEMO_QUESTIONS_PER_CATEGORY", 3)
    said = []
    demo.replay_subset(said.append)
    assert said == ["demo: MT-Bench replay of 2 models x 3 questions per category: 12 answers in the pipeline "
                    "(12 new); the boards show its progress"]
    assert EvaluationJob.objects.filter(reference_pool="replay").count() == 12
    demo.replay_subset(said.append)
    assert said[-1].endswith("12 answers in the pipeline (0 new); the boards show its progress")
    demo.import_other_replay_models(said.append)
    assert said[-1].startswith("demo: 1 more MT-Bench replay models imported")
    assert EvaluationJob.objects.count() == 12  # the others wait for `replay mtbench`


@pytest.mark.skipif(not TOPICAL_CHAT.exists(), reason=f"{TOPICAL_CHAT} is missing (../shared/data)")
def test_the_example_meta_evaluation_run_is_saved_once_on_the_global_board(settings, tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(TOPICAL_CHAT, data / "topical_chat_usr.json")
    settings.LLMCHAIN_DATA_DIR = data
    monkeypatch.setattr(demo, "METAEVAL_EVALUATOR", "length")  # the same path, without loading the encoder
    said = []
    demo.example_metaeval(said.append)
    run = MetaEvalRun.objects.get()
    assert run.label == demo.METAEVAL_LABEL and run.context_id == "0x" + "00" * 32
    assert said == [f"demo: meta-evaluation run #{run.pk} saved: length prefers the answer people preferred in "
                    f"{run.result['accuracy_non_tie']:.0%} of {run.result['non_tie']} Topical-Chat pairs "
                    f"(/metaeval/{run.pk}/)"]
    assert json.loads(json.dumps(run.result))["n"] == 900
    demo.example_metaeval(said.append)
    assert MetaEvalRun.objects.count() == 1 and len(said) == 1


def test_the_demo_invents_no_human_signal_and_its_boards_say_so(settings, tmp_path, monkeypatch, client):
    """Every step of the demo, on small data: it queues answers for the automatic score and nothing a person
    would give (no rating, no battle, no vote); the boards then say there is not enough human signal yet,
    give no weighted score, and the example meta-evaluation is said to be on a labelled set, not on this
    site's people."""
    from apps.annotate.models import ExpertVerdict
    from apps.chain.models import ArenaBattle, LedgerInteraction
    from apps.chat.models import Battle, Rating
    from apps.leaderboard import entries
    from apps.leaderboard.models import BoardEntry
    from lib.reputation import GLOBAL_CONTEXT_ID

    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    data = tmp_path / "data"
    data.mkdir()
    if TOPICAL_CHAT.exists():
        shutil.copy(TOPICAL_CHAT, data / "topical_chat_usr.json")
    scaleeval = Path(django_settings.LLMCHAIN_DATA_DIR) / "scaleeval"
    if scaleeval.is_dir():  # the recorded debates: experts' queue items, no verdict of anyone here
        (data / "scaleeval").symlink_to(scaleeval)
    settings.LLMCHAIN_DATA_DIR = data
    monkeypatch.setattr(demo, "METAEVAL_EVALUATOR", "length")  # the same path, without loading the encoder
    contexts = make_contexts(*DEMO_CONTEXTS)
    questions = {q: ("writing" if q < 5 else "math", [f"Q{q}?", f"Q{q} again?"]) for q in range(1, 9)}
    settings.LLMCHAIN_MTBENCH_DIR = write_mtbench(
        tmp_path / "mt_bench", questions,
        {name: {q: [f"{name} {q}", "again"] for q in questions} for name in ("ant", "bee")})
    monkeypatch.setattr(demo, "DEMO_REPLAY_MODELS", ("ant", "bee"))
    demo.ensure_accounts()
    assert demo.fill(lambda _: None) == 0
    assert EvaluationJob.objects.count() == 12  # the automatic score's work: the demo's only signal
    people = {"humEval", "openBattle", "vote"}
    assert not OutboxItem.objects.filter(function__in=people).exists(), "the demo queued a person's call"
    assert not (Rating.objects.exists() or Battle.objects.exists() or ArenaBattle.objects.exists())
    assert not LedgerInteraction.objects.filter(sh__isnull=False).exists()
    assert not ExpertVerdict.objects.exists(), "an imported debate came with a verdict presented as an expert's here"

    # What the replay's answers become on the boards once scored: automatic scores, nobody's rating.
    writing = next(c.context_id for c in contexts if c.name == "writing")
    for k, ctx in enumerate((writing, GLOBAL_CONTEXT_ID) * 2):
        BoardEntry.objects.create(model_id="0x" + f"{k // 2 + 1:02x}" * 32, context_id=ctx, name=f"replay-{k // 2}",
                                  ra=(5 + k) * 10**17, rh=5 * 10**17, r=5 * 10**17, n_auto=6, n_human=0,
                                  block_number=3)
    entries.bump()
    for ctx in (writing, GLOBAL_CONTEXT_ID):
        board = client.get(f"/api/boards/{ctx}?sort=weighted").json()
        ra = board["validity"]["columns"]["ra"]
        assert (ra["status"], ra["votes"], ra["pairs_non_tie"], ra["accuracy_non_tie"], ra["weight"]) == (
            "not_enough_human_signal", 0, 0, None, 0.0)
        assert board["validity"]["text"].startswith("Not enough human signal yet to check the automatic score")
        assert "No model has ratings or votes from people here yet" in board["validity"]["weighted_text"]
        rows = board["ranked"] + board["provisional"]
        assert len(rows) == 2 and all(r["weighted"] is None and r["n_human"] == 0 for r in rows)
        line = client.get(f"/boards/{ctx}/validity").content.decode()
        assert "Not enough human signal yet" in line and "%" not in line  # no figure at all
    page = client.get("/").content.decode()
    if MetaEvalRun.objects.exists():  # Topical-Chat is there: the run is attached to the global board
        assert "Measured against people's judgements in labelled data sets, not this site's people:" in page
        assert "Topical-Chat dialogue (demo data)" in page
