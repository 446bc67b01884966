"""python manage.py bench {chain,scoring,boards,markdown} [...]: benchmarks; each prints, as its last line, one JSON object
with its headline figures. The benches live in the top-level `bench` package; each action imports
only its own (the scoring bench loads torch, which the boards bench's child processes need not)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.chain.client import ChainError
from apps.chain.node import NodeError

CHAIN_HELP = """\
Offer calls at a sweep of rates to a fresh local anvil node (block time 1 s, free gas) through
the real outbox and submitter, and print per function and rate the confirmed calls per second,
the p50/p95 latency from enqueue to confirmation (the paper's Fig. 7), the ratio to the raw node
ceiling (pipelined signed no-op transfers) measured in the same run, whether the step saturated
and, when it did, what bounded it (CPU of the submitter, anvil, PostgreSQL and the bench; the
fullest block; calls per submitter pass; with --profile, the submitter's cProfile summary).

Functions (default autoEval,humEval,updateReputation,complete): autoEval (the oracle, batched);
humEval, ratings signed by their raters (ERC-2771, EIP-712; all signed before the timed part)
and relayed by the relayer in executeBatch; updateReputation, the relayer's, batched; complete,
an interaction's autoEval + relayed humEval + updateReputation queued together as the site
queues a rating (confirmed when all three are); also addModel and humEval-direct (ratings sent
from the raters' own addresses, LLMCHAIN_RELAY=0). Setup (keys, registrations, contexts,
models, the interactions humEval rates, the ratings updateReputation updates, the signing of
requests) is not timed. At every rate: 0 lost, 0 applied twice, the calls counted on-chain in
the step's blocks equal the confirmed calls; at the end each rater's forwarder nonce equals their
confirmed requests. The default run takes about 10 minutes on 2 cores.

Database: the bench uses this command's database (DATABASE_URL). Every sender it uses is a
key it creates, and it deletes its own outbox, transaction, sender and key rows at the end
(--keep-rows keeps them). It refuses to start if the database holds other pending outbox rows
or a running submitter's lease, since its submitter would send those to the throw-away node:
for a clean measurement use a scratch database (PostgreSQL, as in production, or SQLite), e.g.
  createdb bench; DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench python manage.py migrate
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench python manage.py bench chain
"""


SCORING_HELP = """\
Score the (answer, reference) pairs the oracle would score (each interaction's MT-Bench answer
against the answers of the top-k other models of its context, so references recur) with the
plain bert_score.score(...) call (one call over all pairs, its default batch size) and with the
project's scorer (lib/metrics/bertscore.py, empty cache each timed run), in the same run with
the same torch threads, warm-up not timed. Fails (non-zero exit) when their raw F1 differ by
more than 1e-3. The last line is one JSON object: pairs, baseline_pairs_per_s,
project_pairs_per_s, ratio, max_abs_diff.
"""


BOARDS_HELP = """\
Fill a scratch database with MODELS x CONTEXTS pairs and EVALUATIONS autoEval interactions
(synthetic, generated in bulk through the contract's Python mirror, not through a node: about
90 % with a reference, 10 % also rated by their user with humEval + updateReputation), derive the
boards' table with entries.rebuild() as the indexer would, then serve the site with daphne
(llmchain_site.asgi, DEBUG off; SERVERS processes sharing one listening socket on loopback) and
measure the board page (/?context=ID&sort=..&dir=..) and the board API (/api/boards/ID?sort=..)
over random contexts (the global one and every context) and sorts, under closed-loop load from
CLIENTS concurrent keep-alive connections (a separate process). Every board view is served a
few times first, then a warm-up; the figures cover the measured DURATION only: p50/p95/p99
latency and requests per second per kind (page, api, all), and the machine's CPU use in that
window. Before the load, every board served by the API is compared with build_board on the
same database, and one board is timed recomputed from the raw ReputationChange rows. In the
same run the same load is measured with the boards' cache bypassed (a DummyCache) as the
baseline (--skip-baseline skips it). Then, on the same servers, the live phase: the same load while
--live-rate evaluations a second are folded, its window starting once the answers kept at rest could
all be past LLMCHAIN_BOARD_MAX_STALE_S; it reports the same figures and what the board cache answered
(shares current, stale, waited for a render, rendered for their request; renders a second). Target:
p95 under 50 ms at 50 clients. Fails (non-zero exit) on any non-200 response or a served board that
differs from build_board. The last line is one JSON object: p50_ms, p95_ms, p99_ms, rps, clients,
evaluations, and more (baseline, live, cache, recompute_ms, setup_s, machine).

Database: never this command's own. The bench works in a folder (--dir, default
VAR_DIR/bench-boards): a scratch SQLite file boards.sqlite3 that it creates, migrates and fills
(DATABASE_URL set for its child processes), boards.json recording what it was filled with,
bench-ipfs/ (the models' metadata records), logs/ and served/. A database filled with the same
parameters is reused (the fill of 1,000,000 evaluations takes about ten minutes); when only the
migrations changed it is migrated and its board entries rebuilt (a minute or two); --refill
regenerates it, --fill-only makes it ready and stops. A boards.sqlite3 without boards.json beside it is refused. Setup is timed and printed, never part of the figures. DATABASE_CONN_MAX_AGE and the other
settings' variables pass through to the servers as they are.
"""


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or min(values) <= 0:
        raise ValueError("rates must be positive")
    return values


def name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


class Command(BaseCommand):
    help = ("Benchmarks. `bench chain`: ledger throughput and latency (see `bench chain --help`); "
            "`bench scoring`: the oracle's BERTScore scorer against plain bert_score; "
            "`bench boards`: the board page and API under concurrent load (see `bench boards --help`); "
            "`bench markdown`: how long a model answer takes to render, and its stages.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("chain", help="outbox + submitter throughput and latency on a fresh anvil node",
                           description=CHAIN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--rates", type=int_list, default=None,
                       help="offered rates in calls (complete: interactions) per second "
                            "(default 250,500,1000,1500,2000,3000,4000)")
        p.add_argument("--duration", type=float, default=10, help="seconds of offered load per step (default 10)")
        p.add_argument("--batch", type=int, default=None,
                       help="the submitter's batch size: up to N consecutive batchable calls of one sender, or "
                            "N relayed requests, per transaction; 1 = one call per transaction (default: the site's "
                            f"LLMCHAIN_TX_BATCH, {settings.LLMCHAIN_TX_BATCH})")
        p.add_argument("--functions", type=name_list, default=None,
                       help="which calls to offer, among autoEval,humEval,updateReputation,complete,addModel,"
                            "humEval-direct (default autoEval,humEval,updateReputation,complete)")
        p.add_argument("--users", type=int, default=200,
                       help="raters, each signing with consecutive forwarder nonces (humEval-direct: one nonce "
                            "lane each) (default 200)")
        p.add_argument("--submitter", choices=["process", "thread"], default="process",
                       help="run the submitter as `manage.py chain submit` in its own process (default) or in a "
                            "thread of the bench process")
        p.add_argument("--ceiling-duration", type=float, default=8, help="seconds of no-op transfers (default 8)")
        p.add_argument("--drain-timeout", type=float, default=120,
                       help="longest wait for a step's calls to be confirmed after its load stops (default 120)")
        p.add_argument("--work-dir", type=Path, default=None,
                       help="where the anvil and submitter logs go (default: a new temporary folder)")
        p.add_argument("--full-sweep", action="store_true",
                       help="offer every rate even after a function saturated (by default its higher rates are "
                            "skipped once confirmed/s falls under 85%% of the offered rate)")
        p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                       help="run the submitter process under cProfile, one DIR/submitter-<function>-<rate>.prof "
                            "per step, and print a summary of each saturated step's (slows the submitter)")
        p.add_argument("--keep-rows", action="store_true", help="keep the bench's rows in the database")
        p.add_argument("--submitters", type=int, default=2,
                       help="submitter processes side by side (`chain submit --shard i/N`), one oracle key and one "
                            "relayer key each: autoEval calls spread over their lanes by interaction, relayed "
                            "ratings by rater (default 2)")
        p.add_argument("--nodes", choices=["step", "function", "one"], default="step",
                       help="where the steps run: each (function, rate) on a fresh node of its own (step, the "
                            "default), each function's sweep on one fresh node (function), or all on one node "
                            "(one): anvil's work per block grows with the storage the earlier steps left")
        p.add_argument("--one-node", action="store_const", dest="nodes", const="one", help="the same as --nodes one")

        s = sub.add_parser("scoring", help="the project's BERTScore scorer against plain bert_score.score",
                           description=SCORING_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
        s.add_argument("--data", type=Path, default=None,
                       help=f"MT-Bench folder (default: LLMCHAIN_MTBENCH_DIR, {settings.LLMCHAIN_MTBENCH_DIR})")
        s.add_argument("--pairs", type=int, default=600, help="pairs to score (default 600)")
        s.add_argument("--k", type=int, default=3, help="references per answer (default 3)")
        s.add_argument("--seed", type=int, default=0, help="seed of the interactions and rankings (default 0)")
        s.add_argument("--repeat", type=int, default=1,
                       help="timed runs per side, interleaved A B / B A; figures are means (default 1)")
        s.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default: torch's)")

        m = sub.add_parser("markdown", help="rendering a Markdown answer (lib/markdown.render) and its stages")
        m.add_argument("--size", type=int, default=20_000, help="characters of the answer (default 20000)")
        m.add_argument("--repeat", type=int, default=20, help="timed runs per stage (default 20)")

        b = sub.add_parser("boards", help="the board page and API under concurrent load, cached and not",
                           description=BOARDS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
        b.add_argument("--models", type=int, default=100, help="models (default 100)")
        b.add_argument("--contexts", type=int, default=20, help="contexts besides the global one (default 20)")
        b.add_argument("--evaluations", type=int, default=1_000_000,
                       help="autoEval interactions (default 1000000)")
        b.add_argument("--clients", type=int, default=50, help="concurrent keep-alive clients (default 50)")
        b.add_argument("--duration", type=float, default=20, help="measured seconds per configuration (default 20)")
        b.add_argument("--warmup", type=float, default=5, help="seconds of unmeasured load first (default 5)")
        b.add_argument("--servers", type=int, default=2,
                       help="daphne processes sharing the listening socket (default 2)")
        b.add_argument("--seed", type=int, default=0, help="seed of the synthetic history and the load (default 0)")
        b.add_argument("--dir", dest="folder", type=Path, default=None,
                       help="the bench's folder (default VAR_DIR/bench-boards)")
        b.add_argument("--refill", action="store_true", help="regenerate the scratch database even if it matches")
        b.add_argument("--skip-baseline", action="store_true", help="measure only the cached configuration")
        b.add_argument("--arena-only", action="store_true",
                       help="only the arena columns' figures (tally, fit, bootstrap, style, refit), on a scratch "
                            "database of votes alone (--evaluations of them, default 1,000,000)")
        # The steps the bench runs in its child processes (not for direct use).
        b.add_argument("--live-rate", type=int, default=100,
                       help="evaluations a second folded (and their boards invalidated) during a second measurement "
                            "on the same servers, what a live site's readers get (default 100; 0: no such phase)")
        b.add_argument("--gzip", action="store_true",
                       help="the clients send Accept-Encoding: gzip, as browsers do (default: none, the costlier case)")
        b.add_argument("--fill-only", action="store_true",
                       help="only make the scratch database ready (fill it, or migrate a filled one), measure nothing")
        b.add_argument("--phase", choices=["fill", "migrate", "check", "load", "fold"], default=None,
                       help=argparse.SUPPRESS)
        b.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
        b.add_argument("--spec", type=Path, default=None, help=argparse.SUPPRESS)

    def handle(self, *args, action, **opts):
        try:
            summary, failures = getattr(self, f"do_{action}")(**opts)
        except (ChainError, NodeError, ValueError, RuntimeError) as exc:  # a BenchError is a RuntimeError
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(summary))
        if failures:
            raise CommandError("; ".join(failures))

    def out(self, line: str) -> None:
        """A bench's progress and table line, flushed at once: a run takes minutes."""
        self.stdout.write(line)
        self.stdout.flush()

    def do_boards(self, models=100, contexts=20, evaluations=1_000_000, clients=50, duration=20, warmup=5, servers=2,
                  seed=0, folder=None, refill=False, skip_baseline=False, arena_only=False, live_rate=100, phase=None,
                  port=None, spec=None, fill_only=False, gzip=False, **_):
        from bench import boards

        if phase:
            return boards.run_phase(phase, Path(folder), self.out, port=port, spec=spec), []
        config = boards.BoardsBenchConfig(models=models, contexts=contexts, evaluations=evaluations, clients=clients,
                                          duration=duration, warmup=warmup, servers=servers, seed=seed,
                                          work_dir=folder, refill=refill, baseline=not skip_baseline,
                                          arena_only=arena_only, live_rate=live_rate, fill_only=fill_only,
                                          gzip=gzip)
        summary = boards.run_boards_bench(config, self.out)
        return summary, boards.failures(summary)

    def do_markdown(self, size=20_000, repeat=20, **_):
        from bench import markdown

        if size <= 0 or repeat <= 0:
            raise ValueError("--size and --repeat must be positive")
        return markdown.run_markdown_bench(size=size, repeat=repeat, out=self.out), []

    def do_scoring(self, data=None, pairs=600, k=3, seed=0, repeat=1, threads=None, **_):
        from bench import scoring

        data = Path(data) if data is not None else Path(settings.LLMCHAIN_MTBENCH_DIR)
        summary = scoring.run_scoring_bench(data, pairs=pairs, k=k, seed=seed, repeat=repeat, threads=threads,
                                            out=self.out)
        return summary, scoring.failures(summary)

    def do_chain(self, rates=None, duration=10, batch=None, functions=None, users=200, submitter="process",
                 ceiling_duration=8, drain_timeout=120, work_dir=None, keep_rows=False, full_sweep=False,
                 profile=None, nodes="step", submitters=2, **_):
        from bench import chain

        config = chain.ChainBenchConfig(
            rates=rates or list(chain.DEFAULT_RATES), duration=duration,
            batch=settings.LLMCHAIN_TX_BATCH if batch is None else batch,
            functions=functions or list(chain.DEFAULT_FUNCTIONS), users=users, submitter=submitter,
            ceiling_duration=ceiling_duration, drain_timeout=drain_timeout, work_dir=work_dir, keep_rows=keep_rows,
            stop_when_saturated=not full_sweep, profile_dir=profile, nodes=nodes,
            submitters=1 if submitter == "thread" else submitters)
        return chain.headline(chain.run_chain_bench(config, self.out)), []
