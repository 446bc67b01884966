"""python manage.py selfeval: the peer self-evaluation after Hai Ye's method (lib.selfeval).

    selfeval --responses DIR      one file per model, one response per line (the seed's folder)
    selfeval --context C          the single-turn answers of a context's models (name or id)
    selfeval --context C --save   ... and store the ratings as the context's Peer Elo on the boards
    selfeval --all-contexts --save  every context whose models answered a common prompt (the others
                                  are skipped with a line)

Options: --rounds 2 re-runs among the --top N models of the first round; --seed the shuffle of the
comparisons before Elo; --bootstrap N the median Elo over N resamples (the seed script's 1000 are slow);
--json-only prints the JSON line alone. The last line printed is always one JSON object: ratings and
records by model (of the last round), rounds, prompts, comparisons, ranking, ...; with
--all-contexts, {"contexts": {name: {"saved": models} | {"skipped": why}}}.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from apps.chain.models import Context
from lib.reputation import GLOBAL_CONTEXT_ID
from lib.selfeval import DEFAULT_SEED, Round, SelfEvalError, SelfEvaluation, read_responses, self_evaluate


def find_context(raw: str) -> Context:
    found = Context.objects.filter(context_id=raw.strip().lower()).first() or Context.objects.filter(
        name=raw.strip()).first()
    if found is None:
        raise CommandError(f"no context named or with id {raw!r}")
    return found


class Command(BaseCommand):
    help = "Rank models by peer self-evaluation (Hai Ye's method): BERTScore against a third model's answer, Elo."

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--responses", metavar="DIR", help="a folder with one response file per model")
        source.add_argument("--context", help="the context (name or id) whose models' answers to compare")
        source.add_argument("--all-contexts", action="store_true", help="every context (with --save)")
        parser.add_argument("--save", action="store_true",
                            help="store the ratings as the context's Peer Elo (replacing its last run)")
        parser.add_argument("--rounds", type=int, choices=(1, 2), default=1)
        parser.add_argument("--top", type=int, help="models kept for the second round (default: half, at least 3)")
        parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the shuffle before Elo")
        parser.add_argument("--bootstrap", type=int, default=0, help="median Elo over this many resamples")
        parser.add_argument("--json-only", action="store_true", help="print only the JSON line")

    def handle(self, *args, responses=None, context=None, all_contexts=False, save=False, rounds=1, top=None,
               seed=DEFAULT_SEED, bootstrap=0, json_only=False, **opts):
        options = {"rounds": rounds, "top": top, "seed": seed, "bootstrap": bootstrap}
        if save and responses:
            raise CommandError("--save stores a context's ratings: use it with --context or --all-contexts")
        if all_contexts and not save:
            raise CommandError("--all-contexts refreshes the stored ratings: add --save")
        if all_contexts:
            return self.refresh_all(options, json_only=json_only)
        try:
            if responses:
                answers = read_responses(responses)
                from lib.metrics.bertscore import BERTScore  # imports torch

                evaluation = self_evaluate(answers, BERTScore(), **options)
                data = evaluation.as_dict()
            else:
                from ...selfeval import context_selfeval, default_scorer, metric_params, save_peer_ratings

                scorer = default_scorer()
                result = context_selfeval(find_context(context), scorer=scorer, **options)
                evaluation, data = result.evaluation, result.as_dict()
                if save:
                    data["saved"] = save_peer_ratings(result, metric=metric_params(scorer))
        except SelfEvalError as exc:
            raise CommandError(str(exc)) from None
        if not json_only:
            self.print_tables(evaluation)
            if save:
                self.stdout.write(f"saved {data['saved']} peer ratings in context {result.context.name}")
        self.stdout.write(json.dumps(data))

    def refresh_all(self, options, *, json_only: bool) -> None:
        from ...selfeval import context_selfeval, default_scorer, metric_params, save_peer_ratings

        scorer = default_scorer()  # one for every context: its encoder loads once, on first use
        summary = {}
        for ctx in Context.objects.exclude(context_id=GLOBAL_CONTEXT_ID).order_by("name", "context_id"):
            try:
                result = context_selfeval(ctx, scorer=scorer, **options)
            except SelfEvalError as exc:
                summary[ctx.name] = {"skipped": str(exc)}
                if not json_only:
                    self.stdout.write(f"skipped context {ctx.name}: {exc}")
                continue
            saved = save_peer_ratings(result, metric=metric_params(scorer))
            summary[ctx.name] = {"saved": saved, "prompts": result.evaluation.prompts}
            if not json_only:
                self.stdout.write(f"##### context {ctx.name}")
                self.print_tables(result.evaluation)
                self.stdout.write(f"saved {saved} peer ratings in context {ctx.name}")
        self.stdout.write(json.dumps({"contexts": summary}))

    def print_tables(self, evaluation: SelfEvaluation) -> None:
        for n, r in enumerate(evaluation.rounds, start=1):
            title = f"round {n}: " if len(evaluation.rounds) > 1 else ""
            self.stdout.write(f"===== {title}Elo over {len(r.outcomes)} comparisons, {len(r.models)} models, "
                              f"{evaluation.prompts} prompts =====")
            self.stdout.write(table(r))


def table(r: Round) -> str:
    width = max(len("model"), *(len(m) for m in r.models))
    lines = [f"{'rank':>4}  {'model':<{width}}  {'Elo':>7}  {'wins':>6}  {'ties':>6}  {'losses':>6}"]
    for rank, m in enumerate(r.ranking, start=1):
        rec = r.records[m]
        lines.append(f"{rank:>4}  {m:<{width}}  {r.ratings[m]:>7.1f}  {rec.wins:>6}  {rec.ties:>6}  {rec.losses:>6}")
    return "\n".join(lines)
