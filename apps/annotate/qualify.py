"""Qualifying an evaluator: run it on the human-labelled sets against the length rule, pin the outcomes
as a qualification record on IPFS, and keep the figures and the weight earned (`Qualification`).

The sets are PandaLM's test set and LLMBar's five, read from LLMCHAIN_DATA_DIR through their importers
(lib/labelled_sets.py). An evaluator that scores answers against other models' answers (BERTScore, as
the oracle uses it) is qualified only on the sets that have them (PandaLM): LLMBar's stand-in
reference, the instruction, would measure something the oracle never does. A sample (`per_set` pairs drawn from each set with a fixed seed) finishes in
minutes for a slow judge; `full` judges every pair. The pooled decided pairs of every set decide the
weight: an evaluator has to beat "the longer answer wins" on the mix of sets where length helps
(PandaLM, Natural) and where it misleads (Adversarial).
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from dataclasses import dataclass
from datetime import timedelta, timezone as dt_timezone
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.chain.evidence import default_store
from apps.chat.builtin import BUILTIN_NAME
from lib import records
from lib.evaluators import EvaluatorError, Length, get_evaluator
from lib.labelled_sets import LabelledSetError, llmbar_pairs, pandalm_pairs
from lib.metaeval import validity
from lib.weighting import qualification_record

from .models import Qualification

SAMPLE_SEED = 0
log = logging.getLogger(__name__)
# A running qualification's process marks it every BEAT_S; one not marked for LEASE_S lost its process
# (killed, or its machine gone) and the next worker pass takes it again from the start.
BEAT_S = 60.0
LEASE_S = 300.0


class Heartbeat:
    """While a qualification runs (minutes to hours: one judge call per pair), a thread of its process
    marks the row every BEAT_S, so that a worker tells a running one from one whose process died."""

    def __init__(self, pk: int):
        self.pk, self.stopped = pk, threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name=f"qualification {pk} heartbeat")

    def _beat(self) -> None:
        try:
            while not self.stopped.wait(BEAT_S):
                try:
                    Qualification.objects.filter(pk=self.pk, status=Qualification.Status.RUNNING).update(
                        beat_at=timezone.now())
                except DatabaseError:  # the next beat tries again; a lease is several beats long
                    log.warning("could not mark qualification %s as running", self.pk, exc_info=True)
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()


def reclaim_abandoned(now=None) -> int:
    """Running qualifications whose process stopped marking them for LEASE_S, put back to wait (each
    taken again by the next pass); returns how many."""
    cut = (now or timezone.now()) - timedelta(seconds=LEASE_S)
    lost = Q(beat_at__lt=cut) | Q(beat_at__isnull=True, started_at__lt=cut)
    return Qualification.objects.filter(lost, status=Qualification.Status.RUNNING).update(
        status=Qualification.Status.PENDING, started_at=None, beat_at=None)


@dataclass(frozen=True)
class LabelledSet:
    name: str
    relative: str  # under LLMCHAIN_DATA_DIR
    read: object

    def path(self, data_dir: Path | None = None) -> Path:
        return Path(data_dir or settings.LLMCHAIN_DATA_DIR) / self.relative


SETS = (LabelledSet("PandaLM", "pandalm/testset-v1.json", pandalm_pairs),
        LabelledSet("LLMBar Natural", "llmbar/Natural/dataset.json", llmbar_pairs),
        *(LabelledSet(f"LLMBar {name}", f"llmbar/Adversarial/{name}/dataset.json", llmbar_pairs)
          for name in ("GPTInst", "GPTOut", "Manual", "Neighbor")))


class QualificationError(RuntimeError):
    """The labelled sets cannot be read, or the evaluator cannot judge them; the message says which."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sample(pairs: list[dict], per_set: int | None, seed: int = SAMPLE_SEED) -> list[dict]:
    if per_set is None or per_set >= len(pairs):
        return pairs
    chosen = set(random.Random(seed).sample(range(len(pairs)), per_set))
    return [p for i, p in enumerate(pairs) if i in chosen]


