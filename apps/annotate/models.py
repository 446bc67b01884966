"""Agent debates over pairs of answers (ScaleEval's protocol) and the expert queue for those that end in disagreement.

A Debate holds what was judged and how the agents' discussion ended; its DebateTurns are the
transcript, one row per agent per round. A debate whose agents still disagree after the last
round gets a QueueItem, which experts claim for a while (the claim expires) and answer with
ExpertVerdicts; an item may ask for several experts' verdicts before it counts as resolved.

Verdicts everywhere are in the debate's own numbering: 1 = submission 1 is better, 2 =
submission 2 is better, 0 = neither (lib/debate.py). Reasoning texts are model output, stored
as they came and always escaped when shown.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from lib.debate import FIRST, NEITHER, SECOND, reasoning_of


class Verdict(models.IntegerChoices):
    FIRST = FIRST, "Submission 1 is better"
    SECOND = SECOND, "Submission 2 is better"
    NEITHER = NEITHER, "Neither is better"


_VALID_VERDICT = Q(verdict__in=Verdict.values)


class Debate(models.Model):
    """Two submissions to one question, judged under one criterion by several agents."""

    class Source(models.TextChoices):
        SCALEEVAL = "scaleeval", "ScaleEval recorded debate"
        LIVE = "live", "Held on this site"

    source = models.CharField(max_length=16, choices=Source.choices)
    # Unique per debate and stable across runs: what makes imports and jobs idempotent
    # ("scaleeval:<pair>/<criterion>/<scenario>/<id>" for the recorded ones).
    key = models.CharField(max_length=200, unique=True)
    scenario = models.CharField(max_length=100, blank=True)
    criterion = models.CharField(max_length=100)
    criterion_description = models.TextField(blank=True)
    question = models.TextField()
    submission_1 = models.TextField()
    submission_2 = models.TextField()
    system_1 = models.CharField(max_length=100, blank=True)  # who wrote submission 1 ("" when unknown)
    system_2 = models.CharField(max_length=100, blank=True)
    # Debates held on this site over answers it holds: the context they were given in and the
    # registered models that wrote them (on-chain ids), what rates the models (outcomes.py).
    context_id = models.CharField(max_length=66, blank=True, db_index=True)
    model_1 = models.CharField(max_length=66, blank=True)
    model_2 = models.CharField(max_length=66, blank=True)
    # Where the pair came from: {"kind": "reference" | "same-prompt", "interactions": [ids], ...}.
    origin = models.JSONField(default=dict, blank=True)
    consensus = models.PositiveSmallIntegerField(
        choices=Verdict.choices, null=True, blank=True,
        help_text="the agents' common verdict in the last round; empty: they still disagreed")
    rounds = models.PositiveSmallIntegerField(help_text="rounds held, the independent round 0 included")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(consensus__isnull=True) | Q(consensus__in=Verdict.values),
                                   name="debate_consensus_is_a_verdict"),
            models.CheckConstraint(condition=Q(rounds__gte=1), name="debate_held_at_least_one_round"),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def disagreed(self) -> bool:
        return self.consensus is None


class DebateTurn(models.Model):
    """One agent's evaluation in one round of a debate, as given and as read."""

    debate = models.ForeignKey(Debate, on_delete=models.CASCADE, related_name="turns")
    round = models.PositiveSmallIntegerField()  # 0: independent; 1..: discussion rounds
    speaker = models.PositiveSmallIntegerField()  # the agent's place in the debate, from 1
    agent = models.CharField(max_length=100, blank=True)  # the judge model's name ("" when unknown)
    reasoning = models.TextField(blank=True)  # the agent's reply, as it came
    verdict = models.PositiveSmallIntegerField(choices=Verdict.choices, null=True, blank=True)
    unparseable = models.TextField(blank=True)  # why no verdict could be read (only when verdict is empty)
    recorded_score = models.CharField(max_length=32, blank=True)  # the score as an imported source wrote it
    # True: this agent saw the debate's submission 2 first, as its "Submission 1" (its verdict is mapped back).
    swapped = models.BooleanField(default=False)
    peers_shown = models.JSONField(default=list, blank=True)  # the other agents' names, in the order shown
    prompt = models.TextField(null=True, blank=True)  # what the agent was sent; empty for imported debates
    # The judge's probability of each verdict ("1", "2", "0", in the debate's numbering) at the verdict
    # position of a structured reply, normalised over them; verdict_mass: their unconstrained share.
    verdict_probabilities = models.JSONField(null=True, blank=True)
    verdict_mass = models.FloatField(null=True, blank=True)
    trimmed_to = models.PositiveSmallIntegerField(null=True, blank=True)  # earlier reasoning cut to fit (words)

    class Meta:
        ordering = ["debate_id", "round", "speaker"]
        constraints = [
            models.UniqueConstraint(fields=["debate", "round", "speaker"], name="one_turn_per_speaker_per_round"),
            models.CheckConstraint(condition=Q(verdict__isnull=True) | _VALID_VERDICT,
                                   name="turn_verdict_is_a_verdict"),
            models.CheckConstraint(
                condition=(Q(verdict__isnull=True) & ~Q(unparseable=""))
                | (Q(verdict__isnull=False) & Q(unparseable="")),
                name="turn_unparseable_iff_no_verdict"),
            models.CheckConstraint(condition=Q(speaker__gte=1), name="turn_speaker_from_one"),
        ]

    def __str__(self) -> str:
        return f"{self.debate_id} round {self.round} speaker {self.speaker}"

    @property
    def confidence(self) -> int | None:
        """The judge's probability of the verdict it gave, in percent (None without probabilities)."""
        if self.verdict is None or not self.verdict_probabilities:
            return None
        p = self.verdict_probabilities.get(str(self.verdict))
        return None if p is None else round(100 * p)

    @property
    def words(self) -> str:
        """What the agent said in words: a structured reply's reasoning, else the reply."""
        return reasoning_of(self.reasoning)


