"""`manage.py replay mtbench`: every MT-Bench question asked of every imported replay model,
through the real pipeline (oracle, evidence, chain), so that the boards fill with real data.

Resumable: interaction ids are derived from (model, question, turn), so a second run only adds
what is missing, and the oracle's jobs are durable rows. Interactions are created question by
question across the models (not model by model): the oracle takes jobs in that order, so every
model gathers evaluations from the start and the boards rank them early.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from django.db.models import Count
from eth_utils import keccak

from apps.chain.models import Context
from apps.chat.accounts import service_account
from apps.chat.conversations import finish_interaction
from apps.chat.health import models_for
from apps.chat.models import Conversation, Interaction, RegisteredModel
from apps.chat.providers import find_replay
from apps.chat.replay import read_questions
from lib.ids import hex32

from .models import EvaluationJob

REPLAYER = "mt-bench-replayer"


def interaction_id(model: RegisteredModel, question_id: int, turn: int) -> str:
    return hex32(keccak(text=f"llmchain:replay:{model.model_id}:{question_id}:{turn}"))


def select_questions(questions: dict[int, dict], per_category: int | None = None) -> list[tuple[int, dict]]:
    """The questions in id order; with `per_category`, only the first that many of each category."""
    chosen, seen = [], Counter()
    for qid, q in sorted(questions.items()):
        seen[q["category"]] += 1
        if per_category is None or seen[q["category"]] <= per_category:
            chosen.append((qid, q))
    return chosen


def queue_mtbench(root: Path, *, models: list[str] | None = None, turns: int = 2,
                  per_category: int | None = None) -> tuple[list[int], int]:
    """Create the missing interactions (with their jobs); returns (all their ids, how many were new).

    A model is asked only what it has a recorded answer to: a question it did not answer (or a
    follow-up of one) is left out, never evaluated as a refusal.
    """
    questions = select_questions(read_questions(Path(root)), per_category)
    user = service_account(REPLAYER)
    contexts = {c.name: c for c in Context.objects.all()}
    replay_models = RegisteredModel.objects.filter(kind=RegisteredModel.Kind.REPLAY).order_by("name")
    if models:
        replay_models = replay_models.filter(name__in=models)
    replay_models = list(replay_models)
    meant_for: dict[int, set[int]] = {}  # context pk -> the replay models meant for it (read once per context)
    ids, new = [], 0
    for qid, q in questions:
        context = contexts.get(q["category"])
        if context is None:
            continue
        if context.pk not in meant_for:
            meant_for[context.pk] = set(models_for(context).filter(pk__in=[m.pk for m in replay_models])
                                        .values_list("pk", flat=True))
        meant = meant_for[context.pk]
        for model in replay_models:
            if model.pk not in meant:
                continue
            conv = None
            messages = []
            for turn, prompt in enumerate(q["turns"][:turns], start=1):
                messages.append({"role": "user", "content": prompt})
                answer = find_replay(model.pk, messages)
                if answer is None:
                    break
                if conv is None:
                    conv, _ = Conversation.objects.get_or_create(
                        user=user, model=model, context=context, title=f"MT-Bench {qid} · {model.name}")
                iid = interaction_id(model, qid, turn)
                interaction = Interaction.objects.filter(interaction_id=iid).first()
                if interaction is None:
                    interaction = Interaction.objects.create(conversation=conv, interaction_id=iid, prompt=prompt)
                    finish_interaction(interaction, answer, reference_pool=EvaluationJob.Pool.REPLAY)
                    new += 1
                ids.append(interaction.pk)
                messages.append({"role": "assistant", "content": answer})
    return ids, new


def _by_status(jobs) -> dict[str, int]:
    counts = {s: 0 for s in EvaluationJob.Status.values}
    counts.update(jobs.order_by().values_list("status").annotate(n=Count("id")))
    return counts


def progress(interaction_ids: list[int]) -> dict[str, int]:
    return _by_status(EvaluationJob.objects.filter(interaction_id__in=interaction_ids))


def replay_progress() -> dict[str, int]:
    """Every replayed answer's evaluation, whoever queued it: `total`, `onchain`, `failed` and `done`
    (on-chain or failed); all zero when nothing was replayed."""
    counts = _by_status(EvaluationJob.objects.filter(reference_pool=EvaluationJob.Pool.REPLAY))
    onchain, failed = counts[EvaluationJob.Status.ONCHAIN], counts[EvaluationJob.Status.FAILED]
    return {"total": sum(counts.values()), "onchain": onchain, "failed": failed, "done": onchain + failed}
