"""Named evaluators for meta-evaluation against human labels (issue 9): pure, no Django.

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
from collections.abc import Callable, Mapping, Sequence

__all__ = ["Evaluator", "EvaluatorError", "available_evaluators", "get_evaluator", "register_evaluator",
           "VERDICTS"]

VERDICTS = ("a", "b", "tie")


class EvaluatorError(ValueError):
    """An unknown evaluator, a capability it lacks, or items it cannot judge."""


class Evaluator:
    """Base class: subclasses override ``compare`` and/or ``score``."""

    name = ""

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
    def _references(items: Sequence[Mapping]) -> list[str]:
        missing = [str(item.get("id", i)) for i, item in enumerate(items)
                   if not isinstance(item.get("reference"), str) or not item["reference"].strip()]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise EvaluatorError(f"bertscore-ref needs a non-empty `reference` on every item; missing on {shown}")
        return [item["reference"] for item in items]

    def compare(self, items):
        refs = self._references(items)
        pairs = [(item[side], ref) for item, ref in zip(items, refs) for side in ("answer_a", "answer_b")]
        f1 = [f for _, _, f in self.metric.raw_scores(pairs)]
        return [_prefer(f1[2 * i], f1[2 * i + 1]) for i in range(len(items))]

    def score(self, items, criterion):
        refs = self._references(items)
        return [f for _, _, f in self.metric.raw_scores([(item["response"], ref) for item, ref in zip(items, refs)])]


# name -> (factory, takes_argument); a factory is a callable or a lazy "module:attr" path
_REGISTRY: dict[str, tuple[str | Callable[..., Evaluator], bool]] = {
    "length": (Length, False),
    "bertscore-ref": (BERTScoreRef, False),
}


def register_evaluator(name: str, factory: str | Callable[..., Evaluator], *, takes_argument: bool = False) -> None:
    """Register ``factory`` under ``name``; with ``takes_argument`` it is asked for as ``name:<arg>``
    and called with that argument."""
    if not name or not isinstance(name, str) or ":" in name:
        raise EvaluatorError("an evaluator needs a non-empty name without ':'")
    _REGISTRY[name] = (factory, takes_argument)


def available_evaluators() -> list[str]:
    """Names as a user types them: ``geval:<argument>`` for those that take one."""
    return sorted(f"{name}:<argument>" if takes else name for name, (_, takes) in _REGISTRY.items())


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
    factory, takes = _REGISTRY[name]
    if takes and not argument:
        raise EvaluatorError(f"evaluator {name!r} needs an argument: {name}:<argument>")
    if not takes and colon:
        raise EvaluatorError(f"evaluator {name!r} takes no argument (got {spec!r}); available: {known}")
    return _resolve(factory)(argument) if takes else _resolve(factory)()
