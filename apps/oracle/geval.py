"""G-Eval (lib/geval.py) with a registered model as the judge: the evaluator ``geval:<model name>``
for meta-evaluation, and the metric ``geval`` for the oracle.

The judge is reached through the gateway (non-streamed, for its logprobs); the evaluation steps it
writes for a criterion are kept in GEvalSteps and reused. A judge that put too little probability
on the digits for an item gives that item no score, and the evaluator reports how many.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import IntegrityError

from apps.chat.gateway import EndpointRefused, Gateway, GatewayError, structured_support
from apps.chat.models import RegisteredModel
from apps.chat.providers import endpoint_of
from lib import geval
from lib.evaluators import Evaluator, EvaluatorError
from lib.metrics import MetricError

from .models import GEvalSteps

TIE_TOLERANCE = 1e-6


class GatewayTransport:
    """lib.geval's transport over the gateway, with its timeouts, retries and typed errors."""

    def __init__(self, model: RegisteredModel, gateway: Gateway | None = None):
        self.model = model
        self.endpoint = endpoint_of(model)
        self.gateway = gateway or Gateway()

    def structured(self) -> bool:
        """Whether the judge honours a JSON-schema response_format (probed once, remembered on the model)."""
        try:
            return async_to_sync(structured_support)(self.gateway, self.model, self.endpoint)
        except GatewayError as exc:
            raise geval.JudgeError(str(exc)) from exc

    def complete(self, messages: list[dict], **params) -> dict:
        try:
            if not (params.get("logprobs") or params.get("n", 1) != 1 or "response_format" in params):
                # Plain text (the evaluation steps, a few hundred tokens): streamed, so a judge that keeps
                # writing on a busy machine is waited for piece by piece rather than cut off as a whole.
                text = async_to_sync(self.gateway.complete)(self.endpoint, messages, **params)
                return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
            return async_to_sync(self.gateway.chat)(self.endpoint, messages,
                                                    read_timeout=settings.LLMCHAIN_DEBATE_TIMEOUT_S, **params)
        except EndpointRefused as exc:
            raise geval.RequestRefused(str(exc)) from exc
        except GatewayError as exc:
            raise geval.JudgeError(str(exc)) from exc


def judge_model(name: str) -> RegisteredModel:
    """The registered model called ``name``, if it can judge (it has an endpoint)."""
    model = RegisteredModel.objects.filter(name=name).first()
    if model is None:
        known = ", ".join(RegisteredModel.objects.filter(kind=RegisteredModel.Kind.OPENAI)
                          .values_list("name", flat=True)[:10])
        raise EvaluatorError(f"no registered model named {name!r} to judge with (registered: {known or 'none'})")
    if model.kind != RegisteredModel.Kind.OPENAI or not model.endpoint_url:
        raise EvaluatorError(f"{name!r} has no endpoint to ask: a replay model cannot judge")
    return model


def steps_for(model: RegisteredModel, criterion: geval.Criterion, judge: geval.GEvalJudge) -> GEvalSteps:
    """The judge's evaluation steps for ``criterion``: written on first use, then read back."""
    prompt = geval.steps_prompt(criterion)
    key = {"judge": model.name, "criterion": criterion.name, "prompt_sha256": geval.sha256(prompt)}
    found = GEvalSteps.objects.filter(**key).first()
    if found:
        return found
    steps = judge.write_steps(criterion)
    try:
        return GEvalSteps.objects.create(**key, prompt=prompt, steps=steps, endpoint_model=model.endpoint_model)
    except IntegrityError:  # another process wrote them first: theirs are the ones in use
        return GEvalSteps.objects.get(**key)


def criterion_named(name: str) -> geval.Criterion:
    try:
        return geval.CRITERIA[name]
    except KeyError:
        raise EvaluatorError(f"G-Eval has no criterion {name!r}; known: {', '.join(geval.CRITERIA)}") from None


