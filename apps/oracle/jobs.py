"""The automatic evaluation of one interaction (paper Sec. III-B, IV-B1), step by step.

asking  → the top-k other running models of the context (by R) answer the same messages;
          each answer is saved on the job as it arrives, so a restart never asks twice.
scored  → Sa = mean calibrated metric(answer, ref_j), wa = mean R(ref model j, c) times the metric's
          earned validity factor in its context under LLMCHAIN_AUTO_WEIGHT=validated (apps/oracle/weights.py).
pinned  → the evidence record (prompt, answer, references, metric, scores) is on IPFS.
submitted → autoEval is queued in the outbox under the interaction's idempotency key.
onchain → the outbox says autoEval is confirmed.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.chain import outbox, work
from apps.chain.evidence import default_store
from apps.chain.keys import oracle_address
from apps.chain.models import OutboxItem, Reputation
from apps.chat import arena
from apps.chat.accounts import registration_of
from apps.chat.conversations import history
from apps.chat.gateway import GatewayError
from apps.chat.health import rank_by_r, running_models
from apps.chat.models import Interaction, RegisteredModel
from apps.chat.providers import find_replay, stream_answer
from apps.chat.ratings import queue_waiting
from lib import records
from lib.reputation import WAD
from lib.weighting import INITIAL_R, weighted_wa, weighting

from . import weights
from .models import EvaluationJob
from .notify import push_evaluation

log = logging.getLogger(__name__)
S = EvaluationJob.Status
ACTIVE = (S.QUEUED, S.ASKING, S.SCORED, S.PINNED)
CHANNEL = "oracle-jobs"  # `manage.py runworker oracle-jobs` (consumers.OracleWakeConsumer)


def on_interaction_finished(sender, interaction: Interaction, reference_pool: str = EvaluationJob.Pool.RUNNING,
                            **kwargs) -> None:
    """An answer was saved (chat's `interaction_finished`, inside its transaction): its evaluation job
    is saved with it, and the worker woken once both are committed."""
    EvaluationJob.objects.get_or_create(interaction=interaction, defaults={"reference_pool": reference_pool})
    work.wake_on_commit(CHANNEL)


def reference_models(interaction: Interaction, k: int, pool: str = EvaluationJob.Pool.RUNNING,
                     messages: list[dict] | None = None) -> list[RegisteredModel]:
    """The top-k other running models of the interaction's context that can answer its prompt, ranked
    by R (unranked last). A replay model can answer only the prompts it has a recorded answer to: it
    is a candidate for those alone, so a free question never gets a replay model's refusal as a
    reference (with no candidate the interaction has no automatic score). `messages`: the
    interaction's history, when the caller has it already."""
    conv = interaction.conversation
    candidates = running_models(conv.context).exclude(pk=conv.model_id)
    if pool == EvaluationJob.Pool.REPLAY:
        candidates = candidates.filter(kind=RegisteredModel.Kind.REPLAY)
    messages = messages if messages is not None else history(interaction)
    candidates = [m for m in candidates
                  if m.kind != RegisteredModel.Kind.REPLAY or find_replay(m.pk, messages) is not None]
    return rank_by_r(candidates, conv.context)[:k]


def reputation_in(context_id: str, model_id: str) -> int:
    row = Reputation.objects.filter(context_id=context_id, model_id=model_id).values_list("r", flat=True).first()
    if row is not None:
        return int(row)
    # The mean in integers, as `chain audit` rebuilds it: the database's AVG of a bigint is a float,
    # not the same number at 18 decimals, and SQLite's SUM of them overflows its 64-bit integers past 9.2e18.
    rs = list(Reputation.objects.filter(context_id=context_id).values_list("r", flat=True))
    return sum(int(r) for r in rs) // len(rs) if rs else INITIAL_R


def claim(limit: int, lease_s: float | None = None) -> list[EvaluationJob]:
    """Take up to `limit` active jobs that nobody holds."""
    lease_s = lease_s if lease_s is not None else settings.LLMCHAIN_ORACLE_LEASE_S
    return [EvaluationJob.objects.select_related(
        "interaction__conversation__model", "interaction__conversation__context",
        "interaction__conversation__user__profile").get(pk=pk)
        for pk in work.claim(EvaluationJob, ACTIVE, limit, lease_s)]


def _save(job: EvaluationJob, **fields) -> None:
    fields["updated_at"] = timezone.now()
    EvaluationJob.objects.filter(pk=job.pk).update(**fields)
    for k, v in fields.items():
        setattr(job, k, v)
    transaction.on_commit(lambda: push_evaluation(job))


# --- asking ---------------------------------------------------------------------------------

async def _ask(model: RegisteredModel, messages: list[dict], timeout: float) -> tuple[str | None, str]:
    if model.kind == RegisteredModel.Kind.REPLAY:
        text = await sync_to_async(find_replay)(model.pk, messages)
        return (text, "") if text is not None else (None, "no recorded answer to this prompt")
    try:
        parts = []
        async with asyncio.timeout(timeout):
            async for piece in stream_answer(model, messages, max_tokens=settings.LLMCHAIN_ANSWER_MAX_TOKENS,
                                             temperature=0):
                parts.append(piece)
        return "".join(parts), ""
    except TimeoutError:
        return None, f"no answer within {timeout:g} s"
    except GatewayError as exc:
        return None, str(exc)[:500]


def collect_references(job: EvaluationJob) -> None:
    """Ask the reference models that have not answered yet; save each answer as it arrives."""
    interaction = job.interaction
    messages = history(interaction)
    refs = list(job.references or [])
    if not refs:
        refs = [{"model": m.model_id, "name": m.name, "pk": m.pk, "text": None, "error": ""}
                for m in reference_models(interaction, settings.LLMCHAIN_ORACLE_K, job.reference_pool, messages)]
        _save(job, references=refs, status=S.ASKING)
    todo = [r for r in refs if r["text"] is None and not r["error"]]
    if todo:
        models = {m.pk: m for m in RegisteredModel.objects.filter(pk__in=[r["pk"] for r in todo])}

        async def ask_all():
            return await asyncio.gather(*(_ask(models[r["pk"]], messages, settings.LLMCHAIN_ORACLE_TIMEOUT_S)
                                          for r in todo if r["pk"] in models))

        for r, (text, error) in zip([r for r in todo if r["pk"] in models], async_to_sync(ask_all)()):
            r["text"], r["error"] = text, error
        for r in todo:
            if r["pk"] not in models:
                r["error"] = "model no longer registered"
        _save(job, references=refs)


# --- scoring, evidence, submission ----------------------------------------------------------

def score_jobs(jobs: list[EvaluationJob], metric) -> None:
    """One metric call for all pairs of all jobs: each distinct text is encoded once."""
    pairs, owners = [], []
    for job in jobs:
        for i, r in enumerate(job.references):
            if r["text"] is not None:
                pairs.append((job.interaction.answer, r["text"]))
                owners.append((job, i))
    scores = metric.score_pairs(pairs) if pairs else []
    for (job, i), s in zip(owners, scores):
        job.references[i]["score"] = str(min(WAD, max(0, round(s * WAD))))
    evaluator = weights.evaluator_of(metric)
    earned = {}  # per context: its votes are read once a batch
    for job in jobs:
        answered = job.answered_references()
        ctx = job.interaction.conversation.context.context_id
        if ctx not in earned:
            earned[ctx] = weights.earned(metric, ctx)
        factor, qualification, why = earned[ctx]
        sa = sum(int(r["score"]) for r in answered) // len(answered) if answered else 0
        w = weighting(rule=settings.LLMCHAIN_AUTO_WEIGHT, evaluator=evaluator,
                      reference_r=[reputation_in(ctx, r["model"]) for r in answered], factor=factor,
                      qualification=qualification, reason=why)
        _save(job, references=job.references, sa=str(sa), wa=str(weighted_wa(w)), weighting=w, status=S.SCORED)


def pin_evidence(job: EvaluationJob, metric) -> None:
    interaction = job.interaction
    conv = interaction.conversation
    messages = history(interaction)[:-1]
    record = records.interaction_evidence(
        interaction_id=interaction.interaction_id, context_id=conv.context.context_id,
        context_name=conv.context.name, prompt=interaction.prompt, history=messages,
        model_id=conv.model.model_id, answer=interaction.answer,
        references=[{"model": r["model"], "text": r["text"], "score": r["score"]}
                    for r in job.answered_references()],
        metric={"name": metric.name, "params": dict(metric.params)}, sa=job.sa, wa=job.wa,
        weighting=job.weighting or None)
    cid = default_store().put(records.canonical(record))
    _save(job, evidence_cid=cid, status=S.PINNED)


HELD_UNTIL = timedelta(days=3650)  # a held job is due again only when released (release_held)


def submit(job: EvaluationJob) -> None:
    interaction = job.interaction
    conv = interaction.conversation
    user_address = conv.user.profile.rating_address  # a linked wallet's, whose key only the user holds
    # autoEval needs the user registered and the model added: wait for those calls if queued.
    added = outbox.item_for("addModel", {"modelId": conv.model.model_id})
    waits = [registration_of(user_address), added if added and added.status != OutboxItem.Status.CONFIRMED else None]
    depends_on = next((w for w in waits if w is not None), None)
    with transaction.atomic():
        item = outbox.enqueue("autoEval", oracle_address(interaction.interaction_id), {
            "interactionId": interaction.interaction_id, "modelId": conv.model.model_id,
            "contextId": conv.context.context_id, "user": user_address, "hasReference": job.has_reference,
            "sA": job.sa, "wA": job.wa, "evidenceCid": job.evidence_cid}, depends_on=depends_on)
        _save(job, outbox_item=item, status=S.SUBMITTED, claimed_until=None)
        queue_waiting(interaction)  # a rating given before autoEval was queued goes out now


def process(jobs: list[EvaluationJob], metric) -> None:
    """Move claimed jobs through every step they still need; safe to re-run after a crash."""
    for job in jobs:
        if job.status in (S.QUEUED, S.ASKING):
            collect_references(job)
    to_score = [j for j in jobs if j.status in (S.QUEUED, S.ASKING)]
    if to_score:
        score_jobs(to_score, metric)
    for job in jobs:
        if job.status in (S.SCORED, S.PINNED) and arena.holds(job.interaction):
            # An arena side's evidence and autoEval (both name the model) wait for the vote.
            _save(job, claimed_until=None, next_attempt_at=timezone.now() + HELD_UNTIL)
            continue
        if job.status == S.SCORED:
            pin_evidence(job, metric)
        if job.status == S.PINNED:
            submit(job)


def release_held() -> int:
    """Make due again the held arena jobs whose battle was voted on (or abandoned) since."""
    held = EvaluationJob.objects.filter(status__in=[S.SCORED, S.PINNED], interaction__conversation__arena=True,
                                        next_attempt_at__gt=timezone.now()).select_related("interaction__conversation")
    free = [job.pk for job in held if not arena.holds(job.interaction)]
    return EvaluationJob.objects.filter(pk__in=free).update(next_attempt_at=timezone.now()) if free else 0


def confirm_onchain() -> int:
    """Mark submitted jobs whose autoEval is confirmed (or failed for good) and push the news."""
    moved = 0
    for job in EvaluationJob.objects.filter(status=S.SUBMITTED).select_related(
            "outbox_item__transaction", "interaction__conversation"):
        item = job.outbox_item
        if item is None or item.status not in (OutboxItem.Status.CONFIRMED, OutboxItem.Status.FAILED):
            continue
        if item.status == OutboxItem.Status.CONFIRMED:
            _save(job, status=S.ONCHAIN)
        else:
            _save(job, status=S.FAILED, last_error=item.failure_words)
        moved += 1
    return moved