def judge_sets(evaluator: str, per_set: int | None, data_dir: Path | None = None, sets=SETS) -> dict:
    """The evaluator on every labelled set: per set its validity figures, and the pooled outcomes."""
    try:
        judge = get_evaluator(evaluator)
    except EvaluatorError as exc:
        raise QualificationError(str(exc)) from None
    per, used, outcomes, skipped, positions = {}, [], [], {}, []
    pooled_pairs, pooled_verdicts, pooled_length = [], [], []
    for s in sets:
        path = s.path(data_dir)
        try:
            every = s.read(path)
            digest = _sha256(path)
        except (LabelledSetError, OSError) as exc:
            raise QualificationError(f"{s.name}: {exc}") from None
        if judge.needs_reference_answers and not any(p.get("references") for p in every):
            skipped[s.name] = "no reference answers: the oracle scores against other models' answers"
            continue
        pairs = sample(every, per_set)
        try:
            verdicts = judge.compare(pairs)
        except EvaluatorError as exc:
            raise QualificationError(f"{evaluator} on {s.name}: {exc}") from None
        length = Length().compare(pairs)
        figures = validity(pairs, verdicts, length)
        figures.pop("bootstrap")
        if position := judge.pair_details().get("position"):  # a judge asked both orders of each pair
            figures["position"] = position
            positions.append(position)
        per[s.name] = figures
        used.append({"name": s.name, "sha256": digest, "pairs": len(every),
                     "judged": len(pairs)})
        outcomes += [(p["id"], int(v == p["human"]), int(b == p["human"]))
                     for p, v, b in zip(pairs, verdicts, length) if p["human"] != "tie"]
        pooled_pairs += pairs
        pooled_verdicts += verdicts
        pooled_length += length
    pooled = validity(pooled_pairs, pooled_verdicts, pooled_length)
    if positions:
        pooled["position"] = pooled_position(positions)
    return {"judge": judge, "per_set": per, "sets": used, "outcomes": outcomes, "pooled": pooled,
            "skipped": skipped}


def pooled_position(per_set: list[dict]) -> dict:
    """lib.metaeval.position_bias's figures over every set, from the counts of each."""
    counts = {k: sum(p[k] for p in per_set) for k in ("pairs", "both_readable", "consistent", "decided_verdicts",
                                                       "first_position_wins")}
    return {**counts,
            "consistency": round(counts["consistent"] / counts["both_readable"], 4) if counts["both_readable"] else None,
            "first_position_win_rate": (round(counts["first_position_wins"] / counts["decided_verdicts"], 4)
                                        if counts["decided_verdicts"] else None)}


def qualify(evaluator: str, *, per_set: int | None = None, data_dir: Path | None = None, sets=SETS,
            row: Qualification | None = None) -> Qualification:
    """Run the qualification now and keep it (in `row` when given, e.g. a pending one); a failure is
    kept on the row with its reason and raised as QualificationError."""
    # A row of its own runs at once: kept as running, so no worker takes it as waiting and runs it too.
    row = row or Qualification.objects.create(evaluator=evaluator, full=per_set is None, per_set=per_set,
                                              status=Qualification.Status.RUNNING, started_at=timezone.now(),
                                              beat_at=timezone.now())
    try:
        with Heartbeat(row.pk):
            found = judge_sets(evaluator, per_set, data_dir, sets)
        record = qualification_record(evaluator=evaluator, params=found["judge"].params, sets=found["sets"],
                                      outcomes=found["outcomes"])
        cid = default_store().put(records.canonical(record))
    except QualificationError as exc:
        Qualification.objects.filter(pk=row.pk).update(status=Qualification.Status.FAILED, error=str(exc)[:2000],
                                                       finished_at=timezone.now())
        raise
    pooled = found["pooled"]
    pooled.pop("bootstrap")
    with transaction.atomic():
        row.status, row.cid, row.factor = Qualification.Status.DONE, cid, record["figures"]["factor"]
        row.figures = {"pooled": pooled, "per_set": found["per_set"], "sets": found["sets"],
                       "skipped": found["skipped"]}
        row.finished_at = timezone.now()
        row.save()
    return row


