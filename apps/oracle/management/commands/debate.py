"""python manage.py debate {interaction,pair,sample,work,status}: live debates between the judges.

    debate interaction ID [--reference MODEL]   the answer vs a reference answer the oracle collected
    debate pair ID_A ID_B                       two models' answers to the same first-turn prompt
    debate sample --n N [--context C]           N pairs not debated yet, drawn at random
    debate work [--once]                        hold queued debates (until Ctrl-C, or one pass)
    debate status                               jobs by status

The three ways of asking take --criterion, --judges NAME,NAME, --rounds D and --now (hold the
debates in this process instead of leaving them to `debate work`). Each prints, as its last line,
one JSON object with the jobs (and, with --now, each debate's outcome).
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from apps.chain.models import Context
from apps.chain.work import in_turns, run_worker
from apps.chat.models import Interaction

from ... import debates
from ...models import DebateJob


def _interaction(raw: str) -> Interaction:
    found = Interaction.objects.select_related("conversation__model", "conversation__context").filter(
        interaction_id=raw.strip().lower()).first()
    if found is None:
        raise CommandError(f"no interaction with id {raw!r} (give its on-chain id, 0x...)")
    return found


def _context(raw: str | None):
    if not raw:
        return None
    found = Context.objects.filter(context_id=raw.strip().lower()).first() or Context.objects.filter(
        name=raw.strip()).first()
    if found is None:
        raise CommandError(f"no context named or with id {raw!r}")
    return found


def _job_json(job: DebateJob) -> dict:
    out = {"key": job.key, "status": job.status, "criterion": job.criterion, "system_1": job.system_1,
           "system_2": job.system_2}
    if job.debate_id:
        debate = job.debate
        out.update(debate=debate.pk, rounds=debate.rounds, consensus=debate.consensus,
                   queued=hasattr(debate, "queue_item"))
    if job.last_error:
        out["error"] = job.last_error
    return out


class Command(BaseCommand):
    help = "Live debates (ScaleEval, Chern et al. 2024) between the judge models over answers the site holds."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        ask = []
        p = sub.add_parser("interaction", help="the interaction's answer against one of its reference answers")
        p.add_argument("interaction_id")
        p.add_argument("--reference", help="the reference model (name or on-chain id); default: the first")
        ask.append(p)
        p = sub.add_parser("pair", help="two models' answers to the same first-turn prompt")
        p.add_argument("first")
        p.add_argument("second")
        ask.append(p)
        p = sub.add_parser("sample", help="debates over pairs not debated yet, drawn at random")
        p.add_argument("--n", type=int, default=1)
        p.add_argument("--context", help="only pairs of this context (name or id)")
        p.add_argument("--seed", type=int, help="the draw's seed (default: random)")
        ask.append(p)
        for p in ask:
            p.add_argument("--criterion", help="helpfulness (default), creativity, interpretability or reasoning")
            p.add_argument("--judges", help="comma-separated judge model names (default: every running judge)")
            p.add_argument("--rounds", type=int, help="D: round 0 and up to D-1 discussion rounds (default 3)")
            p.add_argument("--now", action="store_true", help="hold the debates here and now")
        p = sub.add_parser("work", help="hold queued debates until Ctrl-C or SIGTERM")
        p.add_argument("--once", action="store_true", help="hold what is queued now, then exit")
        sub.add_parser("status", help="jobs by status")

    def handle(self, *args, action, **opts):
        try:
            return getattr(self, f"do_{action}")(**opts)
        except debates.DebateRequestError as exc:
            raise CommandError(str(exc)) from None

    def _common(self, opts) -> dict:
        names = [n.strip() for n in (opts.get("judges") or "").split(",") if n.strip()]
        return {"criterion": opts.get("criterion"), "judges": debates.judge_models(names or None),
                "rounds": opts.get("rounds")}

    def _finish(self, jobs: list[DebateJob], now: bool) -> None:
        if now:
            for job in jobs:
                job.refresh_from_db()
                if job.status in debates.ACTIVE:
                    debates.hold(job)
                    job.refresh_from_db()
        summary = {"jobs": [_job_json(j) for j in jobs]}
        for job in jobs:
            line = f"{job.key}: {job.status}"
            if job.debate_id:
                d = job.debate
                line += (f", {d.rounds} round(s), " + (f"consensus {d.consensus}" if d.consensus is not None
                                                        else "the judges disagree: queued for experts"))
            if job.last_error:
                line += f" ({job.last_error[:200]})"
            self.stdout.write(line)
        self.stdout.write(json.dumps(summary, sort_keys=True))

    def do_interaction(self, interaction_id, reference=None, now=False, **opts):
        pair = debates.from_reference(_interaction(interaction_id), reference)
        job, _ = debates.request(pair, **self._common(opts))
        self._finish([job], now)

    def do_pair(self, first, second, now=False, **opts):
        pair = debates.from_same_prompt(_interaction(first), _interaction(second))
        job, _ = debates.request(pair, **self._common(opts))
        self._finish([job], now)

    def do_sample(self, n, context=None, seed=None, now=False, **opts):
        jobs = debates.sample(n, context=_context(context), seed=seed, **self._common(opts))
        if not jobs:
            self.stderr.write("every pair the site holds has been debated under this criterion already")
        self._finish(jobs, now)

    def do_work(self, once=False, **_):
        if once:
            taken = 0
            while (moved := debates.run_once()):
                taken += moved
            self.stdout.write(json.dumps({"held": taken}))
            return
        from apps.annotate.qualify import run_pending

        self.stdout.write("debate worker: holding queued debates, qualifying new judges (Ctrl-C stops it)")
        # In turns: a stream of debates must not hold a new judge's qualification back for ever.
        run_worker(in_turns(debates.run_once, run_pending), idle_sleep=2, name="debate worker")

    def do_status(self, **_):
        self.stdout.write(json.dumps({s: DebateJob.objects.filter(status=s).count() for s in S.values}))


S = DebateJob.Status
