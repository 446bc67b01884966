"""The model page's part on a judge's roles beyond G-Eval (`models/<pk>/judging/roles`, loaded after the
page): its qualification as a pairwise judge and as a judge in debates, each with its figures and, when
the site does not use it in that role, why (apps/annotate/judge_status.py)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404, render

from ..judge_status import ROLE_TASKS, ROLE_WORDS, statuses

ROLES_SHOWN = ("pairwise", "debate")  # G-Eval's part is the page's "As a judge" (views/metaeval.py)
# Its position consistency in words: {same} of {both} pairs ({share}).
POSITION_WORDS = {
    "pairwise": "Shown each pair in both orders, it gave the same answer for {same} of {both} pairs ({share}); "
                "where it did not, the pair counts as a tie, never a win.",
    "debate": "Asked its first question of each debate again with the two answers swapped, it gave the same "
              "answer for {same} of {both} pairs ({share}).",
}


def _pct(x) -> str:
    return "—" if x is None else f"{round(100 * x)}%"


def _points(x) -> str:
    return "—" if x is None else f"{round(100 * x):+d}" if round(100 * x) else "0"


def _figures(f: dict) -> dict:
    """One row of figures (a set's or the pooled one) as the page shows it."""
    pos = f.get("position") or {}
    return {"pairs": f.get("pairs_non_tie"), "accuracy": _pct(f.get("accuracy_non_tie")),
            "accuracy_low": _pct(f.get("accuracy_ci_low")), "accuracy_high": _pct(f.get("accuracy_ci_high")),
            "longer": _pct(f.get("length_accuracy_non_tie")), "margin": _points(f.get("margin_over_length")),
            "margin_low": _points(f.get("margin_over_length_ci_low")),
            "margin_high": _points(f.get("margin_over_length_ci_high")), "weight": f.get("weight"),
            "consistent": pos.get("consistent"), "both": pos.get("both_readable"),
            "consistency": _pct(pos.get("consistency")) if pos else ""}


def judge_roles(request, pk: int):
    from apps.chat.models import RegisteredModel

    model = get_object_or_404(RegisteredModel, pk=pk)
    found = statuses([model], ROLES_SHOWN)
    roles = []
    for role in ROLES_SHOWN:
        s = found[(model.name, role)]
        pooled = _figures(s.pooled) if s.done else None
        roles.append({"status": s, "words": ROLE_WORDS[role], "task": ROLE_TASKS[role], "pooled": pooled,
                      "position": POSITION_WORDS[role].format(same=pooled["consistent"], both=pooled["both"],
                                                              share=pooled["consistency"])
                      if pooled and pooled["consistency"] else "",
                      "sets": [(name, _figures(f)) for name, f in (s.done.figures.get("per_set") or {}).items()]
                      if s.done else []})
    shown = model.is_judge or any(r["status"].done or r["status"].waiting or r["status"].failed
                                  or r["status"].skipped for r in roles)
    return render(request, "annotate/_judge_roles.html", {"model": model, "roles": roles, "shown": shown})