def judge_evaluator(model_name: str) -> str:
    """The evaluator a registered judge is qualified as in G-Eval: G-Eval with it as the judge."""
    return f"geval:{model_name}"


# The roles a judge model plays, each qualified on its own as the evaluator `<role>:<model name>`:
# G-Eval scores each answer alone (lib/geval.py); a pairwise judge picks the better of two answers,
# asked in both orders (apps/oracle/role_evaluators.py); a debate seats it as its two agents and takes
# their consensus (apps/oracle/debates.py). Setting `is_judge` registers a model in all three.
ROLES = ("geval", "pairwise", "debate")


def role_evaluator(model_name: str, role: str) -> str:
    """The evaluator a registered judge is qualified as in `role` (one of ROLES)."""
    if role not in ROLES:
        raise ValueError(f"a judge's role is one of {', '.join(ROLES)}, not {role!r}")
    return f"{role}:{model_name}"


def enqueue_judges(per_set: int | None = None) -> int:
    """A pending sample qualification in every role for every judge model that has none in it yet
    (registering a model as a judge is setting `is_judge`), and a new debate-role one for a judge whose
    last was not tried (`debate_gate`) when a pairwise qualification has finished since; returns how
    many were queued."""
    from apps.chat.models import RegisteredModel

    per_set = settings.LLMCHAIN_QUALIFY_SAMPLE if per_set is None else per_set
    known = set(Qualification.objects.values_list("evaluator", flat=True))
    queued = [Qualification(evaluator=role_evaluator(name, role), per_set=per_set)
              for name in RegisteredModel.objects.filter(is_judge=True).values_list("name", flat=True)
              for role in ROLES if role_evaluator(name, role) not in known]
    queued += [Qualification(evaluator=row.evaluator, full=row.full, per_set=row.per_set) for row in _retry_debates()]
    Qualification.objects.bulk_create(queued)
    return len(queued)


def _retry_debates() -> list[Qualification]:
    """The debate-role qualifications not tried whose judge has finished a pairwise one since, while
    nothing newer is queued in the role: the pairwise outcome they were decided by is no longer the last."""
    skipped = set(Qualification.objects.filter(status=Qualification.Status.SKIPPED,
                                               evaluator__startswith="debate:").values_list("evaluator", flat=True))
    if not skipped:
        return []
    newest = {}
    for q in Qualification.objects.filter(evaluator__in=list(skipped)):  # newest first (the model's ordering)
        newest.setdefault(q.evaluator, q)
    pairwise = {}  # debate evaluator -> when its judge's last pairwise qualification finished
    for evaluator, finished in Qualification.objects.filter(
            evaluator__in=[role_evaluator(_judge_of(e), "pairwise") for e in skipped],
            status=Qualification.Status.DONE, finished_at__isnull=False).values_list("evaluator", "finished_at"):
        key = role_evaluator(_judge_of(evaluator), "debate")
        pairwise[key] = max(pairwise.get(key, finished), finished)
    retry = []
    for evaluator, row in newest.items():
        later = pairwise.get(evaluator)
        if row.status == Qualification.Status.SKIPPED and later and row.finished_at and later > row.finished_at:
            retry.append(row)
    return retry


# Why a judge's debate-role qualification was finished without running, in the words kept on it: a
# debate opens with the pairwise question (its round 0 is the prompt a pairwise judge is asked), so a
# judge that did not answer that one better than the length rule is not measured on the rest.
NOT_TRIED_REFUSED = ("Not tried in debates: as a pairwise judge it did not beat preferring the longer answer, "
                     "and a debate opens with that question.")
NOT_TRIED_FAILED = ("Not tried in debates: its qualification as a pairwise judge could not be finished ({error}), "
                    "and a debate opens with that question.")

RUN, WAIT, SKIP = "run", "wait", "skip"


