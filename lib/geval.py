"""G-Eval (Liu et al. 2023; Cavaliere et al.'s G-Eval-Dialogue): an LLM judge fills in a form with a 1-5 score,
after evaluation steps it wrote itself (auto-CoT) once per criterion. Pure: no Django.

The score is G-Eval's probability-weighted one, ``score = sum_s p(s) * s`` over s = 1..5:

- from the judge's ``top_logprobs`` at the score position when the endpoint returns them (GPT-3.5 in
  the paper). The score position is the first generated token that *is* a digit 1-5 (spaces
  stripped: " 3" counts), not counting the ends of an echoed scale ("Overall (1-5): 4" scores at
  the 4); failing that, the first position whose top_logprobs hold such a digit.
  p is normalised over the five digits; ``digit_mass`` is the unnormalised sum, the probability
  the judge put on giving a score at all;
- with structured output (``structured``: the endpoint honours a JSON schema), the form is
  {"score": 1..5} under constrained decoding, and p is read from the logprobs at the score
  position the same way, normalised over the five digits; such a judgement is always usable (the
  constraint guarantees a score), and ``digit_mass`` stays the judge's own diagnostic: the
  probability it put on the digits there before the constraint;
- from ``n`` samples when it does not (GPT-4 in the paper, Llama 3 behind GPT4All in G-Eval-Dialogue):
  p(s) = occurrences(s) / readable samples, ``digit_mass`` = readable samples / samples.

A judge whose ``digit_mass`` on an item is below MIN_DIGIT_MASS has not answered the form: the
item gets no score (None) and is counted as unusable, never turned into a number.

The judge is reached through a transport: anything with ``complete(messages, **params) -> dict``
returning an OpenAI chat-completion object (``choices[i].message.content`` and, when asked for,
``choices[i].logprobs.content[j].top_logprobs``). It raises JudgeError (RequestRefused for a
request the endpoint will never accept).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["CRITERIA", "Criterion", "GEvalJudge", "Judgement", "JudgeError", "MAX_STEPS", "MIN_DIGIT_MASS",
           "RequestRefused", "SAMPLES", "form_prompt", "read_score", "score_from_logprobs", "score_from_samples",
           "sha256", "steps_prompt", "summary", "trim_steps"]

SCALE = (1, 2, 3, 4, 5)
# Below half the mass on the digits, the judge mostly said something other than a score: its
# weighted score would be a renormalised sliver of its beliefs, not its judgement.
MIN_DIGIT_MASS = 0.5
SAMPLES = 20  # G-Eval-Dialogue §4.5: n = 20 scores per item when logprobs are not available
TOP_LOGPROBS = 20  # the most OpenAI (and the built-in server) return
FORM_MAX_TOKENS = 12  # enough for "Overall Quality (1-5): 4", and for {"score": 4}
# The form as structured output, where the judge's endpoint honours a JSON schema.
SCORE_FORMAT = {"type": "json_schema", "json_schema": {"name": "score", "strict": True, "schema": {
    "type": "object", "properties": {"score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}, "required": ["score"],
    "additionalProperties": False}}}
STEPS_MAX_TOKENS = 256
# The steps prompt asks for at most 4 steps, one per line (G-Eval-Dialogue §4.1). A small judge may ramble
# on past them; what it adds is not steps, and pasted into every form it would lengthen each prompt
# and pull the judge away from the score, so only the first MAX_STEPS non-empty lines are kept.
MAX_STEPS = 4


class JudgeError(RuntimeError):
    """The judge's endpoint failed or answered something that is not a chat completion."""


class RequestRefused(JudgeError):
    """The endpoint refused the request as such (e.g. an ``n`` above its cap)."""


class Transport(Protocol):
    def complete(self, messages: list[dict], **params) -> dict: ...


