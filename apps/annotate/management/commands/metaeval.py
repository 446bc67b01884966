"""python manage.py metaeval debates | pairs FILE --evaluator NAME | scores PATH --evaluator NAME
--criterion C|all | topical-pairs --data PATH --out FILE

`debates`: per scenario and criterion, the example-level agreement rate (ScaleEval's eq. 2) of the
debate and of each single judge with the experts' verdicts, with the system-level agreement
(eq. 3) as agreed/compared system pairs (apps/annotate/report.py defines them).

`pairs`: an evaluator (lib/evaluators.py) against the human labels of a pairs file (JSONL, see
lib/metaeval.py `read_pairs`): accuracy on the pairs humans did not tie, agreement counting ties,
both per category, undecided verdicts, and system-level agreement (`pairs_report`).

`scores`: an evaluator's absolute scores of the Topical-Chat USR responses against the human scores,
per criterion: Pearson, Spearman, Kendall, pooled and per dialogue context (`score_correlations`).

`topical-pairs`: writes the pairs file derived from Topical-Chat USR (lib/topical_chat.py).

Each report prints a table, then, as its last line, one JSON object with every figure it shows; a
bad input is a CommandError and prints no JSON. `pairs` and `scores` save the run for /metaeval/
(apps/annotate/metaeval_runs.py) and add its id to that JSON as `run`; `--no-save` does not,
`--context NAME_OR_ID` attaches it to a board, `--label TEXT` says what the data is.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from lib import topical_chat
from lib.evaluators import EvaluatorError, Length, available_evaluators, get_evaluator
from lib.labelled_sets import LabelledSetError, llmbar_pairs, mtbench_pairs, pandalm_pairs
from lib.metaeval import (CORRELATIONS, MIN_CORRELATION_N, PairsFileError, pairs_report, read_pairs,
                          score_correlations, validity)

from ...metaeval_runs import UnknownBoardContext, record_run, resolve_context
from ...report import DEBATE, debates_report


def printable(text: str) -> str:
    """Names come from imported files: never let one send control sequences to the terminal."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def _cell(score) -> str:
    if score is None or not score.example.n:
        return "—"
    ex = score.example
    text = f"{ex.rate:.3f} ({ex.agreed}/{ex.n}"
    if ex.unparseable:
        text += f", {ex.unparseable}?"
    text += f"; sys {score.system_agreed}/{score.system_compared})"
    return text