def debate_gate(model_name: str) -> tuple[str, str]:
    """Whether the judge's debate-role qualification runs now, after its pairwise one: (RUN, ""); (WAIT,
    "") while a pairwise one is queued or running; (SKIP, why) when its last finished pairwise one did
    not qualify it, or, none having finished, the last could not be finished. A judge never qualified
    pairwise (one queued by hand for a model that is not a judge) is measured as asked."""
    evaluator = role_evaluator(model_name, "pairwise")
    rows = Qualification.objects.filter(evaluator=evaluator)
    if rows.filter(status__in=[Qualification.Status.PENDING, Qualification.Status.RUNNING]).exists():
        return WAIT, ""
    done = latest(evaluator)
    if done is not None:
        return (RUN, "") if done.qualified else (SKIP, NOT_TRIED_REFUSED)
    newest = rows.first()
    if newest is None:
        return RUN, ""
    return SKIP, NOT_TRIED_FAILED.format(error=newest.error or "no reason was kept")


# An answer is cut at LLMCHAIN_ANSWER_MAX_S; one still marked streaming well after that was left behind by
# a process that stopped, and holds nothing back.
STREAM_GRACE_S = 60


def answering() -> set[tuple[str, str]]:
    """The endpoints (url, model) with an answer streaming for a person now (a chat or arena turn)."""
    from apps.chat.models import Interaction

    since = timezone.now() - timedelta(seconds=settings.LLMCHAIN_ANSWER_MAX_S + STREAM_GRACE_S)
    return set(Interaction.objects.filter(status=Interaction.Status.STREAMING, created_at__gte=since).values_list(
        "conversation__model__endpoint_url", "conversation__model__endpoint_model").distinct())


def _judge_of(evaluator: str) -> str:
    """The judge model's name in a role's evaluator ("" for any other evaluator)."""
    role, _, name = evaluator.partition(":")
    return name if role in ROLES else ""


def run_pending() -> int:
    """Queue the new judges' qualifications, then take one pending qualification (so no other worker
    takes it too) and run it, or finish it without running; returns 1 when one was taken, 0 when none
    could be. G-Eval and pairwise ones go before debate ones (`debate_gate` decides those), and a judge
    whose endpoint is answering a person now waits: a person's answer comes first."""
    from apps.chat.models import RegisteredModel

    enqueue_judges()
    reclaim_abandoned()
    pending = Qualification.objects.filter(status=Qualification.Status.PENDING).order_by("created_at", "id")
    rows = [*pending.exclude(evaluator__startswith="debate:"), *pending.filter(evaluator__startswith="debate:")]
    if not rows:
        return 0
    busy = answering()
    endpoints = {name: (url, model) for name, url, model in RegisteredModel.objects.filter(
        name__in={_judge_of(r.evaluator) for r in rows}).values_list("name", "endpoint_url", "endpoint_model")}
    for row in rows:
        judge = _judge_of(row.evaluator)
        if endpoints.get(judge) in busy:
            continue
        gate, why = debate_gate(judge) if row.evaluator.startswith("debate:") else (RUN, "")
        if gate == WAIT:
            continue
        now = timezone.now()
        if gate == SKIP:
            if Qualification.objects.filter(pk=row.pk, status=Qualification.Status.PENDING).update(
                    status=Qualification.Status.SKIPPED, error=why, finished_at=now):
                return 1
            continue
        row.status, row.started_at, row.beat_at = Qualification.Status.RUNNING, now, now
        if Qualification.objects.filter(pk=row.pk, status=Qualification.Status.PENDING).update(
                status=row.status, started_at=row.started_at, beat_at=row.beat_at):
            try:
                qualify(row.evaluator, per_set=None if row.full else row.per_set, row=row)
            except QualificationError:
                pass  # kept on the row with its reason, shown on the model page
            return 1
    return 0


def latest(evaluator: str) -> Qualification | None:
    """The evaluator's most recent finished qualification (a full one before a sample of the same age)."""
    return Qualification.objects.filter(evaluator=evaluator, status=Qualification.Status.DONE).order_by(
        "-finished_at", "-full", "-id").first()


_UNREAD = object()