@dataclass(frozen=True)
class Criterion:
    """What the judge rates, on 1..5. ``inputs``: ``dialogue`` (history + next response; the
    knowledge fact too when ``uses_fact``) or ``qa`` (a question and an answer)."""

    name: str
    label: str
    definition: str
    inputs: str = "dialogue"
    uses_fact: bool = False

    def __post_init__(self):
        if self.inputs not in ("dialogue", "qa"):
            raise ValueError(f"criterion inputs must be 'dialogue' or 'qa', not {self.inputs!r}")


def _criteria(*items: Criterion) -> dict[str, Criterion]:
    return {c.name: c for c in items}


# G-Eval-Dialogue §3.3: the Topical-Chat USR dimensions (G-Eval reports naturalness, coherence,
# engagingness, groundedness; the data adds understandability) and overall. ScaleEval §6: the four
# ScaleEval criteria over a question and an answer. Definitions in this project's words.
CRITERIA: dict[str, Criterion] = _criteria(
    Criterion("understandability", "Understandability",
              "Can the response be understood on its own terms, as a sensible next turn of this conversation? "
              "1: it makes no sense; 5: its meaning is entirely clear."),
    Criterion("naturalness", "Naturalness",
              "Does the response read like something a person would say at this point of the conversation? "
              "1: stilted, robotic or repetitive; 5: fluent and human."),
    Criterion("coherence", "Coherence",
              "Does the response follow from what was said before, staying on topic and consistent with it? "
              "1: unrelated or contradictory; 5: a fitting continuation."),
    Criterion("engagingness", "Engagingness",
              "Is the response interesting, does it invite the other person to go on talking? "
              "1: dull or a conversation stopper; 5: lively and engaging."),
    Criterion("groundedness", "Groundedness",
              "Does the response make use of the given fact, correctly? "
              "1: ignores or contradicts the fact; 5: uses it accurately and aptly.", uses_fact=True),
    Criterion("overall", "Overall Quality",
              "How good is the response as the next turn of this conversation, all things considered: "
              "sensible, natural, on topic, engaging and informative? 1: very poor; 5: excellent."),
    Criterion("helpfulness", "Helpfulness",
              "Does the answer give the asker what they need: relevant, accurate, complete enough to act on? "
              "1: of no use; 5: fully meets the request.", inputs="qa"),
    Criterion("interpretability", "Interpretability",
              "Can a reader follow the answer, its code or explanation: clear structure, named steps, "
              "nothing left unexplained? 1: opaque; 5: easy to follow and check.", inputs="qa"),
    Criterion("reasoning", "Reasoning",
              "Is the answer reached by sound, explicit steps that lead to a correct result? "
              "1: wrong or unjustified; 5: correct, every step valid.", inputs="qa"),
    Criterion("creativity", "Creativity",
              "Is the answer original and imaginative while still doing what was asked? "
              "1: generic or off the brief; 5: fresh, vivid and on the brief.", inputs="qa"),
)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- prompts (structure after G-Eval-Dialogue §4.1-4.2, wording this project's) ---------------------------

def _subject(c: Criterion) -> str:
    return "the next response in a conversation between two people" if c.inputs == "dialogue" \
        else "an answer to a user's question"


def steps_prompt(c: Criterion) -> str:
    """The auto-CoT prompt: the judge writes the evaluation steps for ``c``, once."""
    return (f"You are going to rate {_subject(c)} on one criterion.\n\n"
            f"Criterion:\n{c.label} (1-5): {c.definition}\n\n"
            f"Task: write only the steps an evaluator should follow to rate the {c.label.lower()} of "
            f"{'the response' if c.inputs == 'dialogue' else 'the answer'}, at most 4 steps, one per line. "
            "Keep each step short and about this criterion only. Plain text: no Markdown, no headings, "
            "no introduction and no conclusion.\n\nSteps:")


def trim_steps(text: str) -> str:
    """The judge's first MAX_STEPS non-empty lines, stripped (see MAX_STEPS)."""
    return "\n".join([line.strip() for line in text.splitlines() if line.strip()][:MAX_STEPS])


def _dialogue_lines(history: str) -> str:
    turns = [t.strip() for t in history.strip().split("\n") if t.strip()]
    return "\n".join(f"{'AB'[i % 2]}: {t}" for i, t in enumerate(turns))


def form_prompt(c: Criterion, steps: str, item: Mapping) -> str:
    """The form-filling prompt for one item: ``question`` (the dialogue history, or the user's
    question), ``response``, and ``reference`` (the knowledge fact) for a criterion that uses it."""
    if c.uses_fact and not str(item.get("reference") or "").strip():
        raise ValueError(f"{c.name} needs the knowledge fact (`reference`) of every item")
    if c.inputs == "dialogue":
        intro = ("You will be shown a conversation between two people, one turn per line, and then one "
                 "candidate for the next turn.")
        body = f"Conversation:\n{_dialogue_lines(str(item.get('question') or ''))}\n\n"
        if c.uses_fact:
            body += f"Fact the next turn should use:\n{item['reference'].strip()}\n\n"
        body += f"Response:\n{str(item['response']).strip()}\n\n"
    else:
        intro = "You will be shown a user's question and one answer to it."
        body = f"Question:\n{str(item.get('question') or '').strip()}\n\nAnswer:\n{str(item['response']).strip()}\n\n"
    return (f"{intro}\n\nRate it on one criterion. Reply with the score only, a whole number from 1 to 5.\n\n"
            f"Evaluation criterion:\n{c.label} (1-5): {c.definition}\n\n"
            f"Evaluation steps:\n{steps.strip()}\n\n{body}"
            f"Evaluation form (score only):\n{c.label} (1-5):")


# --- scores ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judgement:
    """One item's G-Eval result. ``score`` is None when the judge was unusable on it."""

    score: float | None
    digit_mass: float
    probabilities: dict[int, float] = field(default_factory=dict)  # normalised over 1..5
    method: str = "logprobs"  # or "samples"

    @property
    def usable(self) -> bool:
        return self.score is not None


def _digit(token: str) -> int | None:
    t = token.strip()
    return int(t) if len(t) == 1 and t in "12345" else None


def _weighted(probs: dict[int, float], mass: float, method: str, threshold: float) -> Judgement:
    if mass <= 0:
        return Judgement(None, 0.0, {}, method)
    normal = {s: probs.get(s, 0.0) / mass for s in SCALE}
    score = sum(p * s for s, p in normal.items())
    return Judgement(score if mass >= threshold else None, mass, normal, method)


def _in_range(tokens: list[str], i: int) -> bool:
    """Whether the digit at ``i`` is an end of an echoed scale, "(1-5)", rather than a score."""
    before, after = tokens[i - 1] if i else "", tokens[i + 1] if i + 1 < len(tokens) else ""
    return after.startswith(("-", "–")) or before.endswith(("-", "–"))


def score_from_logprobs(content: Sequence[Mapping], threshold: float = MIN_DIGIT_MASS) -> Judgement:
    """G-Eval's score from one choice's ``logprobs.content`` (see the module docstring)."""
    tokens = [str(e.get("token", "")).strip() for e in content]
    position = next((e for i, e in enumerate(content) if _digit(tokens[i]) is not None
                     and not _in_range(tokens, i)), None)
    if position is None:
        position = next((e for e in content if any(_digit(str(t.get("token", ""))) is not None
                                                   for t in e.get("top_logprobs") or [])), None)
    if position is None:
        return Judgement(None, 0.0, {}, "logprobs")
    probs: dict[int, float] = {}
    for top in position.get("top_logprobs") or []:
        s = _digit(str(top.get("token", "")))
        if s is not None:  # "3" and " 3" are both a three
            probs[s] = probs.get(s, 0.0) + math.exp(float(top["logprob"]))
    return _weighted(probs, sum(probs.values()), "logprobs", threshold)


_RANGE = re.compile(r"\(?\s*1\s*(?:-|–|to)\s*5\s*\)?")  # the scale echoed back: "(1-5)"
_SCORE = re.compile(r"(?<![\d.])([1-5])(?![\d])")


def read_score(text: str) -> int | None:
    """The first score 1..5 in a sampled reply, ignoring an echoed "(1-5)"."""
    found = _SCORE.search(_RANGE.sub(" ", text or ""))
    return int(found.group(1)) if found else None


def score_from_samples(texts: Sequence[str], threshold: float = MIN_DIGIT_MASS) -> Judgement:
    """G-Eval's score from sampled replies: p(s) = count(s) / readable replies."""
    scores = [s for s in map(read_score, texts) if s is not None]
    if not texts:
        return Judgement(None, 0.0, {}, "samples")
    counts = {s: scores.count(s) / len(texts) for s in SCALE if s in scores}
    return _weighted(counts, len(scores) / len(texts), "samples", threshold)


# --- the judge -------------------------------------------------------------------------------------

def _choices(reply: Mapping) -> list[Mapping]:
    choices = reply.get("choices") if isinstance(reply, Mapping) else None
    if not isinstance(choices, list) or not choices:
        raise JudgeError("the judge's reply has no choices")
    return choices


def _text(choice: Mapping) -> str:
    return str((choice.get("message") or {}).get("content") or "")


class GEvalJudge:
    """G-Eval with one judge model behind ``transport``.

    ``method``: ``auto`` (logprobs, and samples from then on once the endpoint turns out not to
    return them), ``logprobs`` or ``samples``. ``samples``: n for the fallback, asked in batches of
    at most ``max_n`` (halved whenever the endpoint refuses n). ``workers``: items judged at once.
    """

    def __init__(self, transport: Transport, *, method: str = "auto", samples: int = SAMPLES, max_n: int = SAMPLES,
                 threshold: float = MIN_DIGIT_MASS, workers: int = 3, seed: int = 0):
        if method not in ("auto", "logprobs", "samples"):
            raise ValueError(f"unknown G-Eval method {method!r}")
        self.transport, self.method, self.samples, self.max_n = transport, method, samples, max(1, max_n)
        self.threshold, self.workers, self.seed = threshold, max(1, workers), seed
        self._structured: bool | None = None

    @property
    def params(self) -> dict[str, str]:
        return {"method": self.method, "samples": str(self.samples), "top_logprobs": str(TOP_LOGPROBS),
                "min_digit_mass": str(self.threshold), "seed": str(self.seed)}

    def write_steps(self, c: Criterion) -> str:
        """Auto-CoT: the judge's evaluation steps for ``c`` (greedy, so the same judge writes the same steps)."""
        reply = self.transport.complete([{"role": "user", "content": steps_prompt(c)}], temperature=0,
                                        max_tokens=STEPS_MAX_TOKENS, seed=self.seed)
        steps = trim_steps(_text(_choices(reply)[0]))
        if not steps:
            raise JudgeError(f"the judge wrote no evaluation steps for {c.name}")
        return steps

    @property
    def structured(self) -> bool:
        """Whether the judge's endpoint honours a JSON-schema response_format (the transport says, by
        its ``structured()``; a transport without one does not)."""
        if self._structured is None:
            probe = getattr(self.transport, "structured", None)
            self._structured = bool(probe()) if probe is not None else False
        return self._structured

    def _judge_structured(self, messages: list[dict]) -> Judgement | None:
        """The form filled as {"score": 1..5} under constrained decoding, weighted by the logprobs at
        the score position, normalised over the five scores: usable whatever the judge's digit mass,
        which stays recorded as its own diagnostic (the probability it put on a score unconstrained).
        None when the reply ignored the schema or came without logprobs (the other methods then)."""
        reply = self.transport.complete(messages, temperature=0, max_tokens=FORM_MAX_TOKENS, logprobs=True,
                                        top_logprobs=TOP_LOGPROBS, seed=self.seed, response_format=SCORE_FORMAT)
        choice = _choices(reply)[0]
        try:
            form = json.loads(_text(choice))
        except ValueError:
            return None
        if not isinstance(form, dict) or form.get("score") not in SCALE or isinstance(form.get("score"), bool):
            return None
        content = ((choice.get("logprobs") or {}).get("content")) or []
        found = score_from_logprobs(content, threshold=0.0)
        if found.score is None:
            return None
        return Judgement(found.score, found.digit_mass, found.probabilities, "structured")

    def judge(self, c: Criterion, steps: str, item: Mapping) -> Judgement:
        messages = [{"role": "user", "content": form_prompt(c, steps, item)}]
        if self.method != "samples" and self.structured:
            try:
                found = self._judge_structured(messages)
            except RequestRefused:
                found = None
            if found is not None:
                return found
        if self.method != "samples":
            try:
                reply = self.transport.complete(messages, temperature=0, max_tokens=FORM_MAX_TOKENS, logprobs=True,
                                                top_logprobs=TOP_LOGPROBS, seed=self.seed)
            except RequestRefused:  # some endpoints reject the logprobs parameters outright
                if self.method == "logprobs":
                    raise
                reply = {"choices": [{}]}
            content = ((_choices(reply)[0].get("logprobs") or {}).get("content")) or []
            if any(e.get("top_logprobs") for e in content):
                return score_from_logprobs(content, self.threshold)
            if self.method == "logprobs":
                raise JudgeError("the judge's endpoint returned no top_logprobs")
            self.method = "samples"  # this endpoint does not give them: do not ask again
        return score_from_samples(self._sample(messages), self.threshold)

    def _sample(self, messages: list[dict]) -> list[str]:
        texts: list[str] = []
        seed = self.seed + int(sha256(messages[0]["content"])[:8], 16)  # reproducible per prompt
        while len(texts) < self.samples:
            n = min(self.max_n, self.samples - len(texts))
            try:
                reply = self.transport.complete(messages, temperature=1, top_p=1, max_tokens=FORM_MAX_TOKENS, n=n,
                                                seed=seed + len(texts))
            except RequestRefused:
                if n == 1:
                    raise
                self.max_n = max(1, n // 2)
                continue
            texts += [_text(choice) for choice in _choices(reply)][:n]
        return texts

    def judge_all(self, c: Criterion, steps: str, items: Sequence[Mapping],
                  progress: Callable[[int], None] | None = None) -> list[Judgement]:
        """Judgements of ``items`` in order, ``workers`` at a time. A judgement depends only on its form
        prompt (greedy, or samples seeded by the prompt), so items with the same prompt (one answer in
        several pairs, say) are judged once and share the judgement."""
        prompts = [form_prompt(c, steps, item) for item in items]
        by_prompt = dict(zip(prompts, items))  # one item per distinct prompt, prompts in first-seen order
        distinct = list(by_prompt.values())
        if self.method == "auto" and distinct:  # settle the method on one item before fanning out
            first = [self.judge(c, steps, distinct[0])]
            rest = distinct[1:]
        else:
            first, rest = [], distinct
        with ThreadPoolExecutor(self.workers) as pool:
            found = dict(zip(by_prompt, first + list(pool.map(lambda item: self.judge(c, steps, item), rest))))
        out = [found[prompt] for prompt in prompts]
        if progress:
            progress(len(out))
        return out


def summary(judgements: Sequence[Judgement], threshold: float = MIN_DIGIT_MASS) -> dict:
    """What the report says about the judge: scored and unusable items, mean digit mass, method."""
    masses = [j.digit_mass for j in judgements]
    return {"scored": sum(j.usable for j in judgements), "unusable": sum(not j.usable for j in judgements),
            "mean_digit_mass": round(sum(masses) / len(masses), 4) if masses else None,
            "min_digit_mass": round(min(masses), 4) if masses else None,
            "methods": sorted({j.method for j in judgements}), "threshold": threshold,
            "structured": sum(j.method == "structured" for j in judgements)}
