"""`manage.py replay mtbench`: every MT-Bench question asked of every imported replay model,
through the real pipeline (oracle, evidence, chain), so that the boards fill with real data.

Resumable: interaction ids are derived from (model, question, turn), so a second run only adds
what is missing, and the oracle's jobs are durable rows.
"""

from __future__ import annotations

from pathlib import Path

from eth_utils import keccak

from apps.chain.models import Context
from apps.chat.accounts import service_account
from apps.chat.conversations import finish_interaction
from apps.chat.health import models_for
from apps.chat.models import Conversation, Interaction, RegisteredModel
from apps.chat.providers import REPLAY_REFUSAL, find_replay
from apps.chat.replay import read_questions
from lib.ids import hex32

from .models import EvaluationJob

REPLAYER = "mt-bench-replayer"


def interaction_id(model: RegisteredModel, question_id: int, turn: int) -> str:
    return hex32(keccak(text=f"llmchain:replay:{model.model_id}:{question_id}:{turn}"))


def queue_mtbench(root: Path, *, models: list[str] | None = None, turns: int = 2) -> tuple[list[int], int]:
    """Create the missing interactions (with their jobs); returns (all their ids, how many were new)."""
    questions = read_questions(Path(root))
    user = service_account(REPLAYER)
    contexts = {c.name: c for c in Context.objects.all()}
    replay_models = RegisteredModel.objects.filter(kind=RegisteredModel.Kind.REPLAY).order_by("name")
    if models:
        replay_models = replay_models.filter(name__in=models)
    ids, new = [], 0
    for model in replay_models:
        for qid, q in sorted(questions.items()):
            context = contexts.get(q["category"])
            if context is None or not models_for(context).filter(pk=model.pk).exists():
                continue
            conv, _ = Conversation.objects.get_or_create(
                user=user, model=model, context=context, title=f"MT-Bench {qid} · {model.name}")
            messages = []
            for turn, prompt in enumerate(q["turns"][:turns], start=1):
                messages.append({"role": "user", "content": prompt})
                answer = find_replay(model.pk, messages) or REPLAY_REFUSAL
                iid = interaction_id(model, qid, turn)
                interaction = Interaction.objects.filter(interaction_id=iid).first()
                if interaction is None:
                    interaction = Interaction.objects.create(conversation=conv, interaction_id=iid, prompt=prompt)
                    finish_interaction(interaction, answer, reference_pool=EvaluationJob.Pool.REPLAY)
                    new += 1
                ids.append(interaction.pk)
                messages.append({"role": "assistant", "content": answer})
    return ids, new


def progress(interaction_ids: list[int]) -> dict[str, int]:
    counts = {s: 0 for s in EvaluationJob.Status.values}
    for status in EvaluationJob.objects.filter(interaction_id__in=interaction_ids).values_list("status", flat=True):
        counts[status] += 1
    return counts