class Command(BaseCommand):
    help = "Meta-evaluation reports: how well evaluators agree with the experts."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("debates", help="agreement of each single judge and of the debate with the experts' verdicts")
        evaluators = ", ".join(available_evaluators())
        pairs = sub.add_parser("pairs", help="an evaluator's pairwise verdicts against human labels (JSONL file)")
        pairs.add_argument("file", help="JSONL: id, question, category, answer_a, answer_b, human (a|b|tie), "
                                        "optional reference, model_a, model_b")
        pairs.add_argument("--evaluator", required=True, help=f"one of: {evaluators}")
        pairs.add_argument("--limit", type=int, help="judge only this many pairs, drawn at random (for slow "
                                                     "evaluators such as debate or geval)")
        pairs.add_argument("--seed", type=int, default=0, help="the draw's seed with --limit (default 0)")
        scores = sub.add_parser("scores",
                                help="correlation of an evaluator's scores with Topical-Chat USR human scores")
        scores.add_argument("path", help="topical_chat_usr.json")
        scores.add_argument("--evaluator", required=True, help=f"one of: {evaluators}")
        scores.add_argument("--criterion", default="all",
                            help=f"one of {', '.join(topical_chat.CRITERIA)}, or all (the default)")
        for saved in (pairs, scores):
            saved.add_argument("--no-save", dest="save", action="store_false",
                               help="do not save the run (it is saved by default, for /metaeval/)")
            saved.add_argument("--context", default="", help="the board context the run speaks for (its name or "
                                                             "id; Global for the global board): that board links to it")
            saved.add_argument("--label", default="", help='what the data is, in words (e.g. "Topical-Chat dialogue")')
        for name, what in (("pandalm", "PandaLM testset-v1.json"),
                           ("llmbar", "one LLMBar set: its dataset.json or its folder (e.g. llmbar/Adversarial/GPTOut)")):
            imported = sub.add_parser(f"import-{name}", help=f"write the pairs file of {what}")
            imported.add_argument("path", help=what)
            imported.add_argument("--out", required=True, help="the JSONL file to write")
        mtbench = sub.add_parser("import-mtbench", help="write the pairs file of MT-Bench's human judgements")
        mtbench.add_argument("path", help="the `human` split as JSON (human_judgments.json) or JSON Lines")
        mtbench.add_argument("--out", required=True, help="the JSONL file to write")
        mtbench.add_argument("--questions", help="MT-Bench's question.jsonl, for the categories and, from "
                                                 "reference_answer/gpt-4.jsonl beside it, the reference answers "
                                                 "(default: LLMCHAIN_MTBENCH_DIR's, if there is one)")
        qualify = sub.add_parser("qualify", help="run an evaluator on the human-labelled sets (PandaLM, LLMBar) and "
                                                 "keep the weight it earns against the length rule")
        qualify.add_argument("--evaluator", required=True, help=f"one of: {evaluators}")
        size = qualify.add_mutually_exclusive_group()
        size.add_argument("--sample", type=int, help="pairs drawn from each set (default: LLMCHAIN_QUALIFY_SAMPLE "
                                                     "for a judge, every pair otherwise)")
        size.add_argument("--full", action="store_true", help="every pair of every set")
        site = sub.add_parser("site", help="per context, how often the automatic score agrees with the site's own "
                                           "people (arena votes, ratings), next to the length rule")
        site.add_argument("--context", dest="board", default="all", help="a context's name or id (Global for the global board); "
                                                            "all of them by default")
        derive = sub.add_parser("topical-pairs", help="write the pairs file derived from Topical-Chat USR")
        derive.add_argument("--data", required=True, help="topical_chat_usr.json")
        derive.add_argument("--out", required=True, help="the JSONL file to write")
        derive.add_argument("--criterion", default="overall", help="the human score that decides a pair")

    def handle(self, *args, action, **opts):
        self.saving = {"save": opts.pop("save", False), "context_id": opts.pop("context", ""),
                       "label": opts.pop("label", "")}
        if self.saving["context_id"]:  # before the evaluator runs, which may take hours
            try:
                self.saving["context_id"] = resolve_context(self.saving["context_id"])
            except UnknownBoardContext as exc:
                raise CommandError(f"--context: {exc}") from None
        return getattr(self, f"do_{action.replace('-', '_')}")(**opts)

    def do_debates(self, **_):
        report = debates_report()
        head = ["scenario", "criterion", "debates", "gold", "ties", *report.evaluators]
        rows = [[printable(c.scenario) or "(none)", printable(c.criterion), str(c.debates), str(c.gold),
                 str(c.gold_ties), *(_cell(c.scores.get(name)) for name in report.evaluators)]
                for c in report.cells]
        rows.append(["overall", "", str(sum(c.debates for c in report.cells)), str(sum(c.gold for c in report.cells)),
                     str(sum(c.gold_ties for c in report.cells)),
                     *(_cell(report.overall.get(name)) for name in report.evaluators)])
        self._table([printable(h) for h in head], rows)
        self.stdout.write(f"rate (agreed/gold items[, unparseable?]; sys agreed/compared system pairs). "
                          f"{report.expert_verdicts} expert verdicts; '{DEBATE}' is scored only where it reached "
                          f"consensus; judges by their independent round-0 verdict.")
        self.stdout.write(json.dumps(report.as_json(), sort_keys=True))

    def _evaluator(self, spec: str):
        try:
            return get_evaluator(spec)
        except EvaluatorError as exc:
            raise CommandError(str(exc)) from None

    def _report(self, kind: str, source: str, result: dict) -> None:
        """Print the run's JSON as the last line; unless --no-save, save the run first and add its id."""
        if self.saving["save"]:
            result = record_run(kind, result, source, context_id=self.saving["context_id"],
                                label=self.saving["label"]).result
        self.stdout.write(json.dumps(result, sort_keys=True))

    def _table(self, head: list[str], rows: list[list[str]]) -> None:
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        for row in [head, *rows]:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())

    def do_pairs(self, *, file, evaluator, limit=None, seed=0, **_):
        path = Path(file)
        try:
            with path.open(encoding="utf-8") as lines:
                pairs = read_pairs(lines, source=str(path))
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text: {exc}") from None
        except PairsFileError as exc:
            raise CommandError(str(exc)) from None
        total = len(pairs)
        if limit is not None:
            if limit < 1:
                raise CommandError(f"--limit must be at least 1, not {limit}")
            if limit < total:
                chosen = set(random.Random(seed).sample(range(total), limit))
                pairs = [p for i, p in enumerate(pairs) if i in chosen]
        judge = self._evaluator(evaluator)
        started = time.perf_counter()
        try:
            verdicts = judge.compare(pairs)
            report = pairs_report(pairs, verdicts)
        except (EvaluatorError, ValueError) as exc:
            raise CommandError(f"{evaluator}: {exc}") from None
        seconds = time.perf_counter() - started
        report.update(validity(pairs, verdicts, Length().compare(pairs)))
        details = judge.pair_details()

        def row(name: str, r: dict) -> list[str]:
            sys_cell = f"{r['system_agreed']}/{r['system_compared']}" if "system_compared" in r else "—"
            return [printable(name), str(r["n"]), str(r["human_ties"]),
                    _rate(r["accuracy_non_tie"], r["agreed_non_tie"], r["non_tie"]),
                    _rate(r["agreement_with_ties"], r["agreed_with_ties"], r["n"]),
                    str(r["undecided"]), str(r["evaluator_ties"]), sys_cell]

        overall = dict(report)
        if report["system_level"]:
            overall.update(system_agreed=report["system_level"]["agreed"],
                           system_compared=report["system_level"]["compared"])
        self._table(["category", "pairs", "human ties", "accuracy (non-tie)", "agreement (with ties)", "undecided",
                     "evaluator ties", "system pairs agreed"],
                    [*(row(c, r) for c, r in report["per_category"].items()), row("overall", overall)])
        if report["system_level"]:
            self.stdout.write("")
            self._table(["category", "system pair", "pairs", "human mode", "evaluator mode", "agree"],
                        [[printable(s["category"]), printable(" vs ".join(s["systems"])), str(s["n"]),
                          printable(s["human_mode"] or "(tied)"), printable(s["evaluator_mode"] or "(tied)"),
                          {1: "yes", 0: "no", None: "—"}[s["agreed"]]] for s in report["system_level"]["pairs"]])
        self.stdout.write(f"evaluator {printable(evaluator)} on {len(pairs)} pairs in {seconds:.1f} s. accuracy: "
                          f"ScaleEval's eq. (2) on the pairs humans did not tie; agreement: eq. (2) on all pairs, a "
                          f"tie agreeing with a human tie; undecided verdicts count as wrong; system pairs: eq. (3) "
                          f"per category and system pair, agreed/compared (tied modes left out).")
        self.stdout.write(validity_line(report))
        if details.get("warning"):
            self.stdout.write(details["warning"])
        if "replies_without_verdict" in details:
            self.stdout.write(f"judge replies: {details['replies']}, without a verdict: "
                              f"{details['replies_without_verdict']}; pairs failed on context length: "
                              f"{details.get('pairs_failed_on_context', 0)}; pairs failed otherwise: "
                              f"{details.get('pairs_failed', 0)}")
        if "mean_digit_mass" in details:  # G-Eval: its form's answers, and the judge's own diagnostic
            self.stdout.write(f"judge answers scored: {details['scored']} ({details.get('structured', 0)} by "
                              f"structured output), unusable: {details['unusable']}; unconstrained digit mass "
                              f"(the probability it put on 1-5 on its own): mean {_mass(details['mean_digit_mass'])}, "
                              f"lowest {_mass(details['min_digit_mass'])}")
        for name, judged in (details.get("per_judge") or {}).items():
            self.stdout.write(_judge_line(name, judged))
        self._report("pairs", str(path), {
            "evaluator": evaluator, "evaluator_params": judge.params, "file": str(path),
            "seconds": round(seconds, 2), "pairs_in_file": total,
            "sample_seed": seed if len(pairs) < total else None, **({"judge": details} if details else {}), **report})

    def do_scores(self, *, path, evaluator, criterion, **_):
        if criterion != "all" and criterion not in topical_chat.CRITERIA:
            raise CommandError(f"unknown criterion {criterion!r}; known: {', '.join(topical_chat.CRITERIA)}, all")
        criteria = topical_chat.CRITERIA if criterion == "all" else (criterion,)
        try:
            items = topical_chat.scored_items(topical_chat.load(path))
        except topical_chat.TopicalChatError as exc:
            raise CommandError(str(exc)) from None
        judge = self._evaluator(evaluator)
        groups = [item["context_id"] for item in items]
        results, started = {}, time.perf_counter()
        for c in criteria:
            try:
                scores = judge.score(items, c)
            except EvaluatorError as exc:
                raise CommandError(f"{evaluator}: {exc}") from None
            if len(scores) != len(items):
                raise CommandError(f"{evaluator}: {len(scores)} scores for {len(items)} responses")
            results[c] = score_correlations([item["human"][c] for item in items], scores, groups)
            if details := judge.details(c):
                results[c]["judge"] = details
        seconds = time.perf_counter() - started

        def fmt(x):
            return "—" if x is None else f"{x:+.3f}"

        self._table(["criterion", "n", "unscored", *(f"pooled {k}" for k in CORRELATIONS),
                     *(f"per-context {k}" for k in CORRELATIONS)],
                    [[c, str(r["n"]), str(r["unscored"]), *(fmt(r["pooled"][k]) for k in CORRELATIONS),
                      *(fmt(r["per_context"][k]) for k in CORRELATIONS)] for c, r in results.items()])
        judged = {c: r["judge"] for c, r in results.items() if "judge" in r}
        if judged:
            self.stdout.write("")
            self._table(["criterion", "scored", "unusable", "mean digit mass", "min digit mass", "method"],
                        [[c, str(j["scored"]), str(j["unusable"]), _mass(j["mean_digit_mass"]),
                          _mass(j["min_digit_mass"]), printable(",".join(j["methods"]))] for c, j in judged.items()])
            unusable = [c for c, j in judged.items() if j["unusable"]]
            if unusable:
                counts = ", ".join(f"{judged[c]['unusable']} {c}" for c in unusable)
                self.stdout.write(f"UNUSABLE judge on {counts} "
                                  f"responses: it put less than {next(iter(judged.values()))['threshold']} of its "
                                  f"probability on the digits 1-5; those responses are unscored, not guessed.")
        self.stdout.write(f"evaluator {printable(evaluator)} on {len(items)} responses in {seconds:.1f} s. pooled: "
                          f"over all responses (G-Eval-Dialogue's E3); per-context: mean over the "
                          f"{len(set(groups))} dialogue contexts of each context's correlation (G-Eval's setting); "
                          f"a correlation needs {MIN_CORRELATION_N} scored responses and two distinct values on each "
                          f"side, or it is undefined (—); kendall is tau-b. Reference for reference-based evaluators: "
                          f"the knowledge fact.")
        self._report("scores", str(path), {
            "evaluator": evaluator, "evaluator_params": judge.params, "data": str(path),
            "n": len(items), "reference": "knowledge fact (`context`)",
            "seconds": round(seconds, 2), "criteria": results})

    def _write_pairs(self, pairs: list[dict], out: str) -> None:
        try:
            Path(out).write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from None

    def _import(self, read, path: str, out: str) -> None:
        try:
            pairs = read(path)
        except LabelledSetError as exc:
            raise CommandError(str(exc)) from None
        self._write_imported(pairs, out)

    def _write_imported(self, pairs: list[dict], out: str) -> None:
        self._write_pairs(pairs, out)
        ties = sum(1 for p in pairs if p["human"] == "tie")
        self.stdout.write(f"wrote {len(pairs)} pairs ({ties} human ties) to {printable(out)}")

    def do_import_pandalm(self, *, path, out, **_):
        self._import(pandalm_pairs, path, out)

    def do_import_llmbar(self, *, path, out, **_):
        self._import(llmbar_pairs, path, out)

    def do_import_mtbench(self, *, path, out, questions=None, **_):
        from django.conf import settings

        if questions is None and (Path(settings.LLMCHAIN_MTBENCH_DIR) / "question.jsonl").exists():
            questions = Path(settings.LLMCHAIN_MTBENCH_DIR) / "question.jsonl"
        try:
            pairs, counts = mtbench_pairs(path, questions)
        except LabelledSetError as exc:
            raise CommandError(str(exc)) from None
        self._write_imported(pairs, out)
        self.stdout.write(f"from {counts['judgements']} judgements; {counts['pairs_judged_more_than_once']} pairs "
                          f"judged more than once, {counts['pairs_disagreed']} of them with the judges disagreeing "
                          f"(the most frequent label wins, a tie when two are as frequent); categories from "
                          f"{printable(questions) if questions else 'nowhere (all MT-Bench)'}")

    def do_qualify(self, *, evaluator, sample=None, full=False, **_):
        from django.conf import settings

        from ...qualify import QualificationError, qualify

        self._evaluator(evaluator)  # an unknown name fails before anything is kept
        if sample is not None and sample < 1:
            raise CommandError(f"--sample must be at least 1, not {sample}")
        slow = evaluator.split(":")[0] in ("geval", "pairwise", "debate")
        per_set = None if full else sample if sample is not None else (settings.LLMCHAIN_QUALIFY_SAMPLE if slow else None)
        started = time.perf_counter()
        try:
            q = qualify(evaluator, per_set=per_set)
        except QualificationError as exc:
            raise CommandError(str(exc)) from None
        rows = [[printable(name), str(f["pairs_non_tie"]), _ci(f, "accuracy_non_tie", "accuracy_ci_low", "accuracy_ci_high"),
                 _pct(f["length_accuracy_non_tie"]),
                 _ci(f, "margin_over_length", "margin_over_length_ci_low", "margin_over_length_ci_high")]
                for name, f in [*q.figures["per_set"].items(), ("pooled", q.figures["pooled"])]]
        self._table(["set", "decided pairs", "accuracy [95%]", "longer wins", "margin [95%]"], rows)
        for name, why in q.figures.get("skipped", {}).items():
            self.stdout.write(f"{printable(name)} left out: {why}")
        pooled = q.figures["pooled"]
        if pos := pooled.get("position"):
            self.stdout.write(f"position consistency: {_pct(pos['consistency'])} ({pos['consistent']}/"
                              f"{pos['both_readable']} pairs read in both orders gave the same answer); first "
                              f"position wins {_pct(pos['first_position_win_rate'])} of {pos['decided_verdicts']} "
                              f"verdicts naming a winner")
        from ...qualify import refusal

        why = refusal(evaluator)
        self.stdout.write(f"{printable(evaluator)} {'qualified' if q.qualified else 'NOT qualified'}: weight "
                          f"{_pct(pooled['weight'])} ({'sample of ' + str(per_set) + ' per set' if per_set else 'every pair'}"
                          f", {time.perf_counter() - started:.1f} s); record {q.cid}" + (f". {why}" if why else ""))
        self.stdout.write(json.dumps({"evaluator": evaluator, "qualification": q.pk, "cid": q.cid,
                                      "qualified": q.qualified, "per_set": per_set, "sets": q.figures["sets"],
                                      "per_set_figures": q.figures["per_set"],
                                      "skipped_sets": q.figures.get("skipped", {}),
                                      **{k: v for k, v in pooled.items() if k != "prefers_longer"},
                                      "prefers_longer": pooled["prefers_longer"]}, sort_keys=True))

    def do_site(self, *, board="all", **_):
        from ...site_validity import plain_line, rating_line, site_validity

        if board != "all":
            try:
                board = resolve_context(board)
            except UnknownBoardContext as exc:
                raise CommandError(f"--context: {exc}") from None
        found = site_validity(board)
        for f in found.values():
            self.stdout.write(f"{printable(f['name'])}: {plain_line(f)} {rating_line(f['ratings'])}")
        self.stdout.write(json.dumps({"contexts": found}, sort_keys=True))

    def do_topical_pairs(self, *, data, out, criterion, **_):
        try:
            pairs = topical_chat.derive_pairs(topical_chat.load(data), criterion)
        except topical_chat.TopicalChatError as exc:
            raise CommandError(str(exc)) from None
        self._write_pairs(pairs, out)
        ties = sum(1 for p in pairs if p["human"] == "tie")
        self.stdout.write(f"wrote {len(pairs)} pairs ({ties} human ties on {criterion}) to {out}")


