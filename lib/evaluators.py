"""Named evaluators for meta-evaluation against human labels: pure, no Django.

An evaluator has up to two capabilities:

- pairwise ``compare(items) -> ['a' | 'b' | 'tie' | None, ...]``: which of ``answer_a`` and
  ``answer_b`` is better for each item's ``question``; None when the evaluator could not decide
  (the meta-evaluation counts it as wrong and reports it as ``undecided``);
- absolute ``score(items, criterion) -> [float | None, ...]``: a score of each item's
  ``response`` (to ``question``) under ``criterion``; None when it could not score.

Items are mappings, the rows of a pairs file (lib/metaeval.py ``read_pairs``) or of an absolute
data set (lib/topical_chat.py ``scored_items``); ``reference`` is optional in both. An evaluator
that lacks a capability raises EvaluatorError when asked for it.

Evaluators are registered by name; a name registered with ``takes_argument=True`` is used as
``name:<argument>`` (``geval:<judge model>``), and its factory gets the argument:

    register_evaluator("selfeval", "apps.oracle.selfeval:SelfEvaluator")          # lazy "module:attr"
    register_evaluator("geval", lambda judge: GEval(judge), takes_argument=True)
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence

__all__ = ["Evaluator", "EvaluatorError", "available_evaluators", "get_evaluator", "register_evaluator",
           "VERDICTS"]

VERDICTS = ("a", "b", "tie")


class EvaluatorError(ValueError):
    """An unknown evaluator, a capability it lacks, or items it cannot judge."""


class Evaluator:
    """Base class: subclasses override ``compare`` and/or ``score``."""

    name = ""
    # Judges answers against other models' answers to the same prompt, as the oracle's metric does: it
    # is qualified only on labelled pairs that come with such reference answers (`references`).
    needs_reference_answers = False

    @property
    def params(self) -> dict[str, str]:
        """How its verdicts and scores are computed, copied into the report."""
        return {}

    def details(self, criterion: str) -> dict:
        """What the last ``score`` under ``criterion`` says about the evaluator itself (an LLM
        judge's digit mass and unusable items), copied into the report; {} when nothing."""
        return {}

    def pair_details(self) -> dict:
        """What the last ``compare`` says about the evaluator itself (an LLM judge's unusable answers,
        replies with no verdict), copied into the report as ``judge``; a ``warning`` in it, printed
        and shown on the run's page, says when the judge cannot be trusted. {} when nothing."""
        return {}

    def compare(self, items: Sequence[Mapping]) -> list[str | None]:
        raise EvaluatorError(f"evaluator {self.name!r} cannot compare pairs of answers")

    def score(self, items: Sequence[Mapping], criterion: str) -> list[float | None]:
        raise EvaluatorError(f"evaluator {self.name!r} cannot give absolute scores")


def _prefer(score_a: float, score_b: float) -> str:
    if score_a > score_b:
        return "a"
    return "b" if score_b > score_a else "tie"


def words(text: str) -> int:
    return len(text.split())


class Length(Evaluator):
    """The sanity baseline: the longer answer wins (humans often prefer it); length in words,
    whitespace-separated, whatever the criterion."""

    name = "length"

    @property
    def params(self) -> dict[str, str]:
        return {"unit": "whitespace-separated words", "pairwise": "more words wins; equal counts tie"}

    def compare(self, items):
        return [_prefer(words(item["answer_a"]), words(item["answer_b"])) for item in items]

    def score(self, items, criterion):
        return [float(words(item["response"])) for item in items]


class BERTScoreRef(Evaluator):
    """Raw BERTScore F1 (lib/metrics/bertscore.py, uncalibrated: calibration clips at 0 and so
    would turn low scores into ties) of an answer against the item's ``reference``; pairwise the
    higher F1 wins, equal F1 ties. Each distinct text is encoded once."""

    name = "bertscore-ref"
    needs_reference_answers = True

    def __init__(self, metric=None):
        self._metric = metric

    @property
    def metric(self):
        if self._metric is None:
            from lib.metrics import get_metric

            self._metric = get_metric("bertscore")
        return self._metric

    @property
    def params(self) -> dict[str, str]:
        m = self.metric
        return {"score": "raw BERTScore F1 against `reference` (no baseline rescaling)",
                "encoder": getattr(m, "encoder_name", "?"), "num_layers": str(getattr(m, "num_layers", "?"))}

    @staticmethod
    def _references(items: Sequence[Mapping]) -> list[list[str]]:
        """Each item's references: its `references` list when it has one (the other models' answers
        to the same prompt, as the oracle uses them), else its single `reference`. An item with none
        gets no verdict (counted wrong); when no item has one, that is an error."""
        found = []
        for item in items:
            refs = item.get("references") or ([item["reference"]] if isinstance(item.get("reference"), str) else [])
            found.append([r for r in refs if isinstance(r, str) and r.strip()])
        if items and not any(found):
            missing = [str(item.get("id", i)) for i, item in enumerate(items)]
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise EvaluatorError(f"{BERTScoreRef.name} needs a non-empty `reference` or `references`; "
                                 f"missing on {shown}")
        return found

    def _mean_f1(self, texts_and_refs: Sequence[tuple[str, list[str]]]) -> list[float | None]:
        """Mean raw F1 of each text against its references (None without any), in one metric call."""
        flat = [(text, ref) for text, refs in texts_and_refs for ref in refs]
        f1 = iter(f for _, _, f in self.metric.raw_scores(flat)) if flat else iter(())
        return [sum(next(f1) for _ in refs) / len(refs) if refs else None for _, refs in texts_and_refs]

    def pair_f1(self, items: Sequence[Mapping]) -> list[tuple[float, float] | None]:
        """(mean F1 of answer_a, mean F1 of answer_b) against each item's references; None without any."""
        refs = self._references(items)
        means = self._mean_f1([(item[side], r) for item, r in zip(items, refs) for side in ("answer_a", "answer_b")])
        return [None if means[2 * i] is None else (means[2 * i], means[2 * i + 1]) for i in range(len(items))]

    def compare(self, items):
        return [None if f is None else _prefer(*f) for f in self.pair_f1(items)]

    def score(self, items, criterion):
        refs = self._references(items)
        return self._mean_f1([(item["response"], r) for item, r in zip(items, refs)])


def log_length_ratio(a: str, b: str) -> float:
    """log((words(a) + 1) / (words(b) + 1)): 0 for equal lengths, antisymmetric."""
    return math.log((words(a) + 1) / (words(b) + 1))


def no_intercept_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares b of y = b x (0 when every x is 0)."""
    sxx = sum(x * x for x in xs)
    return sum(x * y for x, y in zip(xs, ys)) / sxx if sxx else 0.0


class BERTScoreLengthControlled(BERTScoreRef):
    """Reference BERTScore with the length taken out. BERTScore F1 against references rises and
    falls with how long an answer is next to them, so the raw comparison partly measures length.
    Pairwise, the F1 difference d = F1(a) - F1(b) is regressed on the log length ratio
    x = log((words(a) + 1) / (words(b) + 1)) over all the pairs judged together (least squares
    through the origin, so swapping a and b changes nothing), and the pair goes to the side of the
    residual d - b x: what BERTScore says beyond what the length ratio predicts. The fit uses no
    label, only the answers. Absolute scores: the residual of F1 regressed (with an intercept) on
    the log ratio of the response's length to its first reference's."""

    name = "bertscore-lc"

    def __init__(self, metric=None):
        super().__init__(metric)
        self.slope: float | None = None

    @property
    def params(self) -> dict[str, str]:
        return {**super().params, "length_control": "residual of the F1 difference on log((words_a+1)/(words_b+1)), "
                                                    "least squares through the origin over the pairs judged together"}

    def pair_details(self) -> dict:
        return {} if self.slope is None else {"length_slope": round(self.slope, 6)}

    def compare(self, items):
        f1 = self.pair_f1(items)
        xs = [log_length_ratio(item["answer_a"], item["answer_b"]) for item in items]
        known = [(f[0] - f[1], x) for f, x in zip(f1, xs) if f is not None]
        self.slope = no_intercept_slope([x for _, x in known], [d for d, _ in known])
        return [None if f is None else _prefer(f[0] - f[1] - self.slope * x, 0.0) for f, x in zip(f1, xs)]

    def score(self, items, criterion):
        f1 = super().score(items, criterion)
        refs = self._references(items)
        known = [(log_length_ratio(item["response"], r[0]), y) for item, r, y in zip(items, refs, f1) if y is not None]
        if not known:
            return f1
        mx, my = sum(x for x, _ in known) / len(known), sum(y for _, y in known) / len(known)
        b = no_intercept_slope([x - mx for x, _ in known], [y - my for _, y in known])
        return [None if y is None else y - my - b * (log_length_ratio(item["response"], r[0]) - mx)
                for item, r, y in zip(items, refs, f1)]


# name -> (factory, takes_argument, argument_optional); a factory is a callable or a lazy "module:attr" path
_REGISTRY: dict[str, tuple[str | Callable[..., Evaluator], bool, bool]] = {
    "length": (Length, False, False),
    "bertscore-ref": (BERTScoreRef, False, False),
    "bertscore-lc": (BERTScoreLengthControlled, False, False),
}


def register_evaluator(name: str, factory: str | Callable[..., Evaluator], *, takes_argument: bool = False,
                       argument_optional: bool = False) -> None:
    """Register ``factory`` under ``name``; with ``takes_argument`` it is asked for as ``name:<arg>``
    and called with that argument; with ``argument_optional`` as ``name`` too, and then called with
    none (``debate``: every running judge; ``debate:<judge>``: that judge alone)."""
    if not name or not isinstance(name, str) or ":" in name:
        raise EvaluatorError("an evaluator needs a non-empty name without ':'")
    _REGISTRY[name] = (factory, takes_argument or argument_optional, argument_optional)


def available_evaluators() -> list[str]:
    """Names as a user types them: ``geval:<argument>`` for those that take one, ``debate[:<argument>]``
    for those that may."""
    return sorted(f"{name}[:<argument>]" if optional else f"{name}:<argument>" if takes else name
                  for name, (_, takes, optional) in _REGISTRY.items())


def _resolve(factory: str | Callable[..., Evaluator]) -> Callable[..., Evaluator]:
    if callable(factory):
        return factory
    module, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_evaluator(spec: str) -> Evaluator:
    """The evaluator ``spec`` names: ``length``, or ``geval:<judge model>`` for one taking an argument."""
    name, colon, argument = spec.partition(":")
    known = ", ".join(available_evaluators())
    if name not in _REGISTRY:
        raise EvaluatorError(f"unknown evaluator {spec!r}; available: {known}")
    factory, takes, optional = _REGISTRY[name]
    if takes and not argument and not optional:
        raise EvaluatorError(f"evaluator {name!r} needs an argument: {name}:<argument>")
    if not takes and colon:
        raise EvaluatorError(f"evaluator {name!r} takes no argument (got {spec!r}); available: {known}")
    return _resolve(factory)(argument) if takes and argument else _resolve(factory)()
