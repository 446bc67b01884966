"""What every benchmark shares: its error, how it reports a line, latency percentiles, and how it
starts `manage.py` in a child process (the submitter, the fill, the load generator)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

Out = Callable[[str], None]  # where a bench writes its progress and table lines


class BenchError(RuntimeError):
    """The bench could not run or cannot give figures (the command reports it and exits non-zero)."""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def debug_off_env() -> dict[str, str]:
    """The environment of a benchmark's child process: DEBUG off as in production (no query logging),
    but plain HTTP, a throwaway chain and this process's key secrets, as the deployment check
    (ops/checks.py) admits."""
    return {"DEBUG": "0", "LLMCHAIN_PROFILE": "development", "LLMCHAIN_DEV_CHAIN": "1",
            "SECRET_KEY": "bench-only-" + "k" * 50, "LLMCHAIN_KEY_SECRETS": ",".join(settings.LLMCHAIN_KEY_SECRETS)}


def manage_py() -> list[str]:
    """The command line that runs this project's manage.py with this interpreter."""
    return [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
