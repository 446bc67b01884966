"""Peer self-evaluation (Hai Ye's method): models judge each other's answers, no human and no gold answer.

For a prompt x_t, a pair of models (f_i, f_j) is judged by the answer o_k of a third model f_k:

    f_i wins if s(o_i, o_k) > s(o_j, o_k), f_j wins if it is smaller, a tie if they are equal,

where s is BERTScore measuring how much of the judge's answer the contestant's answer covers: the
recall with o_k as the reference, which is the same number as the precision with o_k as the
hypothesis (both are the mean, over o_k's tokens, of the best cosine match among o_i's tokens), so
the contestant's length does not count. Every prompt, every unordered pair and every one of the
N - 2 other models as judge gives M * C(N, 2) * (N - 2) comparisons; Elo ratings rank the models.

Choices the seed leaves to its code (github.com/oceanypt/LLM-self-eval, ``self_evaluation.py``):
Elo with K = 4, scale 400, base 10, initial 1000, over the comparisons in a shuffled order (here a
``random.Random(seed)`` shuffle, so a run is reproducible); optionally the median over bootstrap
resamples, as that script reports. A tie is exact equality of the two scores, as the seed writes it
(``tie=`` widens it). The two-round variant re-runs the comparisons among the top models of the
first round only (contestants and judges), so weak models no longer judge strong ones.

Each distinct answer text is encoded once; one greedy match of (o_i, o_k) gives both s(o_i, o_k)
(its recall) and s(o_k, o_i) (its precision).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Protocol

from lib.evaluators import Evaluator
from lib.pairwise import Outcome, Record, elo, records

ELO_K = 4
ELO_INITIAL = 1000
ELO_SCALE = 400
DEFAULT_SEED = 0
TEXTS_PER_ENCODE = 2048  # one encoder sweep covers this many answers (whole prompts), bounding memory
SUFFIXES = (".txt", ".jsonl")

Answers = Mapping[str, Sequence[str | None]]


class SelfEvalError(ValueError):
    """Answers that cannot be evaluated: too few models, lists of different lengths, a bad folder."""


class Scorer(Protocol):
    """What the evaluation needs of a BERTScore (``lib.metrics.bertscore.BERTScore`` is one):
    ``encode(texts)`` -> {text_key(t): encoding}, every distinct text through the encoder once;
    ``greedy_match(cand, ref)`` -> (P, R, F1) of two encodings."""

    def encode(self, texts: Sequence[str]) -> Mapping[str, Any]: ...

    @staticmethod
    def text_key(text: str) -> str: ...

    @staticmethod
    def greedy_match(cand: Any, ref: Any) -> tuple[float, float, float]: ...


@dataclass(frozen=True)
class Round:
    models: tuple[str, ...]
    outcomes: list[Outcome]
    ratings: dict[str, float]
    records: dict[str, Record]

    @property
    def ranking(self) -> list[str]:
        return sorted(self.models, key=lambda m: (-self.ratings[m], m))


@dataclass(frozen=True)
class SelfEvaluation:
    """The rounds (one, or two with the top models re-run) over ``prompts`` prompts."""

    prompts: int
    rounds: list[Round]
    encoded_texts: int
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> Round:
        return self.rounds[-1]

    @property
    def ranking(self) -> list[str]:
        """The last round's order, then the models it left out in the first round's order."""
        top = self.final.ranking
        return top + [m for m in self.rounds[0].ranking if m not in top]

    def as_dict(self) -> dict[str, Any]:
        out = {**_round_dict(self.final), "rounds": len(self.rounds), "prompts": self.prompts,
               "ranking": self.ranking, "encoded_texts": self.encoded_texts, "params": self.params}
        if len(self.rounds) > 1:
            out["first_round"] = _round_dict(self.rounds[0])
        return out


def _round_dict(r: Round) -> dict[str, Any]:
    return {"ratings": {m: round(r.ratings[m], 2) for m in r.ranking},
            "records": {m: {"wins": r.records[m].wins, "ties": r.records[m].ties, "losses": r.records[m].losses}
                        for m in r.ranking},
            "comparisons": len(r.outcomes)}


# --- the overlap scores ----------------------------------------------------------------------------

def overlap_scores(answers: Answers, scorer: Scorer) -> tuple[dict[tuple[int, str, str], float], int]:
    """{(prompt, model, judge): s(o_model, o_judge)} for every two models that both answered a
    prompt, and how many distinct texts were handed to the encoder."""
    models = sorted(answers)
    n = _prompt_count(answers)
    scores: dict[tuple[int, str, str], float] = {}
    encoded = 0
    for chunk in _chunks(answers, models, n):
        texts = list(dict.fromkeys(a for t in chunk for m in models if (a := answers[m][t]) is not None))
        encodings = scorer.encode(texts)
        encoded += len(texts)
        for t in chunk:
            present = [m for m in models if answers[m][t] is not None]
            enc = {m: encodings[scorer.text_key(answers[m][t])] for m in present}
            for a, b in combinations(present, 2):
                p, r, _ = scorer.greedy_match(enc[a], enc[b])
                scores[t, a, b] = r  # b's tokens covered by a: b judging a
                scores[t, b, a] = p  # a's tokens covered by b: a judging b
    return scores, encoded


def _chunks(answers: Answers, models: list[str], n: int):
    chunk, size = [], 0
    for t in range(n):
        chunk.append(t)
        size += sum(answers[m][t] is not None for m in models)
        if size >= TEXTS_PER_ENCODE:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


# --- comparisons and ratings -----------------------------------------------------------------------

def compare(scores: Mapping[tuple[int, str, str], float], models: Sequence[str], prompts: int, *,
            tie: float = 0.0) -> list[Outcome]:
    """One Outcome(i, j, 1 | 0.5 | 0) per prompt, unordered pair (i, j) and judge k of ``models``
    (i, j, k distinct, all three answered), in (prompt, pair, judge) order."""
    models = sorted(models)
    out = []
    for t in range(prompts):
        for i, j in combinations(models, 2):
            for k in models:
                if k in (i, j):
                    continue
                si, sj = scores.get((t, i, k)), scores.get((t, j, k))
                if si is None or sj is None:
                    continue  # one of the three did not answer this prompt
                out.append(Outcome(i, j, 0.5 if abs(si - sj) <= tie else 1.0 if si > sj else 0.0))
    return out


def rate(outcomes: Sequence[Outcome], models: Sequence[str], *, seed: int = DEFAULT_SEED, bootstrap: int = 0,
         k: float = ELO_K) -> dict[str, float]:
    """Elo over the outcomes shuffled by ``random.Random(seed)``; with ``bootstrap`` > 0 the median
    rating over that many resamples (with replacement) of the outcomes instead, as the seed's script."""
    rng = random.Random(seed)

    def run(order: Sequence[Outcome]) -> dict[str, float]:
        return elo(order, k=k, initial=ELO_INITIAL, scale=ELO_SCALE, players=tuple(models))

    if bootstrap <= 0:
        shuffled = list(outcomes)
        rng.shuffle(shuffled)
        return run(shuffled)
    samples = [run(rng.choices(outcomes, k=len(outcomes))) for _ in range(bootstrap)]
    return {m: statistics.median(s[m] for s in samples) for m in models}