class GEval(Evaluator):
    """``geval:<judge>``: absolute scores are G-Eval's weighted 1..5 scores; a pair is won by the
    answer with the higher ``overall`` score (equal to 1e-6: tie). Unusable judgements are None."""

    name = "geval"
    pairwise_criterion = "overall"

    def __init__(self, judge_name: str, *, gateway: Gateway | None = None, **options):
        self.model = judge_model(judge_name)
        self.judge = geval.GEvalJudge(GatewayTransport(self.model, gateway), **options)
        self.steps: dict[str, GEvalSteps] = {}
        self.reports: dict[str, dict] = {}

    @property
    def params(self) -> dict[str, str]:
        return {"judge": self.model.name, "endpoint_model": self.model.endpoint_model, **self.judge.params,
                **{f"steps_sha256[{c}]": s.prompt_sha256 for c, s in self.steps.items()},
                "pairwise": f"higher {self.pairwise_criterion} score wins; equal (1e-6) ties; unusable: undecided"}

    def details(self, criterion: str) -> dict:
        return self.reports.get(criterion, {})

    def judgements(self, items: Sequence[Mapping], criterion: str) -> list[geval.Judgement]:
        c = criterion_named(criterion)
        try:
            if criterion not in self.steps:
                self.steps[criterion] = steps_for(self.model, c, self.judge)
            steps = self.steps[criterion]
            found = self.judge.judge_all(c, steps.steps, items)
        except geval.JudgeError as exc:
            raise EvaluatorError(f"the judge {self.model.name} failed: {exc}") from None
        except ValueError as exc:
            raise EvaluatorError(str(exc)) from None
        distinct = list({id(j): j for j in found}.values())  # an item judged once stands in all its places
        self.reports[criterion] = geval.summary(distinct, self.judge.threshold)
        return found

    def score(self, items, criterion):
        return [j.score for j in self.judgements(items, criterion)]

    def pair_details(self) -> dict:
        found = dict(self.details(self.pairwise_criterion))
        if found.get("unusable"):
            found["warning"] = (
                f"UNUSABLE judge on {found['unusable']} of {found['unusable'] + found['scored']} distinct answers: "
                f"it put less than {found['threshold']} of its probability on the digits 1-5, so the pairs with "
                f"such an answer are undecided, not guessed.")
        return found

    def compare(self, items):
        sides = [{"question": item["question"], "response": item[side], "reference": item.get("reference")}
                 for item in items for side in ("answer_a", "answer_b")]
        scores = self.score(sides, self.pairwise_criterion)
        verdicts = []
        for a, b in zip(scores[::2], scores[1::2]):
            if a is None or b is None:
                verdicts.append(None)
            elif abs(a - b) <= TIE_TOLERANCE:
                verdicts.append("tie")
            else:
                verdicts.append("a" if a > b else "b")
        return verdicts


class GEvalMetric:
    """The ``geval`` metric: an answer's G-Eval score under ``criterion``, calibrated to
    (s - 1) / 4 in [0, 1]. Reference-free: the reference of a pair is not shown to the judge, so
    each distinct candidate is judged once. A judgement the judge could not give (too little mass
    on the digits) raises MetricError rather than becoming a number."""

    name = "geval"

    def __init__(self, judge: str, criterion: str = "helpfulness", question: str = "", gateway: Gateway | None = None,
                 **options):
        try:
            self.evaluator = GEval(judge, gateway=gateway, **options)
            self.criterion = criterion_named(criterion)
        except EvaluatorError as exc:
            raise MetricError(str(exc)) from None
        self.question = question

    @property
    def evaluator_name(self) -> str:
        """The evaluator whose qualification decides this metric's weight (apps/oracle/weights.py)."""
        return f"geval:{self.evaluator.model.name}"

    @property
    def params(self) -> dict[str, str]:
        steps = self.evaluator.steps.get(self.criterion.name)
        return {**self.evaluator.params, "criterion": self.criterion.name, "calibration": "(s - 1) / 4",
                "steps_sha256": steps.prompt_sha256 if steps else ""}

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        candidates = list(dict.fromkeys(candidate for candidate, _ in pairs))
        try:
            found = self.evaluator.judgements([{"question": self.question, "response": c} for c in candidates],
                                              self.criterion.name)
        except EvaluatorError as exc:
            raise MetricError(str(exc)) from None
        by_candidate = dict(zip(candidates, found))
        unusable = sum(not j.usable for j in found)
        if unusable:
            raise MetricError(f"the judge {self.evaluator.model.name} is unusable on {unusable} of {len(found)} "
                              f"answers (digit mass below {self.evaluator.judge.threshold})")
        return [(by_candidate[c].score - 1) / 4 for c, _ in pairs]
