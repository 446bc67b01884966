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