class QueueItem(models.Model):
    """A disagreement waiting for experts. A claim holds it for one expert until claim_expires_at;
    an expired claim is as good as none. Resolved once required_verdicts experts have answered."""

    class Status(models.TextChoices):
        OPEN = "open"
        CLAIMED = "claimed"
        RESOLVED = "resolved"

    debate = models.OneToOneField(Debate, on_delete=models.CASCADE, related_name="queue_item")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN, db_index=True)
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="claimed_queue_items")
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    required_verdicts = models.PositiveSmallIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(required_verdicts__gte=1), name="queue_item_needs_a_verdict"),
            models.CheckConstraint(
                condition=~Q(status="claimed") | (Q(claimed_by__isnull=False) & Q(claim_expires_at__isnull=False)),
                name="queue_item_claim_has_expert_and_expiry"),
            models.CheckConstraint(condition=~Q(status="resolved") | Q(resolved_at__isnull=False),
                                   name="queue_item_resolution_has_time"),
        ]

    def __str__(self) -> str:
        return f"{self.debate.key} {self.status}"


class ExpertVerdict(models.Model):
    """One expert's decision on a queued debate, after reading the agents' reasoning."""

    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="verdicts")
    expert = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="expert_verdicts")
    verdict = models.PositiveSmallIntegerField(choices=Verdict.choices)
    note = models.TextField(blank=True, max_length=5000)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["item_id", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["item", "expert"], name="one_verdict_per_expert_per_item"),
            models.CheckConstraint(condition=_VALID_VERDICT, name="expert_verdict_is_a_verdict"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id} {self.expert} {self.verdict}"


