"""Peer self-evaluation (seed 002, lib.selfeval) over the site's own interactions in one context.

The prompts are the single-turn ones (the first interaction of a conversation, answered), grouped by
``prompt_key`` so that the same question asked of several models (the MT-Bench replay asks every
model every question) is one prompt. When a model answered a prompt more than once, its latest
answer counts. Prompts answered by fewer than three models are left out: no pair has a judge there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import OuterRef, Subquery

from apps.chain.models import Context
from apps.chat.models import Interaction
from apps.chat.providers import prompt_key
from lib.selfeval import DEFAULT_SEED, SelfEvalError, SelfEvaluation, self_evaluate


@dataclass(frozen=True)
class ContextSelfEvaluation:
    context: Context
    evaluation: SelfEvaluation
    model_ids: dict[str, str]  # model name -> on-chain model id

    def as_dict(self) -> dict[str, Any]:
        return {**self.evaluation.as_dict(), "context": {"id": self.context.context_id, "name": self.context.name},
                "model_ids": {m: self.model_ids[m] for m in self.evaluation.ranking}}


def context_answers(context: Context) -> tuple[dict[str, list[str | None]], dict[str, str]]:
    """(answers[model name][prompt], {model name: model id}) for the context's single-turn prompts
    answered by at least three models, prompts in the order they were first asked."""
    first_turn = Interaction.objects.filter(conversation=OuterRef("conversation")).order_by("created_at", "id")
    rows = (Interaction.objects
            .filter(conversation__context=context, status=Interaction.Status.DONE,
                    id=Subquery(first_turn.values("id")[:1]))
            .order_by("created_at", "id")
            .values_list("prompt", "answer", "conversation__model__name", "conversation__model__model_id"))
    by_prompt: dict[str, dict[str, str]] = {}
    model_ids: dict[str, str] = {}
    for prompt, answer, name, model_id in rows.iterator():
        by_prompt.setdefault(prompt_key(prompt), {})[name] = answer  # a later answer replaces an earlier one
        model_ids[name] = model_id
    prompts = [answers for answers in by_prompt.values() if len(answers) >= 3]
    models = sorted({m for answers in prompts for m in answers})
    return {m: [answers.get(m) for answers in prompts] for m in models}, {m: model_ids[m] for m in models}


def context_selfeval(context: Context, *, scorer=None, rounds: int = 1, top: int | None = None,
                     seed: int = DEFAULT_SEED, bootstrap: int = 0) -> ContextSelfEvaluation:
    """The seed's Elo ranking of the models of ``context`` from their answers to the same prompts.
    ``scorer``: a ``lib.metrics.bertscore.BERTScore`` (default: a new one; its encoder loads once per
    process). Raises ``lib.selfeval.SelfEvalError`` when fewer than three models answered a common prompt."""
    answers, model_ids = context_answers(context)
    if not answers:
        raise SelfEvalError(f"no single-turn prompt in context {context.name} was answered by three models")
    if scorer is None:
        from lib.metrics.bertscore import BERTScore  # imports torch: only callers that score pay for it

        scorer = BERTScore()
    evaluation = self_evaluate(answers, scorer, rounds=rounds, top=top, seed=seed, bootstrap=bootstrap)
    return ContextSelfEvaluation(context, evaluation, model_ids)
