"""Peer self-evaluation (Hai Ye's method, lib.selfeval) over the site's own interactions in one context.

The prompts are the single-turn ones (the first interaction of a conversation, answered), grouped by
``prompt_key`` so that the same question asked of several models (the MT-Bench replay asks every
model every question) is one prompt. When a model answered a prompt more than once, its latest
answer counts. Prompts answered by fewer than three models are left out: no pair has a judge there.

``refresh_peer_ratings`` stores a run as the context's ``PeerRating`` rows, which the boards show as
"Peer Elo" (never computed at render time: BERTScore encodes every answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.chain.models import Context
from apps.chat.conversations import answered_first_turns
from apps.chat.providers import prompt_key
from apps.chain.signals import boards_changed
from lib.reputation import GLOBAL_CONTEXT_ID
from lib.selfeval import DEFAULT_SEED, SelfEvalError, SelfEvaluation, self_evaluate

from .models import PeerRating


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
    rows = answered_first_turns(context).values_list("prompt", "answer", "conversation__model__name",
                                                     "conversation__model__model_id")
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
    scorer = scorer if scorer is not None else default_scorer()
    evaluation = self_evaluate(answers, scorer, rounds=rounds, top=top, seed=seed, bootstrap=bootstrap)
    return ContextSelfEvaluation(context, evaluation, model_ids)


def default_scorer():
    from lib.metrics.bertscore import BERTScore  # imports torch: only callers that score pay for it

    return BERTScore()


def metric_params(scorer) -> dict[str, Any]:
    """What identifies the scorer of a run (the encoder, not the calibration: the run uses raw recall)."""
    return {"metric": getattr(scorer, "name", type(scorer).__name__),
            **{key: str(getattr(scorer, key)) for key in ("encoder_name", "num_layers") if hasattr(scorer, key)}}


def save_peer_ratings(result: ContextSelfEvaluation, *, metric: dict[str, Any] | None = None) -> int:
    """Replace the context's ``PeerRating`` rows by this run's last round (after two rounds, the models
    the second left out get no row: first-round Elo is on another scale), in one transaction; once it
    commits, the context's board gets a new version (the global board shows no peer rating: each run's
    Elo is relative to the models it compared, so runs of different contexts are not on one scale).
    Returns the number of rows saved."""
    evaluation, context = result.evaluation, result.context
    final = evaluation.final
    params = {**evaluation.params, "rounds": len(evaluation.rounds), **(metric or {})}
    now = timezone.now()
    rows = [PeerRating(context_id=context.context_id, model_id=result.model_ids[m], model_name=m,
                       elo=final.ratings[m], wins=final.records[m].wins, ties=final.records[m].ties,
                       losses=final.records[m].losses, prompts=evaluation.prompts, rounds=len(evaluation.rounds),
                       seed=evaluation.params.get("seed", DEFAULT_SEED), params=params, computed_at=now)
            for m in final.ranking]
    with transaction.atomic():
        Context.objects.select_for_update().filter(pk=context.pk).first()  # one run of a context at a time
        PeerRating.objects.filter(context_id=context.context_id).delete()
        PeerRating.objects.bulk_create(rows)
        boards_changed.send(sender=PeerRating, contexts={context.context_id})
    return len(rows)


def refresh_peer_ratings(context: Context, *, scorer=None, rounds: int = 1, top: int | None = None,
                         seed: int = DEFAULT_SEED, bootstrap: int = 0) -> int:
    """Run ``context_selfeval`` and store it (``save_peer_ratings``); the number of models rated.
    Raises ``SelfEvalError``, having changed nothing, when the context has too few answers."""
    scorer = scorer if scorer is not None else default_scorer()
    result = context_selfeval(context, scorer=scorer, rounds=rounds, top=top, seed=seed, bootstrap=bootstrap)
    return save_peer_ratings(result, metric=metric_params(scorer))


def peer_ratings(context_id: str) -> dict[str, PeerRating]:
    """model id -> its rating in the context's latest peer self-evaluation (none for the global context)."""
    if context_id == GLOBAL_CONTEXT_ID:
        return {}
    return {r.model_id: r for r in PeerRating.objects.filter(context_id=context_id)}
