"""Where a judge model stands in each role it plays (apps/annotate/qualify.py ROLES), and why the site
refuses it there, in plain words: what debates (apps/oracle/debates.py) and the model page read.

A judge is used in a role only through a finished qualification in that role that beat preferring the
longer answer (the lower end of its margin's 95% interval above 0, so a weight above 0). Until one has
finished it is not used: while its qualification is queued or running, a debate leaves it out, and a
debate already asked for with it waits; a qualification that could not be finished, or one that did not
beat the length rule, refuses it until a newer one qualifies it. A debate-role qualification not tried
(its judge did not qualify as a pairwise judge, apps/annotate/qualify.py debate_gate) refuses it too, saying
why, with no figures: nothing was measured. While a newer qualification runs, the last finished one
stands (as it does for the oracle's weight, apps/oracle/weights.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone as dt_timezone

from .models import Qualification
from .qualify import ROLES, role_evaluator

# A role in words, as in "is not used as ...".
ROLE_WORDS = {"geval": "a G-Eval judge", "pairwise": "a pairwise judge", "debate": "a judge in debates"}
# What the role asks of the judge, for the model page.
ROLE_TASKS = {"geval": "scores each answer on its own (G-Eval)",
              "pairwise": "picks the better of two answers, asked in both orders",
              "debate": "debates two answers, sitting as two agents, until they agree"}

QUALIFIED, REFUSED, QUEUED, RUNNING, FAILED, NOT_TRIED, NOT_QUEUED, NOT_A_JUDGE = (
    "qualified", "refused", "queued", "running", "failed", "not tried", "not queued", "not a judge")
WAITING = (QUEUED, RUNNING, NOT_QUEUED)  # may still qualify: a debate asked for with it waits


def _at(when) -> str:
    return when.astimezone(dt_timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _pct(x) -> str:
    return "?" if x is None else f"{round(100 * x)}%"


def _points(x) -> str:
    return "?" if x is None else f"{round(100 * x):+d}" if round(100 * x) else "0"


@dataclass(frozen=True)
class RoleStatus:
    model: str
    role: str
    state: str
    done: Qualification | None  # the last finished qualification in the role
    waiting: Qualification | None  # a queued or running one
    failed: Qualification | None  # the newest, when it could not be finished
    skipped: Qualification | None = None  # the newest, when it was not tried (its `error` says why)

    @property
    def evaluator(self) -> str:
        return role_evaluator(self.model, self.role)

    @property
    def usable(self) -> bool:
        return self.state == QUALIFIED

    @property
    def waiting_words(self) -> str:
        """Where a queued or running qualification stands, in a word ("" when there is none)."""
        if self.waiting is None:
            return ""
        return RUNNING if self.waiting.status == Qualification.Status.RUNNING else QUEUED

    @property
    def pooled(self) -> dict:
        return (self.done.figures.get("pooled") or {}) if self.done else {}

    @property
    def reason(self) -> str:
        """Why the judge is not used in the role, in words ("" when it is)."""
        who = f"{self.model} is not used as {ROLE_WORDS[self.role]}"
        if self.state == QUALIFIED:
            return ""
        if self.state == REFUSED:
            p = self.pooled
            return (f"{who}: on {p.get('pairs_non_tie')} pairs of answers people had compared, it agreed with them "
                    f"{_pct(p.get('accuracy_non_tie'))} of the time, while preferring the longer answer agreed "
                    f"{_pct(p.get('length_accuracy_non_tie'))}; its lead over that could be as low as "
                    f"{_points(p.get('margin_over_length_ci_low'))} points, not above 0, so it has not shown it "
                    f"does better than preferring the longer answer.")
        if self.state == NOT_A_JUDGE:
            return f"{who}: it is not registered as a judge."
        until = " It is not used until a qualification in this role shows it beats preferring the longer answer."
        if self.state == QUEUED:
            after = (" It runs after its qualification as a pairwise judge, and only if that one qualifies it: a "
                     "debate opens with the pairwise question." if self.role == "debate" else "")
            return (f"{who} yet: its qualification in this role is queued (since {_at(self.waiting.created_at)})."
                    f"{after}{until}")
        if self.state == RUNNING:
            started = self.waiting.started_at or self.waiting.created_at
            return f"{who} yet: its qualification in this role is running (started {_at(started)}).{until}"
        if self.state == FAILED:
            return f"{who}: its qualification in this role could not be finished: {self.failed.error}"
        if self.state == NOT_TRIED:
            return f"{who}. {self.skipped.error}"
        return f"{who} yet: it has not been qualified in this role; the debate worker queues that when it next looks for work.{until}"


def _state(is_judge: bool, done, waiting, failed, skipped) -> str:
    if done is not None:
        return QUALIFIED if done.qualified else REFUSED
    if waiting is not None:
        return RUNNING if waiting.status == Qualification.Status.RUNNING else QUEUED
    if failed is not None:
        return FAILED
    if skipped is not None:
        return NOT_TRIED
    return NOT_QUEUED if is_judge else NOT_A_JUDGE


def statuses(models, roles=ROLES) -> dict[tuple[str, str], RoleStatus]:
    """(model name, role) -> RoleStatus for every model (RegisteredModel rows) in every role, in one query."""
    models = list({m.name: m for m in models}.values())
    wanted = {role_evaluator(m.name, r): (m, r) for m in models for r in roles}
    rows: dict[str, list[Qualification]] = {}
    for q in Qualification.objects.filter(evaluator__in=list(wanted)):  # newest first (the model's ordering)
        rows.setdefault(q.evaluator, []).append(q)
    found = {}
    for evaluator, (m, role) in wanted.items():
        mine = rows.get(evaluator, [])
        finished = [q for q in mine if q.status == Qualification.Status.DONE]
        # as qualify.latest: the latest finished, a full one before a sample of the same age
        done = max(finished, key=lambda q: (q.finished_at, q.full, q.id)) if finished else None
        waiting = next((q for q in mine if q.status in (Qualification.Status.PENDING, Qualification.Status.RUNNING)),
                       None)
        failed = mine[0] if mine and mine[0].status == Qualification.Status.FAILED else None
        skipped = mine[0] if mine and mine[0].status == Qualification.Status.SKIPPED else None
        found[(m.name, role)] = RoleStatus(model=m.name, role=role,
                                           state=_state(m.is_judge, done, waiting, failed, skipped),
                                           done=done, waiting=waiting, failed=failed, skipped=skipped)
    return found


def status(model, role: str) -> RoleStatus:
    return statuses([model], (role,))[(model.name, role)]


def refused(models, role: str) -> dict[int, RoleStatus]:
    """The models (by pk) not used in `role`, each with its status (its `reason` says why)."""
    found = statuses(models, (role,))
    return {m.pk: found[(m.name, role)] for m in models if not found[(m.name, role)].usable}
