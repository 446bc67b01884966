"""Saved meta-evaluation runs: how far an automatic evaluator agrees with humans, per run.

`record_run` saves what `manage.py metaeval pairs|scores` printed; `run_page` turns a saved result
into the rows, chart data and explanations the page (/metaeval/<id>/) and the API show. The result
is the command's JSON as printed, so the page shows exactly the figures the terminal did.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from apps.chain.models import Context
from apps.chain.signals import boards_changed
from lib.metaeval import CORRELATIONS
from lib.reputation import GLOBAL_CONTEXT_ID

from .models import MetaEvalRun

GLOBAL_NAME = "Global"  # the global board's name (apps.leaderboard.boards.GLOBAL_NAME)

# One sentence per figure, shown under the tables.
PAIRS_TEXT = {
    "accuracy_non_tie": "Accuracy (non-tie): of the pairs where the humans preferred one answer, the share where the "
                        "evaluator preferred the same one; an evaluator tie or no verdict counts as wrong.",
    "agreement_with_ties": "Agreement (with ties): the same over every pair, a tie by the evaluator agreeing with a "
                           "tie by the humans.",
    "undecided": "Undecided: pairs the evaluator gave no verdict on (counted as disagreeing).",
    "evaluator_ties": "Evaluator ties: pairs the evaluator called a tie.",
    "system_level": "System pairs agreed: for each pair of systems in a category, whether the evaluator's most "
                    "frequent preference between them is the humans' most frequent one (pairs whose mode is a tie "
                    "on either side are left out).",
}
SCORES_TEXT = {
    "pearson": "Pearson r: how close the evaluator's scores are to a straight-line function of the human scores "
               "(1: exactly, 0: no linear relation, negative: the opposite).",
    "spearman": "Spearman ρ: the same on ranks, so it asks only whether a higher human score goes with a higher "
                "evaluator score.",
    "kendall": "Kendall τ (tau-b): of every two responses, how much more often the evaluator orders them as the "
               "humans do than the other way round, ties accounted for.",
    "pooled": "Pooled: over all scored responses at once (none with fewer than 3: two points always give ±1).",
    "per_context": "Per dialogue: each dialogue's correlation among its own responses, averaged over the "
                   "dialogues (how well the evaluator ranks answers to the same conversation); dialogues with "
                   "fewer than 3 scored responses, or a constant side, are left out.",
    "unscored": "Unscored: responses the evaluator gave no score (left out of the correlations, never guessed).",
}
SYMBOLS = {"pearson": "r", "spearman": "ρ", "kendall": "τ"}
SCOPES = {"pooled": "pooled", "per_context": "per dialogue"}


class UnknownBoardContext(LookupError):
    """--context names no context this site knows."""


def resolve_context(name_or_id: str) -> str:
    """The context id of a board, from its on-chain id or its name ("Global" for the global board)."""
    text = name_or_id.strip()
    if text.casefold() == GLOBAL_NAME.casefold() or text.lower() == GLOBAL_CONTEXT_ID:
        return GLOBAL_CONTEXT_ID
    found = list(Context.objects.filter(context_id__iexact=text).values_list("context_id", flat=True)) or \
        list(Context.objects.filter(name__iexact=text).values_list("context_id", flat=True))
    if len(found) != 1:
        known = ", ".join([GLOBAL_NAME, *Context.objects.order_by("name").values_list("name", flat=True)])
        why = "names several contexts; give its id" if found else "is no context"
        raise UnknownBoardContext(f"{name_or_id!r} {why}; known: {known}")
    return found[0]


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def reproduce_command(kind: str, result: dict) -> str:
    """The command line that recomputes a run's figures from its file."""
    if kind == MetaEvalRun.Kind.PAIRS:
        args = ["pairs", result["file"], "--evaluator", result["evaluator"]]
        if result.get("sample_seed") is not None:
            args += ["--limit", str(result["n"]), "--seed", str(result["sample_seed"])]
    else:
        criteria = list(result["criteria"])
        args = ["scores", result["data"], "--evaluator", result["evaluator"],
                "--criterion", criteria[0] if len(criteria) == 1 else "all"]
    return shlex.join(["python", "manage.py", "metaeval", *args])


def record_run(kind: str, result: dict, source: str, *, context_id: str = "", label: str = "") -> MetaEvalRun:
    """Save a run; its result gains `"run": <id>`, as the command prints it. A run attached to a board
    moves that board's version, so its cached pages show the link."""
    with transaction.atomic():
        run = MetaEvalRun.objects.create(
            kind=kind, evaluator=result["evaluator"], evaluator_params=result.get("evaluator_params") or {},
            source=source, source_sha256=file_sha256(source), label=label, context_id=context_id,
            command=reproduce_command(kind, result), result=result, seconds=result.get("seconds") or 0.0)
        run.result = {**result, "run": run.pk}
        run.save(update_fields=["result"])
        if context_id:
            boards_changed.send(sender=MetaEvalRun, contexts={context_id})
    return run


