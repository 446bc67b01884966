"""The oracle's durable work: one automatic-evaluation job per answered interaction."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class EvaluationJob(models.Model):
    """Saved with its interaction, in the same transaction; workers claim it and record each step.

    The steps are resumable: references already collected are not asked again, and the
    autoEval call is queued under the interaction's idempotency key.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        ASKING = "asking"  # collecting reference answers
        SCORED = "scored"  # Sa and wa computed
        PINNED = "pinned"  # evidence stored, CID known
        SUBMITTED = "submitted"  # autoEval queued in the outbox
        ONCHAIN = "onchain"  # autoEval confirmed
        FAILED = "failed"

    class Pool(models.TextChoices):
        RUNNING = "running", "every running model of the context"
        REPLAY = "replay", "replay models only (the MT-Bench replay)"

    interaction = models.OneToOneField("chat.Interaction", on_delete=models.CASCADE, related_name="evaluation")
    reference_pool = models.CharField(max_length=16, choices=Pool.choices, default=Pool.RUNNING)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    references = models.JSONField(default=list)  # [{"model": id, "name", "text"|None, "error"}]
    sa = models.CharField(max_length=24, blank=True)  # 1e18 fixed point, as on-chain
    wa = models.CharField(max_length=24, blank=True)
    evidence_cid = models.CharField(max_length=100, blank=True)
    outbox_item = models.ForeignKey("chain.OutboxItem", null=True, blank=True, on_delete=models.SET_NULL)
    attempts = models.PositiveIntegerField(default=0)
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.interaction_id} {self.status}"
