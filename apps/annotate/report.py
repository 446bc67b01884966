"""Meta-evaluation of the debates against the experts (ScaleEval §3.3, §6, §7): per scenario and
criterion, how often each single judge and the debate agree with the experts' verdicts.

The same `debates_report()` serves the page (views.report) and `manage.py metaeval debates`.

- Gold G: the majority of the ExpertVerdicts given on a debate's queue item (any status: an
  answer counts as soon as it is given). A tie among the experts gives no gold; the item is left
  out and counted as `gold_ties`.
- Single judge: each agent by name, on its own: its round-0 verdict, given before it saw anyone
  (seed §4.1 eq. 4; §7 compares "the evaluations made independently by each LLM evaluator").
  Turns of agents with no known name are left out. An unreadable verdict counts as a
  disagreement and is reported as `unparseable`.
- The debate: its consensus. A debate that ended in disagreement has no verdict of its own
  (that is why it went to the experts), so the debate is scored only on gold items where it
  reached consensus; `coverage` says on how many of the cell's gold items that was.
  On the imported ScaleEval data only disagreements are queued, so the debate has no scored
  example there until experts also answer consensus debates.
- Example level: eq. (2), the share of gold items where the evaluator's verdict equals G.
- System level: eq. (3), delta(mode(E), mode(G)), computed per system pair within the cell
  (Fig. 3: "which LLMs produce the best responses for each scenario"), on verdicts read as
  "which system is better" so that either order of the submissions counts alike. Items whose
  systems are unknown take no part. A cell reports on how many pairs the modes agree out of the
  pairs where both modes are defined (no tie).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from lib.metaeval import ExampleAgreement, example_agreement, majority, system_agreement, system_preference

from .models import Debate, DebateTurn, ExpertVerdict

DEBATE = "debate"


@dataclass(frozen=True)
class Score:
    """One evaluator's agreement with gold in one cell (or overall)."""

    example: ExampleAgreement
    system_agreed: int = 0
    system_compared: int = 0  # system pairs where both modes are defined

    def as_json(self) -> dict:
        return {"n": self.example.n, "agreed": self.example.agreed, "rate": _round(self.example.rate),
                "unparseable": self.example.unparseable, "system_agreed": self.system_agreed,
                "system_compared": self.system_compared,
                "system_rate": _round(self.system_agreed / self.system_compared if self.system_compared else None)}


@dataclass
class Cell:
    scenario: str
    criterion: str
    debates: int = 0
    gold: int = 0  # debates with a gold verdict
    gold_ties: int = 0  # debates whose experts tied
    scores: dict[str, Score] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"scenario": self.scenario, "criterion": self.criterion, "debates": self.debates,
                "gold": self.gold, "gold_ties": self.gold_ties,
                "evaluators": {name: {**score.as_json(), "coverage": _round(score.example.n / self.gold if self.gold
                                                                             else None)}
                               for name, score in self.scores.items()}}


@dataclass
class Report:
    cells: list[Cell]
    evaluators: list[str]  # DEBATE first, then the judges by name
    overall: dict[str, Score]
    expert_verdicts: int

    def as_json(self) -> dict:
        return {"cells": [c.as_json() for c in self.cells],
                "overall": {name: score.as_json() for name, score in self.overall.items()},
                "expert_verdicts": self.expert_verdicts}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def gold_verdicts() -> tuple[dict[int, int], set[int], int]:
    """Debate id -> the experts' majority verdict; the ids whose experts tied; verdicts counted."""
    by_debate: dict[int, list[int]] = defaultdict(list)
    count = 0
    for debate_id, verdict in ExpertVerdict.objects.values_list("item__debate_id", "verdict"):
        by_debate[debate_id].append(verdict)
        count += 1
    gold, ties = {}, set()
    for debate_id, verdicts in by_debate.items():
        g = majority(verdicts)
        if g is None:
            ties.add(debate_id)
        else:
            gold[debate_id] = g
    return gold, ties, count


def debates_report() -> Report:
    gold, ties, n_verdicts = gold_verdicts()
    debates = list(Debate.objects.values_list("id", "scenario", "criterion", "consensus", "system_1", "system_2"))
    independent: dict[int, dict[str, int | None]] = defaultdict(dict)
    for debate_id, agent, verdict in (DebateTurn.objects.filter(round=0, debate_id__in=gold).exclude(agent="")
                                      .values_list("debate_id", "agent", "verdict")):
        independent[debate_id][agent] = verdict
    judges = sorted(set(DebateTurn.objects.filter(round=0).exclude(agent="").order_by()
                        .values_list("agent", flat=True).distinct()))
    evaluators = [DEBATE, *judges]

    # (cell, evaluator) -> [(E, G)]; (cell, pair, evaluator) -> [(E as system, G as system)]
    examples: dict[tuple, list] = defaultdict(list)
    systems: dict[tuple, list] = defaultdict(list)
    cells: dict[tuple[str, str], Cell] = {}
    for debate_id, scenario, criterion, consensus, s1, s2 in debates:
        key = (scenario, criterion)
        cell = cells.setdefault(key, Cell(scenario, criterion))
        cell.debates += 1
        cell.gold_ties += debate_id in ties
        if debate_id not in gold:
            continue
        cell.gold += 1
        g = gold[debate_id]
        verdicts = dict(independent.get(debate_id, {}))
        if consensus is not None:
            verdicts[DEBATE] = consensus
        pair = tuple(sorted((s1, s2))) if s1 and s2 and s1 != s2 else None
        for name, e in verdicts.items():
            examples[key, name].append((e, g))
            if pair:
                systems[key, pair, name].append((system_preference(e, s1, s2), system_preference(g, s1, s2)))

    system_results: dict[tuple, list[int]] = defaultdict(list)
    for (key, _pair, name), pairs in systems.items():
        agreed = system_agreement(pairs)
        if agreed is not None:
            system_results[key, name].append(agreed)
    for key, cell in cells.items():
        for name in evaluators:
            results = system_results.get((key, name), [])
            cell.scores[name] = Score(example_agreement(examples.get((key, name), [])),
                                      system_agreed=sum(results), system_compared=len(results))

    overall = {}
    for name in evaluators:
        pooled = [pair for (_key, n), pairs in examples.items() if n == name for pair in pairs]
        results = [r for (_key, n), rs in system_results.items() if n == name for r in rs]
        overall[name] = Score(example_agreement(pooled), system_agreed=sum(results), system_compared=len(results))
    ordered = [cells[k] for k in sorted(cells)]
    return Report(cells=ordered, evaluators=evaluators, overall=overall, expert_verdicts=n_verdicts)
