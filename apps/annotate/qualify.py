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
import random
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.chain.evidence import default_store
from lib import records
from lib.evaluators import EvaluatorError, Length, get_evaluator
from lib.labelled_sets import LabelledSetError, llmbar_pairs, pandalm_pairs
from lib.metaeval import validity
from lib.weighting import qualification_record

from .models import Qualification

SAMPLE_SEED = 0


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
    per, used, outcomes, skipped = {}, [], [], {}
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
        per[s.name] = figures
        used.append({"name": s.name, "sha256": digest, "pairs": len(every),
                     "judged": len(pairs)})
        outcomes += [(p["id"], int(v == p["human"]), int(b == p["human"]))
                     for p, v, b in zip(pairs, verdicts, length) if p["human"] != "tie"]
        pooled_pairs += pairs
        pooled_verdicts += verdicts
        pooled_length += length
    pooled = validity(pooled_pairs, pooled_verdicts, pooled_length)
    return {"judge": judge, "per_set": per, "sets": used, "outcomes": outcomes, "pooled": pooled,
            "skipped": skipped}


def qualify(evaluator: str, *, per_set: int | None = None, data_dir: Path | None = None, sets=SETS,
            row: Qualification | None = None) -> Qualification:
    """Run the qualification now and keep it (in `row` when given, e.g. a pending one); a failure is
    kept on the row with its reason and raised as QualificationError."""
    row = row or Qualification.objects.create(evaluator=evaluator, full=per_set is None, per_set=per_set)
    try:
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
    """The evaluator a registered judge is qualified as: G-Eval with it as the judge."""
    return f"geval:{model_name}"


def enqueue_judges(per_set: int | None = None) -> int:
    """A pending sample qualification for every judge model that has none yet (registering a model as
    a judge is setting `is_judge`); returns how many were queued."""
    from apps.chat.models import RegisteredModel

    per_set = settings.LLMCHAIN_QUALIFY_SAMPLE if per_set is None else per_set
    known = set(Qualification.objects.values_list("evaluator", flat=True))
    queued = [Qualification(evaluator=judge_evaluator(name), per_set=per_set)
              for name in RegisteredModel.objects.filter(is_judge=True).values_list("name", flat=True)
              if judge_evaluator(name) not in known]
    Qualification.objects.bulk_create(queued)
    return len(queued)


def run_pending() -> int:
    """Queue the new judges' qualifications, then run one pending qualification (taken so no other
    worker runs it too); returns 1 when one ran, 0 when none was waiting."""
    enqueue_judges()
    for row in Qualification.objects.filter(status=Qualification.Status.PENDING).order_by("created_at", "id")[:5]:
        if Qualification.objects.filter(pk=row.pk, status=Qualification.Status.PENDING).update(
                status=Qualification.Status.RUNNING):
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


def refusal(evaluator: str) -> str:
    """Why the evaluator's scores carry no weight, in words; "" when they do."""
    q = latest(evaluator)
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