def context_names(context_ids: set[str]) -> dict[str, str]:
    names = dict(Context.objects.filter(context_id__in=context_ids).values_list("context_id", "name"))
    names[GLOBAL_CONTEXT_ID] = GLOBAL_NAME
    return {c: names.get(c) or c[:10] for c in context_ids if c}


def headline(run: MetaEvalRun) -> dict:
    """The run's one figure for the list: accuracy and agreement for pairs, Spearman for scores
    (the overall criterion's pooled one, else the first criterion's)."""
    r = run.result
    if run.kind == MetaEvalRun.Kind.PAIRS:
        return {"accuracy_non_tie": r.get("accuracy_non_tie"), "agreement_with_ties": r.get("agreement_with_ties"),
                "n": r.get("n")}
    criteria = r.get("criteria") or {}
    name = "overall" if "overall" in criteria else next(iter(criteria), None)
    if name is None:
        return {"criterion": None, "spearman": None, "n": r.get("n")}
    return {"criterion": name, "spearman": criteria[name]["pooled"].get("spearman"), "n": r.get("n")}


@dataclass(frozen=True)
class RunPage:
    run: MetaEvalRun
    context_name: str
    rows: list[dict] = field(default_factory=list)  # pairs: per category + overall; scores: per criterion
    system_pairs: list[dict] = field(default_factory=list)
    judged: list[dict] = field(default_factory=list)  # scores: the judge's own counts, when it reports them
    pair_judge: list[tuple[str, str]] = field(default_factory=list)  # pairs: the same, as (label, value)
    judge_warning: str = ""  # pairs: why the judge cannot be trusted, when it says so
    chart: dict = field(default_factory=dict)
    explanations: list[str] = field(default_factory=list)


def _pairs_page(run: MetaEvalRun) -> dict:
    r = run.result
    rows = [{"name": name, **figures} for name, figures in (r.get("per_category") or {}).items()]
    level = r.get("system_level")
    overall = {key: r.get(key) for key in ("n", "human_ties", "non_tie", "agreed_non_tie", "accuracy_non_tie",
                                           "agreed_with_ties", "agreement_with_ties", "undecided", "evaluator_ties")}
    if level:
        overall.update(system_agreed=level["agreed"], system_compared=level["compared"])
    rows.append({"name": "overall", "overall": True, **overall})
    chart = {"kind": "pairs", "labels": [row["name"] for row in rows], "datasets": [
        {"key": "accuracy_non_tie", "label": "accuracy (non-tie)", "data": [row["accuracy_non_tie"] for row in rows]},
        {"key": "agreement_with_ties", "label": "agreement (with ties)",
         "data": [row["agreement_with_ties"] for row in rows]}]}
    judge = r.get("judge") or {}
    pair_judge = [(key.replace("_", " "), ", ".join(map(str, v)) if isinstance(v, list) else str(v))
                  for key, v in judge.items() if key != "warning"]
    return {"rows": rows, "system_pairs": (level or {}).get("pairs", []), "chart": chart,
            "explanations": list(PAIRS_TEXT.values()), "pair_judge": pair_judge,
            "judge_warning": str(judge.get("warning") or "")}


def _scores_page(run: MetaEvalRun) -> dict:
    criteria = run.result.get("criteria") or {}
    rows = [{"name": name, "n": c.get("n"), "unscored": c.get("unscored"),
             "pooled": [c["pooled"].get(k) for k in CORRELATIONS],
             "per_context": [c["per_context"].get(k) for k in CORRELATIONS]} for name, c in criteria.items()]
    judged = [{"name": name, **c["judge"]} for name, c in criteria.items() if c.get("judge")]
    chart = {"kind": "scores", "labels": list(criteria), "datasets": [
        {"key": f"{scope}_{k}", "scope": scope, "label": f"{SYMBOLS[k]} {k} ({SCOPES[scope]})",
         "data": [c[scope].get(k) for c in criteria.values()]}
        for scope in SCOPES for k in CORRELATIONS]}
    return {"rows": rows, "judged": judged, "chart": chart, "explanations": list(SCORES_TEXT.values())}


def run_page(run: MetaEvalRun) -> RunPage:
    parts = _pairs_page(run) if run.kind == MetaEvalRun.Kind.PAIRS else _scores_page(run)
    name = context_names({run.context_id}).get(run.context_id, "") if run.context_id else ""
    return RunPage(run=run, context_name=name, **parts)


def runs_for_context(context_id: str) -> list[MetaEvalRun]:
    return list(MetaEvalRun.objects.filter(context_id=context_id))
