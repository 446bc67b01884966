"""The demo a fresh `make run` fills the site with, so that a newcomer has something to look at.

- Accounts, one per role (user, developer, expert, admin), created by `up` itself before the site
  starts: random passwords, stored hashed like any account's and printed once, when created.
- In the background (`manage.py demo`, a child of `up`): the recorded ScaleEval debates imported
  into the expert queue; the MT-Bench replay of a representative subset (a few questions per
  category, first turns, of models across the MT-Bench range) queued through the real pipeline, so
  that the boards rank models within minutes; an example meta-evaluation run attached to the global
  board; then the remaining replay models, for the full replay (`manage.py replay mtbench`) later.

Every step is idempotent (the importers skip what is there, the replay's interaction ids derive from
model, question and turn, the run is looked up by its label), so a second start adds nothing, and a
start interrupted half-way finishes the next time. Missing data folders are said and skipped.
Nothing here runs outside `up` without `--no-demo`: tests and other commands never create demo data.
"""

from __future__ import annotations

import io
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction

from apps.annotate.models import MetaEvalRun
from apps.annotate.scaleeval import ScaleEvalError, import_scaleeval
from apps.chat.accounts import sign_up
from apps.chat.replay import ImportError_, ensure_contexts, import_mtbench, mtbench_root
from apps.chat.roles import grant_role
from apps.oracle.replay import queue_mtbench

# (user name, role): the name says it is demo data wherever an account is listed.
DEMO_ACCOUNTS = (("demo-user", "user"), ("demo-developer", "developer"), ("demo-expert", "expert"),
                 ("demo-admin", "admin"))
# Where each role's own page is, for the start-up text.
ROLE_PAGES = {"user": "/chat/", "developer": "/models/new", "expert": "/annotate/", "admin": "/admin/"}

# MT-Bench's range, from GPT-4 to LLaMA-13B (its paper's single-answer grades 8.99 ... 2.61).
DEMO_REPLAY_MODELS = ("gpt-4", "claude-v1", "gpt-3.5-turbo", "vicuna-13b-v1.3", "wizardlm-13b", "koala-13b",
                      "alpaca-13b", "llama-13b")
# 3 first-turn questions of each of the 8 categories: 24 evaluations per model on the global board
# (ranked from LLMCHAIN_BOARD_MIN_EVALUATIONS, 5), 192 in all, a few minutes on two cores.
DEMO_QUESTIONS_PER_CATEGORY = 3
DEMO_TURNS = 1

METAEVAL_EVALUATOR = "bertscore-ref"  # the oracle's own metric, against the dialogue's knowledge fact
METAEVAL_LABEL = "Topical-Chat dialogue (demo data)"


@dataclass(frozen=True)
class DemoAccount:
    username: str
    role: str
    password: str | None  # only on the start that created the account: it is stored hashed


def ensure_accounts() -> list[DemoAccount]:
    """The demo accounts, created when missing (a developer, an expert with the role granted on-chain
    too, a site admin); existing ones are left as they are and come back without a password."""
    users = get_user_model()
    accounts = []
    for username, role in DEMO_ACCOUNTS:
        if users.objects.filter(username=username).exists():
            accounts.append(DemoAccount(username, role, None))
            continue
        password = secrets.token_urlsafe(12)
        with transaction.atomic():
            user = sign_up(username, password, role="developer" if role == "developer" else "user")
            user.first_name, user.last_name = "Demo", f"{role} (demo data)"
            user.is_staff = user.is_superuser = role == "admin"
            user.save(update_fields=["first_name", "last_name", "is_staff", "is_superuser"])
            if role == "expert":
                grant_role(user.profile, "expert")
        accounts.append(DemoAccount(username, role, password))
    return accounts