def refusal(evaluator: str, q=_UNREAD) -> str:
    """Why the evaluator's scores carry no weight, in words; "" when they do. `q`: its latest
    qualification when the caller has already read it (None: it has none)."""
    q = latest(evaluator) if q is _UNREAD else q
    if q is None:
        return (f"{evaluator} has not been qualified on the human-labelled sets "
                f"(python manage.py metaeval qualify --evaluator {evaluator})")
    if q.qualified:
        return ""
    p = q.figures.get("pooled", {})
    return (f"{evaluator} has not shown it beats preferring the longer answer: on {p.get('pairs_non_tie')} "
            f"human-labelled pairs it agrees with people {_pct(p.get('accuracy_non_tie'))}, the longer answer "
            f"{_pct(p.get('length_accuracy_non_tie'))}; the lower end of its margin is "
            f"{_pct(p.get('margin_over_length_ci_low'))}")


def _pct(x) -> str:
    return "?" if x is None else f"{100 * x:.1f}%"


# What the project measured before any site ran a qualification: the pooled row of G-Eval with the built-in
# judge (3 pairs from each of the six sets, on the developers' machine, November 2026) in the table of the
# meta-evaluation notes. The built-in model's page shows it, named as the project's and not the site's own,
# while the site's qualification of that model has not finished. A test keeps it equal to that table.
PROJECT_MEASURED = {
    judge_evaluator(BUILTIN_NAME): {
        "how": "G-Eval with this model as the judge", "when": "November 2026", "per_set": 3, "sets": 6,
        "pairs_non_tie": 18, "accuracy_non_tie": 0.611, "accuracy_ci_low": 0.389, "accuracy_ci_high": 0.833,
        "length_accuracy_non_tie": 0.444, "margin_over_length": 0.167, "margin_over_length_ci_low": -0.222,
        "margin_over_length_ci_high": 0.556},
}


def _whole(x: float) -> str:
    return f"{round(100 * x)}"


def _points(x: float) -> str:
    return f"{round(100 * x):+d}" if round(100 * x) else "0"


def measured_text(evaluator: str) -> str:
    """The project's own earlier measurement of this evaluator, in words ("" when it has none)."""
    m = PROJECT_MEASURED.get(evaluator)
    if m is None:
        return ""
    verdict = ("not above 0, so with these figures it would not qualify" if m["margin_over_length_ci_low"] <= 0
               else "above 0")
    return (f"What the project measured for it earlier, on its developers' machine rather than on this site "
            f"({m['when']}): {m['how']}, on a sample of {m['per_set']} pairs from each of the {m['sets']} labelled "
            f"sets, agreed with people on {_whole(m['accuracy_non_tie'])}% of {m['pairs_non_tie']} decided pairs "
            f"(between {_whole(m['accuracy_ci_low'])}% and {_whole(m['accuracy_ci_high'])}%), while preferring the "
            f"longer answer agreed {_whole(m['length_accuracy_non_tie'])}%. Its lead over that, "
            f"{_points(m['margin_over_length'])} points, could be anywhere from {_points(m['margin_over_length_ci_low'])} "
            f"to {_points(m['margin_over_length_ci_high'])} points: {verdict}.")


def sample_words(q: Qualification) -> str:
    """What a qualification judges, in words."""
    if q.full:
        return f"every pair of the {len(SETS)} labelled sets"
    return f"a sample of {q.per_set} pairs from each of the {len(SETS)} labelled sets"


def _at(when) -> str:
    return when.astimezone(dt_timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def waiting_text(q: Qualification) -> str:
    """Where a qualification not finished yet stands (queued or running), in words that follow "its
    qualification on labelled pairs"."""
    if q.status == Qualification.Status.RUNNING:
        state = f"is running (started {_at(q.started_at or q.created_at)})"
    else:
        state = (f"is queued (since {_at(q.created_at)}): the site's debate worker runs it when it has no debate "
                 f"to hold and the model is not answering anyone")
    return (f"{state}. It judges {sample_words(q)}, pairs of answers that people have already compared, to see "
            f"whether it agrees with them more often than simply preferring the longer answer; its figures appear "
            f"here when it is done.")
