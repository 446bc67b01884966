"""A judge model in the pairwise and debate roles, as evaluators of labelled pairs (lib/evaluators.py):
what its qualification in each role runs (apps/annotate/qualify.py), and what `metaeval pairs` can run.

- `pairwise:<judge>` (PairwiseJudge): the judge alone is asked which of two answers is better, once in
  each order, with the debate's round-0 prompt (lib/debate.initial_prompt), so a pairwise judge is asked
  exactly what a debate's judge is asked first. MT-Bench's swap rule decides: the answer it picks in
  both orders wins; a flip, or a tie in one order, is a tie; an unreadable reply leaves the pair
  undecided (counted wrong, never guessed).
- `debate:<judge>` (DebateRole): a debate in which the judge sits alone, as its two agents with their
  own sampling seeds (as a lone running judge sits in the site's debates); the consensus, or undecided.
  Plain `debate` is every running judge together (apps/oracle/debates.py DebateEvaluator).

Both report the judge's position consistency from the pairs asked in both orders (`pair_details()
["position"]`, lib/metaeval.position_bias), which the qualification keeps beside its figures.
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import async_to_sync
from django.conf import settings

from apps.chat.gateway import Gateway, GatewayError
from lib import debate as protocol
from lib import metaeval
from lib.evaluators import Evaluator

from .debates import (PAIR_VERDICT, DebateEvaluator, _sampling_seed, ask_judge, criterion_of, pair_workers,
                      prompt_fits, reply_budget)
from .geval import judge_model

log = logging.getLogger(__name__)

GOLD = {"a": protocol.FIRST, "b": protocol.SECOND, "tie": protocol.NEITHER}


def pair_seed(item) -> int:
    """The sampling seed of a labelled pair, from its id: a rerun asks the same."""
    return int.from_bytes(hashlib.sha256(str(item["id"]).encode()).digest()[:8], "big") >> 2


class PairwiseJudge(Evaluator):
    """`pairwise:<judge>`: the judge's verdict on each pair asked in both orders (the module's docs)."""

    name = "pairwise"

    def __init__(self, judge_name: str, gateway: Gateway | None = None, workers: int = 2):
        self.model = judge_model(judge_name)
        self.gateway, self.workers = gateway or Gateway(), pair_workers([self.model], workers)
        self.criterion, self.description = criterion_of(None)
        self.replies = self.unread = self.failed = self.unfit = 0
        self.measured: dict = {}
        self.fits = None

    @property
    def params(self) -> dict[str, str]:
        return {"judge": self.model.name, "endpoint_model": self.model.endpoint_model, "criterion": self.criterion,
                "prompt": "the debate's round 0 (lib/debate.initial_prompt), in both orders",
                "pairwise": "the answer picked in both orders wins; a flip or a tie in one order ties; "
                            "an unreadable reply: undecided",
                "temperature": str(settings.LLMCHAIN_DEBATE_TEMPERATURE), "max_tokens": str(reply_budget(self.model))}

    def pair_details(self) -> dict:
        found = {"replies": self.replies, "replies_without_verdict": self.unread, "pairs_failed": self.failed,
                 "pairs_failed_on_context": self.unfit, **self.measured}
        if self.unread * 2 > self.replies:
            found["warning"] = (f"UNUSABLE judge: {self.unread} of {self.replies} replies gave no readable verdict "
                                f"(recorded as unreadable, never guessed).")
        return found

    def compare(self, items) -> list[str | None]:
        self.fits = prompt_fits([self.model], self.gateway)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            held = list(pool.map(self._one, items))
        self.failed = sum(h["failed"] for h in held)
        self.unfit = sum(h["unfit"] for h in held)
        asked = [h["shown"] for h in held if h["shown"] is not None]
        self.replies = 2 * len(asked)
        self.unread = sum(v is None for pair in asked for v in pair)
        predictions = [(probs, GOLD[item["human"]]) for item, h in zip(items, held) for probs, _ in h["probabilities"]]
        masses = [mass for h in held for _, mass in h["probabilities"] if mass is not None]
        verdicts = [h["verdict"] for h in held]
        position = metaeval.position_bias(asked)
        report = metaeval.pairs_report(items, verdicts) if items else {}
        self.measured = {"position": position, "per_judge": {self.model.name: {
            "position": position,
            "swap_rule": {k: report.get(k) for k in ("accuracy_non_tie", "agreed_non_tie", "non_tie", "undecided")},
            "calibration": metaeval.expected_calibration_error(predictions),
            "mean_verdict_mass": round(sum(masses) / len(masses), 4) if masses else None}}}
        return verdicts

    def _one(self, item) -> dict:
        """One pair asked in both orders: the verdicts as the judge gave them (`shown`), the swap rule's
        verdict, and its verdict probabilities in the pair's numbering when its endpoint gave them."""
        held = {"verdict": None, "shown": None, "probabilities": [], "failed": False, "unfit": False}
        try:
            spec = protocol.Debate(criterion=self.criterion, criterion_description=self.description,
                                   scenario=str(item.get("category") or ""), question=item["question"],
                                   submission_1=item["answer_a"], submission_2=item["answer_b"],
                                   agents=(self.model.name, f"{self.model.name} #2"))
            prompts = [protocol.initial_prompt(spec, swapped=swapped) for swapped in (False, True)]
        except protocol.DebateError as exc:
            log.warning("pairwise judge %s: pair %s: %s", self.model.name, item["id"], exc)
            held["unfit"] = True
            return held
        if self.fits is not None and not all(self.fits(p) for p in prompts):
            log.warning("pairwise judge %s: pair %s does not fit its context", self.model.name, item["id"])
            held["unfit"] = True
            return held
        seed, shown, canonical = pair_seed(item), [], []
        try:
            for swapped, prompt in zip((False, True), prompts):
                answer = async_to_sync(ask_judge)(self.gateway, self.model, prompt,
                                                  _sampling_seed(seed, self.model.name, prompt))
                text = answer.text if isinstance(answer, protocol.Reply) else answer
                verdict = protocol.parse_verdict(text).verdict
                shown.append(verdict)
                canonical.append(protocol.to_canonical(verdict, swapped))
                if isinstance(answer, protocol.Reply) and answer.probabilities is not None:
                    held["probabilities"].append(({protocol.to_canonical(v, swapped): p
                                                   for v, p in answer.probabilities.items()}, answer.mass))
        except (GatewayError, TimeoutError) as exc:  # undecided, and said so
            log.warning("pairwise judge %s: pair %s: the judge failed: %s", self.model.name, item["id"],
                        getattr(exc, "detail", exc))
            held["failed"] = True
            return held
        held["shown"] = tuple(shown)
        held["verdict"] = PAIR_VERDICT[metaeval.swap_rule(*canonical)]
        return held


class DebateRole(DebateEvaluator):
    """`debate:<judge>`: a debate of the judge alone, sitting as two agents (the module's docs)."""

    def __init__(self, judge_name: str, gateway: Gateway | None = None, workers: int = 2):
        model = judge_model(judge_name)
        super().__init__(judges=[model, model], gateway=gateway, workers=workers)

    def pair_details(self) -> dict:
        found = super().pair_details()
        judged = (found.get("per_judge") or {}).get(self.judges[0].name)
        if judged:
            found["position"] = judged["position"]
        return found


def debate_evaluator(judge: str = "") -> DebateEvaluator:
    """`debate`: every running judge together; `debate:<judge>`: that judge alone."""
    return DebateRole(judge) if judge else DebateEvaluator()
