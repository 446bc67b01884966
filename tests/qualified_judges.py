"""A finished qualification of a judge in one role, written as a row (apps/annotate/qualify.py keeps
such rows): for tests about something else that need a judge the site uses (a debate's rounds, its
worker), or one it refuses, without running the labelled sets. Tests of qualifying itself run it."""

from __future__ import annotations

from django.utils import timezone

from apps.annotate.models import Qualification
from apps.annotate.qualify import role_evaluator

PASSED = {"pairs_non_tie": 230, "accuracy_non_tie": 0.85, "accuracy_ci_low": 0.8, "accuracy_ci_high": 0.89,
          "length_accuracy_non_tie": 0.41, "margin_over_length": 0.44, "margin_over_length_ci_low": 0.37,
          "margin_over_length_ci_high": 0.51, "weight": 0.6309}
FAILED = {**PASSED, "accuracy_non_tie": 0.41, "accuracy_ci_low": 0.35, "accuracy_ci_high": 0.48,
          "margin_over_length": 0.0, "margin_over_length_ci_low": 0.0, "margin_over_length_ci_high": 0.0, "weight": 0.0}


def record_qualification(model_name: str, role: str = "debate", *, qualified: bool = True) -> Qualification:
    pooled = PASSED if qualified else FAILED
    return Qualification.objects.create(
        evaluator=role_evaluator(model_name, role), status=Qualification.Status.DONE, per_set=4,
        cid="bafkreitestqualification", factor=str(int(pooled["weight"] * 10**18)),
        figures={"pooled": pooled, "per_set": {}, "sets": [], "skipped": {}}, finished_at=timezone.now())