def self_evaluate(answers: Answers, scorer: Scorer, *, rounds: int = 1, top: int | None = None,
                  seed: int = DEFAULT_SEED, bootstrap: int = 0, tie: float = 0.0) -> SelfEvaluation:
    """The seed's evaluation of ``answers[model][prompt]`` (None: no answer); with ``rounds=2`` it
    is re-run among the ``top`` best models of the first round (default: the better half, at least 3)."""
    models = sorted(answers)
    if len(models) < 3:
        raise SelfEvalError(f"the self-evaluation needs at least 3 models (two contestants and a judge), "
                            f"got {len(models)}")
    if rounds not in (1, 2):
        raise SelfEvalError(f"rounds must be 1 or 2, got {rounds}")
    n = _prompt_count(answers)
    if top is None:
        top = max(3, math.ceil(len(models) / 2))
    if rounds == 2 and not 3 <= top <= len(models):
        raise SelfEvalError(f"the second round needs between 3 and {len(models)} top models, got {top}")
    scores, encoded = overlap_scores(answers, scorer)
    done: list[Round] = []
    playing = models
    for _ in range(rounds):
        outcomes = compare(scores, playing, n, tie=tie)
        ratings = rate(outcomes, playing, seed=seed, bootstrap=bootstrap)
        recs = records(outcomes)
        done.append(Round(tuple(playing), outcomes, ratings, {m: recs.get(m, Record(0, 0, 0)) for m in playing}))
        playing = sorted(done[-1].ranking[:top])
    params = {"elo_k": ELO_K, "elo_initial": ELO_INITIAL, "elo_scale": ELO_SCALE, "seed": seed,
              "bootstrap": bootstrap, "tie": tie, "score": "BERTScore recall with the judge as reference"}
    if rounds == 2:
        params["top"] = top
    return SelfEvaluation(n, done, encoded, params)


def _prompt_count(answers: Answers) -> int:
    lengths = {m: len(a) for m, a in answers.items()}
    if len(set(lengths.values())) > 1:
        raise SelfEvalError("every model needs one answer per prompt: " +
                            ", ".join(f"{m} has {n}" for m, n in sorted(lengths.items())))
    return next(iter(lengths.values()), 0)


# --- the seed's folder format ----------------------------------------------------------------------

