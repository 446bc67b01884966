"""Automatic answer metrics for the oracle: score(answer, reference) calibrated into [0, 1].

A metric is anything with

- ``name``: a short identifier, also the name it is registered under (``get_metric(m.name)``);
- ``params``: ``{str: str}`` describing exactly how the scores were computed (encoder, layer,
  baseline, package versions, ...), copied into every evidence record;
- ``score_pairs(pairs)``: for ``[(candidate, reference), ...]`` the calibrated scores, one float
  in [0, 1] per pair, in order.

The oracle computes ``Sa = mean_j score(answer, ref_j)`` (spec REPUTATION.md) from those.
Metrics are registered by name; the heavy ones (torch) are imported only when first asked for,
so importing this package stays cheap. Other metrics and LLM judges register the same way:

    register_metric("my-judge", "lib.metrics.my_judge:MyJudge")   # lazy "module:attr"
    register_metric("toy", lambda **opts: ToyMetric(**opts))        # or a callable

Pure domain code: no Django import here or in the modules of this package.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Metric", "MetricError", "available_metrics", "calibrate", "get_metric", "register_metric"]


class MetricError(ValueError):
    """An unknown metric or a metric that cannot be set up (missing model files, bad baseline)."""


@runtime_checkable
class Metric(Protocol):
    name: str

    @property
    def params(self) -> Mapping[str, str]: ...

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Calibrated scores in [0, 1] of (candidate, reference) pairs, in order."""
        ...


def calibrate(raw: float, baseline: float) -> float:
    """Baseline rescaling, then clipping: ``clip((raw - b) / (1 - b), 0, 1)``.

    ``b`` is the metric's mean raw score over pairs of unrelated texts, so unrelated texts land
    near 0 and identical texts (raw 1) at 1. A NaN raw score counts as 0.
    """
    if not 0 <= baseline < 1:
        raise MetricError(f"a baseline must lie in [0, 1), got {baseline!r}")
    if math.isnan(raw):
        return 0.0
    return min(1.0, max(0.0, (raw - baseline) / (1 - baseline)))


_REGISTRY: dict[str, str | Callable[..., Metric]] = {
    "bertscore": "lib.metrics.bertscore:BERTScore",
}


def register_metric(name: str, factory: str | Callable[..., Metric]) -> None:
    """Register ``factory`` (a callable, or a lazy ``"module:attr"`` path) under ``name``."""
    if not name or not isinstance(name, str):
        raise MetricError("a metric needs a non-empty name")
    _REGISTRY[name] = factory


def available_metrics() -> list[str]:
    return sorted(_REGISTRY)


def _resolve(factory: str | Callable[..., Metric]) -> Callable[..., Metric]:
    if callable(factory):
        return factory
    module, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module), attr)


def get_metric(name: str, **options) -> Metric:
    """A new instance of the metric registered as ``name`` (options go to its constructor).

    Instances are cheap: a model-based metric loads its model on first use and shares it with
    the other instances in the process.
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise MetricError(f"unknown metric {name!r}; known: {', '.join(available_metrics())}") from None
    return _resolve(factory)(**options)