class MetaEvalRun(models.Model):
    """One `manage.py metaeval pairs|scores` run, kept so the site can show how far an automatic
    evaluator can be trusted, and in which context. `result` is the JSON the command printed as its
    last line; evaluator names, categories and sources come from files and are escaped when shown."""

    class Kind(models.TextChoices):
        PAIRS = "pairs", "Pairwise verdicts against human labels"
        SCORES = "scores", "Scores correlated with human scores"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    evaluator = models.CharField(max_length=200)  # the spec as given: "length", "geval:<judge>", ...
    evaluator_params = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=1000)  # the file's path as given to the command
    source_sha256 = models.CharField(max_length=64)  # of the file's bytes when the run read it
    label = models.CharField(max_length=200, blank=True,
                             help_text='what the data is, in words (e.g. "Topical-Chat dialogue")')
    # The board context the run speaks for ("" for none): that board links to it.
    context_id = models.CharField(max_length=66, blank=True, db_index=True)
    command = models.TextField(help_text="the command line that reproduces the figures")
    result = models.JSONField()
    seconds = models.FloatField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.CheckConstraint(condition=Q(kind__in=["pairs", "scores"]),
                                              name="metaeval_run_kind_is_known")]

    def __str__(self) -> str:
        return f"{self.kind} {self.evaluator} on {self.source}"


class Qualification(models.Model):
    """An evaluator run on the human-labelled sets before its scores may carry weight: the figures
    against "the longer answer wins" and the weight they earn (lib/weighting.py). The record it came
    from (every decided pair's outcome) is on IPFS at `cid`, so the weight can be rebuilt without this
    table. `status` says whether it is still running. A qualification finished without running
    ("skipped": a debate-role one whose judge did not qualify as a pairwise judge, apps/annotate/qualify.py)
    measured nothing: no figures, no weight, and `error` says in words why it was not tried."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting to run"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Not tried"

    evaluator = models.CharField(max_length=200, db_index=True)  # "bertscore-ref", "geval:<judge>", ...
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    full = models.BooleanField(default=False)  # every pair of every set, not a sample
    per_set = models.PositiveIntegerField(null=True, blank=True)  # the sample's pairs per set
    cid = models.CharField(max_length=100, blank=True)
    factor = models.CharField(max_length=24, blank=True)  # 1e18 fixed point: the weight earned
    figures = models.JSONField(default=dict, blank=True)  # pooled and per set, as `metaeval pairs` prints them
    error = models.TextField(blank=True)  # why it failed, or why it was not tried (skipped)
    created_at = models.DateTimeField(default=timezone.now)  # when it was queued
    started_at = models.DateTimeField(null=True, blank=True)  # when it began to run
    # While it runs, the process running it says so every minute or so (apps/annotate/qualify.py): a
    # running one that has not for a few minutes lost its worker and is taken again.
    beat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"qualification of {self.evaluator} ({self.status})"

    @property
    def qualified(self) -> bool:
        return self.status == self.Status.DONE and self.factor not in ("", "0")


class VoteQualification(models.Model):
    """The oracle metric's evaluator qualified on one context's own people: a qualification record
    (lib/weighting.py, the schema of the labelled sets' own) whose outcomes are that context's counted
    arena votes between two scored answers (apps/annotate/vote_qualification.py). Kept per distinct set
    of votes (`outcomes_sha256`), so the oracle pins and bootstraps a context's votes once per change of
    them, not once per evaluation; the record on IPFS at `cid` holds everything, so the weight can be
    rebuilt without this table."""

    evaluator = models.CharField(max_length=200)
    context_id = models.CharField(max_length=66)
    outcomes_sha256 = models.CharField(max_length=64)  # of the record's canonical outcomes: its set's sha256
    judged = models.PositiveIntegerField()  # votes between two scored answers: the record's outcomes
    cid = models.CharField(max_length=100)
    factor = models.CharField(max_length=24)  # 1e18 fixed point, as the record's figures give it
    figures = models.JSONField(default=dict)  # the record's figures (lib.weighting.qualification_figures)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["evaluator", "context_id", "outcomes_sha256"],
                                               name="one_vote_qualification_per_set_of_votes")]

    def __str__(self) -> str:
        return f"{self.evaluator} on {self.judged} votes of {self.context_id[:10]}"