def read_responses(folder: str | Path) -> dict[str, list[str | None]]:
    """One file per model in ``folder``, one response per line, as the seed's script reads them.

    The model's name is the file name without a ``.txt`` or ``.jsonl`` suffix (``gpt-3.5-turbo``
    keeps its dots); hidden files and sub-folders are skipped. A plain file holds one response per
    line, the two characters ``\\n`` standing for a line break (as in the seed's example responses);
    a ``.jsonl`` file holds one JSON object per line with the response under ``"response"`` or
    ``"text"`` (null or a blank line: no answer). Every file must have as many lines as the others."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SelfEvalError(f"{folder} is not a folder")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    answers: dict[str, list[str | None]] = {}
    sources: dict[str, str] = {}
    for path in files:
        name = next((path.name[:-len(s)] for s in SUFFIXES if path.name.endswith(s) and len(path.name) > len(s)),
                    path.name)
        if name in answers:
            raise SelfEvalError(f"{sources[name]} and {path.name} both hold model {name}")
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise SelfEvalError(f"cannot read {path.name}: {exc}") from exc
        if lines and lines[-1] == "":
            lines.pop()  # the final newline ends the last line, it does not start a new one
        lines = [line.removesuffix("\r") for line in lines]
        answers[name] = _jsonl(path.name, lines) if path.name.endswith(".jsonl") else \
            [line.replace("\\n", "\n") for line in lines]
        sources[name] = path.name
    if not answers:
        raise SelfEvalError(f"no response files in {folder}")
    counts = {sources[m]: len(a) for m, a in answers.items()}
    if len(set(counts.values())) > 1:
        raise SelfEvalError("the response files must have one line per prompt each, but "
                            + ", ".join(f"{f} has {n}" for f, n in sorted(counts.items())))
    return answers


def _jsonl(name: str, lines: list[str]) -> list[str | None]:
    out: list[str | None] = []
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            out.append(None)
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise SelfEvalError(f"{name}, line {no}: not JSON ({exc})") from None
        text = row.get("response", row.get("text")) if isinstance(row, dict) else 0
        if not (text is None or isinstance(text, str)) or not {"response", "text"} & set(row or ()):
            raise SelfEvalError(f'{name}, line {no}: expected an object with a "response" or "text" string')
        out.append(text)
    return out


# --- as a pairwise evaluator for meta-evaluation (metaeval pairs --evaluator selfeval) -----------

class PeerJudge(Evaluator):
    """The peer self-evaluation's comparison as a verdict on labelled pairs: the other answers to the same question
    in the file (from its other pairs; one per model when the pairs name their models, else one per
    distinct text) each judge the pair, as in ``compare``; the verdict is the majority of their
    votes ('tie' when as many prefer a as b). A question with no third answer is undecided (None).
    Every distinct text is encoded once."""

    name = "selfeval"

    def __init__(self, scorer: Scorer | None = None):
        self._scorer = scorer

    @property
    def scorer(self) -> Scorer:
        if self._scorer is None:
            from lib.metrics.bertscore import BERTScore

            self._scorer = BERTScore()
        return self._scorer

    @property
    def params(self) -> dict[str, str]:
        return {"judges": "the other answers to the same question in the file",
                "score": "BERTScore recall against the judge's answer", "verdict": "majority of the judges"}

    def compare(self, items: Sequence[Mapping]) -> list[str | None]:
        pool: dict[str, dict[str, str]] = {}  # question -> {who: text}
        for item in items:
            answers = pool.setdefault(item["question"], {})
            for side in ("a", "b"):
                text = item[f"answer_{side}"]
                answers.setdefault(str(item.get(f"model_{side}") or f"text:{text}"), text)
        # a model may answer one question differently in two pairs (PandaLM has such): every pair's own
        # texts are encoded too, not only the one the pool keeps per model
        texts = list(dict.fromkeys([*(t for answers in pool.values() for t in answers.values()),
                                    *(item[f"answer_{side}"] for item in items for side in ("a", "b"))]))
        enc = self.scorer.encode(texts)
        key = self.scorer.text_key
        verdicts = []
        for item in items:
            a, b = item["answer_a"], item["answer_b"]
            contestants = {str(item.get("model_a") or f"text:{a}"), str(item.get("model_b") or f"text:{b}")}
            judges = [t for who, t in pool[item["question"]].items() if who not in contestants and t not in (a, b)]
            votes = 0
            for judge in judges:
                s_a = self.scorer.greedy_match(enc[key(a)], enc[key(judge)])[1]
                s_b = self.scorer.greedy_match(enc[key(b)], enc[key(judge)])[1]
                votes += (s_a > s_b) - (s_b > s_a)
            verdicts.append(None if not judges else "a" if votes > 0 else "b" if votes < 0 else "tie")
        return verdicts