def fill(say: Callable[[str], None]) -> int:
    """The background part, each step on its own: one that fails is said and the next still runs.
    Returns how many failed."""
    failed = 0
    for step in (import_debates, replay_subset, example_metaeval, import_other_replay_models):
        try:
            step(say)
        except Exception as exc:  # noqa: BLE001 - one part of the demo must not cost the others
            failed += 1
            say(f"demo: {step.__name__.replace('_', ' ')} failed ({type(exc).__name__}: {exc}); "
                "the next start tries again")
    return failed


def import_debates(say) -> None:
    root = Path(settings.LLMCHAIN_DATA_DIR) / "scaleeval"
    if not root.is_dir():
        say(f"demo: no ScaleEval data at {root}: the expert queue starts empty")
        return
    try:
        summary = import_scaleeval(root).summary()
    except ScaleEvalError as exc:
        say(f"demo: ScaleEval debates not imported: {exc}")
        return
    say(f"demo: {summary['imported'] + summary['skipped']} recorded ScaleEval debates in the expert queue's "
        f"store ({summary['imported']} new, {summary['queued']} newly queued for the experts)")


def _mtbench() -> Path | None:
    """The MT-Bench folder LLMCHAIN_MTBENCH_DIR names (as the importers read it), or None without one."""
    try:
        return mtbench_root(Path(settings.LLMCHAIN_MTBENCH_DIR))
    except ImportError_:
        return None


def replay_subset(say) -> None:
    root = _mtbench()
    if root is None:
        say(f"demo: no MT-Bench data at {settings.LLMCHAIN_MTBENCH_DIR}: no replay models, the boards start empty")
        return
    try:
        contexts = ensure_contexts(wait_s=300)
        import_mtbench(root, contexts=contexts, models=list(DEMO_REPLAY_MODELS), progress=lambda _: None)
    except ImportError_ as exc:
        say(f"demo: the MT-Bench replay models were not imported: {exc}")
        return
    ids, new = queue_mtbench(root, models=list(DEMO_REPLAY_MODELS), turns=DEMO_TURNS,
                             per_category=DEMO_QUESTIONS_PER_CATEGORY)
    say(f"demo: MT-Bench replay of {len(DEMO_REPLAY_MODELS)} models x {DEMO_QUESTIONS_PER_CATEGORY} questions per "
        f"category: {len(ids)} answers in the pipeline ({new} new); the boards show its progress")


def example_metaeval(say) -> None:
    data = Path(settings.LLMCHAIN_DATA_DIR) / "topical_chat_usr.json"
    done = MetaEvalRun.objects.filter(label=METAEVAL_LABEL).first()
    if done is not None:
        return
    if not data.exists():
        say(f"demo: no Topical-Chat USR data at {data}: no example meta-evaluation run")
        return
    pairs = Path(settings.VAR_DIR) / "demo" / "topical_chat_pairs.jsonl"
    pairs.parent.mkdir(parents=True, exist_ok=True)
    call_command("metaeval", "topical-pairs", "--data", str(data), "--out", str(pairs), stdout=io.StringIO())
    out = io.StringIO()
    call_command("metaeval", "pairs", str(pairs), "--evaluator", METAEVAL_EVALUATOR, "--label", METAEVAL_LABEL,
                 "--context", "Global", stdout=out)
    result = json.loads(out.getvalue().strip().splitlines()[-1])
    say(f"demo: meta-evaluation run #{result['run']} saved: {METAEVAL_EVALUATOR} prefers the answer people "
        f"preferred in {result['accuracy_non_tie']:.0%} of {result['non_tie']} Topical-Chat pairs "
        f"(/metaeval/{result['run']}/)")


def import_other_replay_models(say) -> None:
    root = _mtbench()
    if root is None:
        return
    counts = import_mtbench(root, contexts=ensure_contexts(wait_s=300), progress=lambda _: None)
    if counts["models"]:
        say(f"demo: {counts['models']} more MT-Bench replay models imported; `python manage.py replay mtbench` "
            f"replays every question of every model (resumable)")
