"""The oracle's durable work: one automatic-evaluation job per answered interaction."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.chain.work import WorkRow


class EvaluationJob(WorkRow):
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
    weighting = models.JSONField(default=dict, blank=True)  # how wa was derived (lib/weighting.py)
    evidence_cid = models.CharField(max_length=100, blank=True)
    outbox_item = models.ForeignKey("chain.OutboxItem", null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    SCORED_STATUSES = (Status.SCORED, Status.PINNED, Status.SUBMITTED, Status.ONCHAIN)
    PINNED_STATUSES = (Status.PINNED, Status.SUBMITTED, Status.ONCHAIN)
    NO_SCORE = "no automatic score: no other model answered"

    def __str__(self) -> str:
        return f"{self.interaction_id} {self.status}"

    def answered_references(self) -> list[dict]:
        """The references that answered (a failed one has no text): they alone are scored and pinned."""
        return [r for r in self.references or () if r.get("text") is not None]

    @property
    def is_scored(self) -> bool:
        """Whether the references are in and the answer is scored (every step from there on)."""
        return self.status in self.SCORED_STATUSES

    @property
    def is_pinned(self) -> bool:
        """Whether the evidence record is stored (every step from there on)."""
        return self.status in self.PINNED_STATUSES

    @property
    def has_reference(self) -> bool | None:
        """None until scored; then whether any other model answered: only then is there an automatic score
        (REPUTATION.md: without a reference, Ra is untouched)."""
        return None if not self.is_scored else bool(self.answered_references())


class DebateJob(WorkRow):
    """A debate to hold between the judge models over a pair of answers the site holds (ScaleEval, Chern et al. 2024).

    Everything the judges are shown is fixed when the job is made, the seed included, so the
    driver replays the same prompts after a crash; every reply is saved the moment it arrives
    (`replies`, keyed by agent and prompt digest) and is never asked for twice. The finished
    debate becomes an annotate.Debate (same `key`), queued for experts when the judges disagree.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        DEBATING = "debating"  # some replies are in
        DONE = "done"  # the Debate row exists
        FAILED = "failed"

    key = models.CharField(max_length=200, unique=True)  # the Debate's key: one debate per pair and criterion
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    criterion = models.CharField(max_length=100)
    criterion_description = models.TextField(blank=True)
    scenario = models.CharField(max_length=100, blank=True)
    question = models.TextField()
    submission_1 = models.TextField()
    submission_2 = models.TextField()
    system_1 = models.CharField(max_length=100, blank=True)
    system_2 = models.CharField(max_length=100, blank=True)
    context_id = models.CharField(max_length=66, blank=True)
    model_1 = models.CharField(max_length=66, blank=True)
    model_2 = models.CharField(max_length=66, blank=True)
    origin = models.JSONField(default=dict, blank=True)
    judges = models.JSONField(default=list)  # registered judge models' pks, in speaking order
    rounds = models.PositiveSmallIntegerField(default=3)  # D
    seed = models.BigIntegerField()  # the submission orders, the discussion orders and the sampling seeds
    replies = models.JSONField(default=dict, blank=True)  # "<judge pk>:<sha256 of prompt>" -> reply text
    debate = models.OneToOneField("annotate.Debate", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="job")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.key} {self.status}"


class GEvalSteps(models.Model):
    """The evaluation steps a judge model wrote for a G-Eval criterion (auto-CoT, lib/geval.py),
    kept with the prompt that made them: written once per judge, criterion and prompt, then reused
    for every item, so all the scores of a criterion rest on the same steps."""

    judge = models.CharField(max_length=100)  # the registered model's name
    endpoint_model = models.CharField(max_length=200, blank=True)  # its name at the endpoint then
    criterion = models.CharField(max_length=100)
    prompt = models.TextField()
    prompt_sha256 = models.CharField(max_length=64)
    steps = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["judge", "criterion", "prompt_sha256"],
                                               name="geval_steps_once_per_judge_criterion_prompt")]

    def __str__(self) -> str:
        return f"{self.judge} {self.criterion} {self.prompt_sha256[:12]}"


class PeerRating(models.Model):
    """A model's rating in one context's latest peer self-evaluation (Hai Ye's method, apps.oracle.selfeval):
    the Elo of the run's last round and its record of comparisons. Computed by the site from the
    models' answers to the same prompts, never on-chain; each run replaces all of its context's rows."""

    context_id = models.CharField(max_length=66)
    model_id = models.CharField(max_length=66)
    model_name = models.CharField(max_length=200)  # the registered name the run knew it by
    elo = models.FloatField()
    wins = models.PositiveIntegerField()
    ties = models.PositiveIntegerField()
    losses = models.PositiveIntegerField()
    prompts = models.PositiveIntegerField()  # prompts of the run (answered by at least three models)
    rounds = models.PositiveSmallIntegerField()
    seed = models.BigIntegerField()
    params = models.JSONField(default=dict)  # the run's Elo and metric parameters
    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["context_id", "model_id"],
                                               name="peer_rating_once_per_context_model")]

    def __str__(self) -> str:
        return f"{self.model_name} {self.elo:.1f} in {self.context_id[:10]}"