def validity_line(r: dict) -> str:
    """The evaluator against the length rule on the same decided pairs, in one line."""
    def pct(x):
        return "—" if x is None else f"{x:.3f}"

    longer = r["prefers_longer"]
    return (f"validity on {r['pairs_non_tie']} decided pairs: accuracy {pct(r['accuracy_non_tie'])} "
            f"[{pct(r['accuracy_ci_low'])}, {pct(r['accuracy_ci_high'])}]; the longer answer wins: "
            f"{pct(r['length_accuracy_non_tie'])}; margin {pct(r['margin_over_length'])} "
            f"[{pct(r['margin_over_length_ci_low'])}, {pct(r['margin_over_length_ci_high'])}] (paired bootstrap, "
            f"{r['bootstrap']['rounds']} rounds, 95%); weight earned {pct(r['weight'])}; picks the longer answer in "
            f"{pct(longer['rate'])} of its {longer['decided']} decided verdicts on pairs of unequal length")


def _judge_line(name: str, judged: dict) -> str:
    """One judge's position bias (MT-Bench's swap) and calibration, in one line."""
    pos, swap, cal = judged["position"], judged["swap_rule"], judged["calibration"]

    def f(x):
        return "—" if x is None else f"{x:.3f}"

    return (f"judge {printable(name)}: position consistency {f(pos['consistency'])} ({pos['consistent']}/"
            f"{pos['both_readable']} pairs asked in both orders), first-position win rate "
            f"{f(pos['first_position_win_rate'])} ({pos['first_position_wins']}/{pos['decided_verdicts']} decided "
            f"verdicts); swap rule (a flip is a tie): accuracy {f(swap['accuracy_non_tie'])}; calibration: ECE "
            f"{f(cal['ece'])} over {cal['n']} verdict distributions (accuracy {f(cal['accuracy'])}, mean confidence "
            f"{f(cal['mean_confidence'])}); unconstrained probability on the allowed verdicts "
            f"{f(judged['mean_verdict_mass'])}")


def _pct(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def _ci(f: dict, key: str, low: str, high: str) -> str:
    return f"{_pct(f[key])} [{_pct(f[low])}, {_pct(f[high])}]"


def _mass(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def _rate(rate, agreed: int, n: int) -> str:
    return "—" if rate is None else f"{rate:.3f} ({agreed}/{n})"
