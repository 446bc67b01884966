"""The GGUF is converted once; later loads come from the cache on disk."""

from __future__ import annotations

import pytest

from modelserver import loading
from modelserver.loading import load_model
from modelserver.sampling import SamplingParams, seeded_rng

pytestmark = pytest.mark.slow


def greedy(model, text: str) -> str:
    prompt = model.prompt_ids([{"role": "user", "content": text}])
    return "".join(p.text for p in model.generate(prompt, SamplingParams(max_tokens=8, temperature=0),
                                                  seeded_rng(0)))


def test_a_missing_cache_is_rebuilt_and_then_reused(tmp_path, monkeypatch):
    cache = tmp_path / "smollm2"
    converted = load_model(cache, threads=1)
    assert (cache / loading.CACHE_MARKER).is_file()
    assert not [p for p in tmp_path.iterdir() if p != cache]  # no staging directory left behind

    def no_conversion(*args):
        raise AssertionError("converted again although the cache is there")

    monkeypatch.setattr(loading, "_convert", no_conversion)
    cached = load_model(cache, threads=1)
    assert greedy(cached, "Name a colour.") == greedy(converted, "Name a colour.")
