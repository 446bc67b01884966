"""MT-Bench replay models: real recorded answers of real LLMs, served for the 80 questions."""

from __future__ import annotations

import json
import time
from pathlib import Path

from django.db import transaction

from apps.chain.demo import DEMO_CONTEXTS, context_id, queue_context
from apps.chain.models import Context

from .accounts import service_account
from .models import Interaction, RegisteredModel, ReplayAnswer
from .providers import prompt_key
from .registry import ModelFields, register_model

REPLAY_OWNER = "mt-bench-replay"


class ImportError_(ValueError):
    pass


def mtbench_root(path: Path) -> Path:
    """The MT-Bench folder (question.jsonl, model_answer/), given it, the folder that holds it
    (mt_bench/), or its model_answer/ folder: whichever a user is likely to give."""
    path = Path(path)
    for root in (path, path / "mt_bench", path.parent):
        if (root / "question.jsonl").is_file():
            return root
    raise ImportError_(f"no question.jsonl in {path}: PATH must be the MT-Bench folder (question.jsonl and "
                       "model_answer/) or the folder that holds it as mt_bench/")


def read_questions(path: Path) -> dict[int, dict]:
    """The questions of the MT-Bench folder at `path` (or under it, see mtbench_root)."""
    questions = {}
    for line in (mtbench_root(path) / "question.jsonl").read_text().splitlines():
        if line.strip():
            q = json.loads(line)
            questions[int(q["question_id"])] = q
    return questions


def ensure_contexts(names=DEMO_CONTEXTS, wait_s: float = 120) -> list[Context]:
    """Queue the MT-Bench categories as contexts and wait until the indexer has them."""
    ids = [context_id(n) for n in names]
    for name, cid in zip(names, ids):
        if not Context.objects.filter(context_id=cid).exists():
            queue_context(name)
    deadline = time.monotonic() + wait_s
    while Context.objects.filter(context_id__in=ids).count() < len(ids):
        if time.monotonic() > deadline:
            raise ImportError_("the contexts are not on-chain yet: is the ledger worker running "
                               "(python manage.py chain work)?")
        time.sleep(0.5)
    return list(Context.objects.filter(context_id__in=ids))


def import_mtbench(root: Path, *, contexts: list[Context], models: list[str] | None = None,
                   progress=print) -> dict:
    """Register one replay model per answer file of the MT-Bench folder at (or under, see
    mtbench_root) `root`; returns counts. Running it again adds nothing."""
    root = mtbench_root(root)
    questions = read_questions(root)
    files = sorted((root / "model_answer").glob("*.jsonl"))
    if models:
        files = [f for f in files if f.stem in models]
    if not files:
        raise ImportError_(f"no answer files in {root / 'model_answer'}")
    owner = service_account(REPLAY_OWNER, role="developer")
    by_name = {c.name: c for c in contexts}
    counts = {"models": 0, "answers": 0, "skipped": 0}
    for f in files:
        name = f.stem
        existing = RegisteredModel.objects.filter(name=name).first()
        if existing is not None:
            counts["skipped"] += 1
            _add_prompts(existing, questions)
            continue
        answers = []
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            a = json.loads(line)
            q = questions.get(int(a["question_id"]))
            if q is None:
                continue
            turns = a["choices"][0]["turns"]
            for turn, (prompt, text) in enumerate(zip(q["turns"], turns), start=1):
                answers.append(ReplayAnswer(
                    question_id=str(q["question_id"]), turn=turn, prompt_key=prompt_key(prompt),
                    previous_key=prompt_key(q["turns"][turn - 2]) if turn > 1 else "", text=text,
                    prompt=prompt, category=q["category"]))
        categories = sorted({questions[int(a.question_id)]["category"] for a in answers})
        fields = ModelFields(
            name=name, provider="MT-Bench recorded answers (lm-sys/FastChat)", kind=RegisteredModel.Kind.REPLAY,
            description=(f"Replays the recorded answers of {name} to the 80 MT-Bench questions and their "
                         "follow-ups. It cannot answer anything else."),
            licence="Apache-2.0 (answers data)",
            contexts=tuple(by_name[c].context_id for c in categories if c in by_name))
        with transaction.atomic():
            model = register_model(owner, fields)
            for a in answers:
                a.model = model
            ReplayAnswer.objects.bulk_create(answers)
        counts["models"] += 1
        counts["answers"] += len(answers)
        progress(f"{name}: {len(answers)} answers")
    return counts


def _add_prompts(model: RegisteredModel, questions: dict[int, dict]) -> None:
    """Answers imported before the questions' text was kept get it (the chat lists them to pick)."""
    missing = list(ReplayAnswer.objects.filter(model=model, prompt=""))
    for a in missing:
        q = questions.get(int(a.question_id))
        if q is not None and a.turn <= len(q["turns"]):
            a.prompt, a.category = q["turns"][a.turn - 1], q["category"]
    ReplayAnswer.objects.bulk_update([a for a in missing if a.prompt], ["prompt", "category"], batch_size=500)


def replay_questions(conversation, limit: int = 12) -> list[str] | None:
    """What a replay model can be asked next in `conversation`: the follow-up of the question just
    asked when it has one, else its recorded first questions of the conversation's context. None for
    a model that is not a replay model (it takes any prompt)."""
    model = conversation.model
    if model.kind != RegisteredModel.Kind.REPLAY:
        return None
    last = conversation.interactions.filter(status=Interaction.Status.DONE).order_by("-created_at", "-id").first()
    if last is not None:
        follow = list(ReplayAnswer.objects.filter(model=model, previous_key=prompt_key(last.prompt))
                      .exclude(prompt="").values_list("prompt", flat=True)[:limit])
        if follow:
            return follow
    firsts = ReplayAnswer.objects.filter(model=model, turn=1, category=conversation.context.name).exclude(prompt="")
    return list(firsts.order_by("question_id").values_list("prompt", flat=True)[:limit])
