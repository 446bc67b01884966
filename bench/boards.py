"""The boards benchmark behind `python manage.py bench boards`.

What it measures: the board page and the board API, served by the production server (daphne
running `llmchain_site.asgi`, DEBUG off) from a database of `models` x `contexts` pairs and
`evaluations` autoEval interactions, under closed-loop load from `clients` concurrent keep-alive
HTTP/1.1 connections on loopback: p50/p95/p99 latency and requests per second, per kind of
request (page, api) and overall. In the same run, the same load against servers whose cache is
a DummyCache (every request builds and renders its board from BoardEntry) shows what the
boards' cache buys, and the check step times a board recomputed from the raw ReputationChange
rows (what serving without the precomputed table would cost per request).

The data: a synthetic chain history, generated in bulk rather than through a node, but with the
contract's exact arithmetic: every call goes through `lib.reputation.ReputationModel` (the
Python mirror of the Reputation contract) and every ReputationUpdated event the contract would
emit becomes a ReputationChange row (autoEval emits for (model, context) and (model, global)
when it creates the REP or has a reference; humEval and updateReputation always emit for
both), so `lib.boardstats` reads the histories back exactly and every band is computed. The
rows go in with raw `executemany`, then `entries.rebuild()` derives BoardEntry as the indexer
would.

Where: everything lives in a work folder (default VAR_DIR/bench-boards): the scratch SQLite
database (boards.sqlite3), a sidecar (boards.json) recording the parameters it was filled
with, its IPFS store (bench-ipfs/, the models' metadata records), the servers' logs, and the
API bodies the check compared. The command's own database is never opened. A database filled
with the same parameters under the same migrations is reused; `refill` regenerates it.

The arena: as many votes as evaluations (1,000,000 by default) between the same models, spread over
the same contexts, go into the same database as ArenaBattle rows (1% voided, 0.5% not voted yet) with
their answers' measured style (AnswerStyle), and `arena_entries.rebuild()` fits every board's arena
before the servers start, so the boards under load carry the arena columns. In the check phase the
arena is timed: lib.arena's stages on the same number of votes in memory (tally, fit, 100-round
bootstrap, style fit, its bootstrap), then, from the database, the refresh of the global board and
of one context (load the votes, fit both, write the entries) and what one new vote costs end to end
(its context and the global board refitted), all under one BLAS thread as the site runs it.
`arena_only` does just that, on its own scratch database (arena.sqlite3: the votes without the
reputation history, filled in a minute or two instead of many).

Processes: this one (the orchestrator) runs the steps that need the scratch database as
`manage.py bench boards --phase fill|check` with DATABASE_URL pointing at it, the servers as
`python -m llmchain_site.serve` (daphne, as the web processes run) on one loopback port (a
SO_REUSEPORT socket each), and the load generator as `manage.py bench boards --phase load`: its own
process, one asyncio connection per client (`Connection`), every request's latency recorded after the
warm-up.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import html
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone as dt_timezone
from decimal import Decimal
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Count
from django.db.migrations.loader import MigrationLoader

import numpy as np

from apps.chain import evidence
from apps.chain.models import ArenaBattle, Context, LedgerInteraction, LedgerModel, Reputation, ReputationChange
from apps.leaderboard import arena, arena_entries, boards, entries
from apps.leaderboard.api import board_data
from apps.leaderboard.models import AnswerStyle, ArenaEntry, BoardEntry, BoardState
from lib import arena as lib_arena
from lib import records
from lib.ids import hex32
from lib.reputation import GLOBAL_CONTEXT, GLOBAL_CONTEXT_ID, WAD, ReputationModel, minutes_since

from .common import BenchError, Out, debug_off_env, manage_py, percentile

TARGET_P95_MS = 50.0
BLOCK_SECONDS = 2  # one call per block, a block every 2 s
START_TIMESTAMP = 1_735_689_600  # 2025-01-01T00:00:00Z, when the synthetic users register
HUMAN_DELAY_CALLS = (10, 3000)  # a human rates an answer this many calls after its autoEval
BATCH_CALLS = 50_000  # autoEvals per insert transaction
GENERATOR_VERSION = 2  # bump when the synthetic history changes: older fills are regenerated (2: arena votes)
ARENA_GENERATOR_VERSION = 1
DB_NAME = "boards.sqlite3"
SIDECAR = "boards.json"
ARENA_DB_NAME = "arena.sqlite3"  # arena_only's database: the votes alone
ARENA_SIDECAR = "arena.json"
ARENA_BATCH = 100_000  # votes per insert transaction
ARENA_BOOTSTRAP = 100  # the plain bootstrap's rounds measured (the site's default)
UNCACHED_SETTINGS = "bench_boards_uncached_settings"
KINDS = ("page", "api")


@dataclass
class BoardsBenchConfig:
    models: int = 100
    contexts: int = 20
    evaluations: int = 1_000_000  # autoEval interactions
    human_share: float = 0.1  # of interactions, rated by their user (humEval + updateReputation)
    reference_share: float = 0.9  # of autoEvals, scored against a reference (they move Ra)
    users: int = 1000
    seed: int = 0
    clients: int = 50
    duration: float = 20.0  # measured seconds per configuration
    warmup: float = 5.0  # seconds of load before the measured window (after every URL was served)
    servers: int = 2  # daphne processes sharing the listening socket
    baseline: bool = True  # also measure with the boards' cache bypassed
    refill: bool = False
    work_dir: Path | None = None
    arena_only: bool = False  # only the arena's figures, on a database of votes alone
    live_rate: int = 100  # evaluations a second folded during the live phase (0: no live phase)
    fill_only: bool = False  # make the scratch database ready (fill or migrate it), measure nothing
    gzip: bool = False  # the clients send Accept-Encoding: gzip (as browsers do); by default they send none

    def __post_init__(self):
        if min(self.models, self.contexts, self.evaluations, self.clients, self.servers) < 1 or self.duration <= 0 \
                or self.warmup < 0:
            raise ValueError("--models, --contexts, --evaluations, --clients and --servers must be at least 1, "
                             "--duration positive")

    @property
    def folder(self) -> Path:
        return Path(self.work_dir or Path(settings.VAR_DIR) / "bench-boards").resolve()

    def data_params(self) -> dict:
        """What the database's content depends on (a sidecar with other values is refilled)."""
        return {"models": self.models, "contexts": self.contexts, "evaluations": self.evaluations,
                "human_share": self.human_share, "reference_share": self.reference_share, "users": self.users,
                "seed": self.seed, "generator": GENERATOR_VERSION, "arena": self.arena_params()}

    def arena_params(self) -> dict:
        """What the arena votes depend on: as many votes as evaluations, between the same models."""
        return {"models": self.models, "contexts": self.contexts, "votes": self.evaluations, "seed": self.seed,
                "generator": ARENA_GENERATOR_VERSION}


def schema() -> list[str]:
    """The latest migration of every app, as the code on disk has them: a database filled under
    other migrations is filled again."""
    return sorted(f"{app}.{name}" for app, name in MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes())


# --- the synthetic chain ---------------------------------------------------------------------

def synthetic_id(kind: str, index: int) -> bytes:
    return hashlib.sha256(f"llmchain-bench-boards:{kind}:{index}".encode()).digest()


def context_ids(contexts: int) -> list[str]:
    """The synthetic contexts' ids (the global one not included): known without the database."""
    return [hex32(synthetic_id("context", i)) for i in range(contexts)]


def model_name(index: int) -> str:
    return f"bench-model-{index:03d}"


def context_name(index: int) -> str:
    return f"bench-context-{index:02d}"


CHANGE_COLUMNS = ("block_number", "log_index", "tx_hash", "interaction_id", "model_id", "context_id", "ra", "rh", "r",
                  "n_auto", "n_human", "timestamp")
INTERACTION_COLUMNS = ("interaction_id", "model_id", "context_id", "user", "has_reference", "sa", "wa",
                       "evidence_cid", "auto_tx", "auto_block", "sh", "wh", "d_minutes", "human_tx", "reputation_tx")


@dataclass
class Pending:
    """An interaction waiting for its user's rating: its Interaction row, completed on updateReputation."""

    iid: bytes
    model: bytes
    context: bytes
    user: str
    row: list


class SyntheticChain:
    """Drives the contract's Python mirror with synthetic calls, one call per block, and collects
    the rows the indexer would write for them: Interaction, ReputationChange and, at the end,
    Reputation. Deterministic for a seed."""

    def __init__(self, params: dict):
        self.p = params
        self.rnd = random.Random(params["seed"])
        self.mirror = ReputationModel()
        self.models = [synthetic_id("model", i) for i in range(params["models"])]
        self.contexts = [synthetic_id("context", i) for i in range(params["contexts"])]
        self.users = [f"0x{int.from_bytes(synthetic_id('user', i)[:20], 'big'):040x}" for i in range(params["users"])]
        self.hex = {b: hex32(b) for b in [*self.models, *self.contexts, GLOBAL_CONTEXT]}
        for user in self.users:
            self.mirror.register(user, START_TIMESTAMP)
        for ctx in self.contexts:
            self.mirror.add_context(ctx)
        for model in self.models:
            self.mirror.add_model(model)
        # Each model has a quality, each pair its own around it: the boards have an order to show.
        rnd = self.rnd
        base = {m: 0.3 + 0.55 * rnd.random() for m in self.models}
        self.quality = {(m, c): min(0.97, max(0.03, base[m] + rnd.gauss(0, 0.08)))
                        for m in self.models for c in self.contexts}
        # Popularity: some models and contexts see more traffic than others.
        pairs = [(m, c) for m in self.models for c in self.contexts]
        weights = [1 / (1 + i % 37) ** 0.5 for i in range(len(pairs))]
        rnd.shuffle(weights)
        self.pairs, self.weights = pairs, weights
        self.block = 0
        self.timestamp = START_TIMESTAMP
        self.changes: list[tuple] = []
        self.interactions: list[list] = []
        self.last_block: dict[tuple[bytes, bytes], int] = {}
        self.counts = {"autoEval": 0, "with_reference": 0, "humEval": 0, "updateReputation": 0}

    # -- one call per block ------------------------------------------------------------------
    def _next_block(self) -> str:
        self.block += 1
        self.timestamp += BLOCK_SECONDS
        return f"0x{self.block:064x}"  # the block's single transaction

    def _emit(self, tx: str, log_index: int, iid_hex: str, model: bytes, ctx: bytes) -> None:
        rep = self.mirror.reps[(model, ctx)]
        self.changes.append((self.block, log_index, tx, iid_hex, self.hex[model], self.hex[ctx], rep.ra, rep.rh, rep.r,
                             rep.n_auto, rep.n_human, self.timestamp))
        self.last_block[(model, ctx)] = self.block

    def auto_eval(self, model: bytes, ctx: bytes) -> Pending | None:
        rnd = self.rnd
        iid = rnd.randbytes(32)
        iid_hex = hex32(iid)
        user = self.users[int(rnd.random() * len(self.users))]
        has_reference = rnd.random() < self.p["reference_share"]
        q = self.quality[(model, ctx)]
        sa = int(min(1.0, max(0.0, rnd.gauss(q, 0.15))) * WAD)
        wa = int((0.5 + 0.5 * rnd.random()) * WAD)
        existed = ((model, ctx) in self.mirror.reps, (model, GLOBAL_CONTEXT) in self.mirror.reps)
        self.mirror.auto_eval(iid, model, ctx, user, has_reference, sa, wa)
        tx = self._next_block()
        log_index = 0
        for c, had in ((ctx, existed[0]), (GLOBAL_CONTEXT, existed[1])):
            if has_reference or not had:
                self._emit(tx, log_index, iid_hex, model, c)
                log_index += 1
        self.counts["autoEval"] += 1
        self.counts["with_reference"] += has_reference
        row = [iid_hex, self.hex[model], self.hex[ctx], user, has_reference, sa, wa, "", tx, self.block,
               None, None, None, "", ""]
        if rnd.random() < self.p["human_share"]:
            return Pending(iid, model, ctx, user, row)
        del self.mirror.interactions[iid]  # done: the mirror need not remember it
        self.interactions.append(row)
        return None

    def human_eval(self, it: Pending) -> None:
        """The user's humEval, then updateReputation in the next block."""
        rnd, mirror = self.rnd, self.mirror
        q = self.quality[(it.model, it.context)]
        answer = [min(5, max(1, round(1 + 4 * q + rnd.gauss(0, 0.9)))) for _ in range(3)]
        profile = [1 + int(rnd.random() * 5) for _ in range(3)]
        tx = self._next_block()
        previous = mirror.last_human_eval_at.get(it.user, mirror.registered_at[it.user])
        d_minutes = minutes_since(self.timestamp - previous)
        mirror.hum_eval(it.iid, it.user, self.timestamp, *answer, *profile)
        iid_hex = it.row[0]
        self._emit(tx, 0, iid_hex, it.model, it.context)
        self._emit(tx, 1, iid_hex, it.model, GLOBAL_CONTEXT)
        done = mirror.interactions[it.iid]
        it.row[10:14] = [done.sh, done.wh, d_minutes, tx]
        tx = self._next_block()
        mirror.update_reputation(it.iid)
        self._emit(tx, 0, iid_hex, it.model, it.context)
        self._emit(tx, 1, iid_hex, it.model, GLOBAL_CONTEXT)
        it.row[14] = tx
        del mirror.interactions[it.iid]
        self.interactions.append(it.row)
        self.counts["humEval"] += 1
        self.counts["updateReputation"] += 1

    def _take(self) -> tuple[list[tuple], list[list]]:
        batch = (self.changes, self.interactions)
        self.changes, self.interactions = [], []
        return batch

    def batches(self, batch_calls: int = BATCH_CALLS) -> Iterator[tuple[list[tuple], list[list]]]:
        """(ReputationChange rows, Interaction rows) in chain order, about `batch_calls` autoEvals at a time.
        Every pair gets at least one evaluation (the first pairs are each pair once, shuffled)."""
        rnd = self.rnd
        total = self.p["evaluations"]
        first = list(self.pairs)
        rnd.shuffle(first)
        waiting: list[tuple[int, int, Pending]] = []  # (due call, sequence, interaction)
        k = 0
        while k < total:
            n = min(batch_calls, total - k)
            picks = first[k:k + n] if k < len(first) else []
            picks += rnd.choices(self.pairs, weights=self.weights, k=n - len(picks))
            for model, ctx in picks:
                while waiting and waiting[0][0] <= k:
                    self.human_eval(heapq.heappop(waiting)[2])
                pending = self.auto_eval(model, ctx)
                if pending is not None:
                    heapq.heappush(waiting, (k + rnd.randint(*HUMAN_DELAY_CALLS), k, pending))
                k += 1
            if k >= total:
                while waiting:
                    self.human_eval(heapq.heappop(waiting)[2])
            yield self._take()

    def reputation_rows(self) -> list[tuple]:
        """(model_id, context_id, ra, rh, r, n_auto, n_human, block_number) of every REP, as last emitted."""
        return [(self.hex[m], self.hex[c], rep.ra, rep.rh, rep.r, rep.n_auto, rep.n_human, self.last_block[(m, c)])
                for (m, c), rep in self.mirror.reps.items()]


# --- the fill (runs against the scratch database) ------------------------------------------------

def _insert(model, columns: tuple[str, ...], rows) -> None:
    qn = connection.ops.quote_name
    cols = ", ".join(qn(model._meta.get_field(c).column) for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {qn(model._meta.db_table)} ({cols}) VALUES ({marks})", rows)


def fill(params: dict, out: Out) -> dict:
    """Migrate the (empty) scratch database and fill it with the synthetic chain; returns counts and timings."""
    timings = {}
    t = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    timings["migrate_s"] = time.perf_counter() - t
    out(f"setup: migrated the scratch database in {timings['migrate_s']:.1f} s")
    if ReputationChange.objects.exists() or LedgerInteraction.objects.exists():
        raise BenchError(f"{connection.settings_dict['NAME']} already holds indexed rows")
    if connection.vendor == "sqlite":  # a scratch file: durability does not matter while it is filled
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA synchronous=OFF")
            cursor.execute("PRAGMA cache_size=-262144")

    t = time.perf_counter()
    chain = SyntheticChain(params)
    store = evidence.default_store()
    ledger_models = []
    for i, model in enumerate(chain.models):
        owner = f"0x{int.from_bytes(synthetic_id('owner', i)[:20], 'big'):040x}"
        record = records.model_metadata(name=model_name(i), provider="bench", owner=owner, endpoint_kind="replay",
                                        description="A synthetic model of `manage.py bench boards`.")
        ledger_models.append(LedgerModel(model_id=hex32(model), owner=owner, block_number=0,
                                         metadata_cid=store.put(records.canonical(record))))
    LedgerModel.objects.bulk_create(ledger_models)
    Context.objects.bulk_create([Context(context_id=hex32(c), name=context_name(i), block_number=0)
                                 for i, c in enumerate(chain.contexts)])
    timings["registry_s"] = time.perf_counter() - t

    generate = insert = 0.0
    changes = interactions = 0
    batches = chain.batches()
    while True:
        t = time.perf_counter()
        batch = next(batches, None)
        generate += time.perf_counter() - t
        if batch is None:
            break
        t = time.perf_counter()
        change_rows, interaction_rows = batch
        for row in interaction_rows:
            if row[12] is not None:
                row[12] = connection.ops.adapt_decimalfield_value(Decimal(row[12]), 30, 0)
        with transaction.atomic():
            _insert(ReputationChange, CHANGE_COLUMNS, change_rows)
            _insert(LedgerInteraction, INTERACTION_COLUMNS, interaction_rows)
        insert += time.perf_counter() - t
        changes += len(change_rows)
        interactions += len(interaction_rows)
        out(f"setup: {interactions:,} interactions, {changes:,} ReputationChange rows "
            f"(generate {generate:.1f} s, insert {insert:.1f} s)")
    t = time.perf_counter()
    now = connection.ops.adapt_datetimefield_value(datetime.fromtimestamp(chain.timestamp, tz=dt_timezone.utc))
    with transaction.atomic():
        _insert(Reputation, ("model_id", "context_id", "ra", "rh", "r", "n_auto", "n_human", "block_number",
                             "updated_at"), [(*row, now) for row in chain.reputation_rows()])
    insert += time.perf_counter() - t
    timings["generate_s"], timings["insert_s"] = generate, insert

    t = time.perf_counter()
    written = entries.rebuild()
    timings["rebuild_s"] = time.perf_counter() - t
    out(f"setup: entries.rebuild() wrote {written:,} board entries in {timings['rebuild_s']:.1f} s")
    arena_filled = fill_arena_votes(params["arena"], out, first_block=chain.block + 1)
    timings.update(arena_filled["timings"])
    counts = {**chain.counts, "interactions": interactions, "reputation_changes": changes,
              "reputations": len(chain.mirror.reps), "board_entries": BoardEntry.objects.count(), "blocks": chain.block,
              **arena_filled["counts"]}
    return {"counts": counts, "timings": {k: round(v, 2) for k, v in timings.items()}}


# --- the arena's votes --------------------------------------------------------------------------

def _hex_ids(rng: np.random.Generator, n: int) -> list[str]:
    """n random 32-byte ids as 0x-hex (ids on-chain are hashes: their order says nothing)."""
    words = rng.integers(0, 2**63, size=(n, 4), dtype=np.int64)
    return [f"0x{a:016x}{b:016x}{c:016x}{d:016x}" for a, b, c, d in words.tolist()]


def synthetic_votes(params: dict, start: int, n: int, first_block: int) -> tuple[list[tuple], list[tuple]]:
    """Votes start..start+n-1 of the synthetic arena, as (ArenaBattle rows, AnswerStyle rows). Models have
    strengths ~ N(0, 1) in log-odds, the longer answer gets +0.3 per RMS of the length difference; 15%
    ties, 5% both bad, 1% voided, 0.5% not voted yet; ten votes a block. Deterministic for the params."""
    models = [hex32(synthetic_id("model", i)) for i in range(params["models"])]
    contexts = context_ids(params["contexts"])
    strength = np.random.default_rng(params["seed"]).normal(0.0, 1.0, len(models))
    rng = np.random.default_rng([params["seed"], 22, start])
    m = len(models)
    a = rng.integers(0, m, n)
    b = (a + rng.integers(1, m, n)) % m
    ctx = rng.integers(0, len(contexts), n)
    len_a, len_b = rng.lognormal(6, 0.7, n).astype(int) + 1, rng.lognormal(6, 0.7, n).astype(int) + 1
    md_a, md_b = rng.gamma(2.0, 3.0, n), rng.gamma(2.0, 3.0, n)
    length = lib_arena.normalized_difference(len_a, len_b)
    p = 1.0 / (1.0 + np.exp(-(strength[a] - strength[b] + 0.3 * length / 0.35)))  # 0.35: about the RMS
    u = rng.random(n)
    outcome = np.where(u < 0.15, 3, np.where(u < 0.2, 4, np.where(rng.random(n) < p, 1, 2)))
    kind = rng.random(n)  # < 0.01 voided, < 0.015 not voted
    battle_ids, interactions = _hex_ids(rng, n), _hex_ids(rng, 2 * n)
    user = "0x" + "be" * 20
    battles, styles = [], []
    for k in range(n):
        block = first_block + (start + k) // 10
        voided, voted = bool(kind[k] < 0.01), not 0.01 <= kind[k] < 0.015
        ia, ib = interactions[2 * k], interactions[2 * k + 1]
        battles.append((battle_ids[k], contexts[ctx[k]], models[a[k]], models[b[k]], ia, ib, user, voided, block,
                        f"0x{block:064x}", int(outcome[k]) if voted else None, (not voided) if voted else None,
                        block if voted else None, f"0x{block:064x}" if voted else ""))
        styles.append((ia, int(len_a[k]), float(md_a[k]), "evidence"))
        styles.append((ib, int(len_b[k]), float(md_b[k]), "evidence"))
    return battles, styles


BATTLE_COLUMNS = ("battle_id", "context_id", "model_a", "model_b", "interaction_a", "interaction_b", "user", "voided",
                  "block_number", "tx", "outcome", "counted", "vote_block", "vote_tx")
STYLE_COLUMNS = ("interaction_id", "length", "markdown", "source")


def fill_arena_votes(params: dict, out: Out, *, first_block: int = 1) -> dict:
    """The synthetic arena's ArenaBattle and AnswerStyle rows (the answers' style as a refresh measures
    it), then every board's arena fitted with arena_entries.rebuild() as after an indexer's catch-up."""
    if ArenaBattle.objects.exists():
        raise BenchError(f"{connection.settings_dict['NAME']} already holds arena battles")
    generate = insert = 0.0
    total = params["votes"]
    for start in range(0, total, ARENA_BATCH):
        t = time.perf_counter()
        battles, styles = synthetic_votes(params, start, min(ARENA_BATCH, total - start), first_block)
        generate += time.perf_counter() - t
        t = time.perf_counter()
        with transaction.atomic():
            _insert(ArenaBattle, BATTLE_COLUMNS, battles)
            _insert(AnswerStyle, STYLE_COLUMNS, styles)
        insert += time.perf_counter() - t
        out(f"setup: {start + len(battles):,} arena battles (generate {generate:.1f} s, insert {insert:.1f} s)")
    t = time.perf_counter()
    boards_fitted = arena_entries.rebuild()
    rebuild = time.perf_counter() - t
    counted = ArenaBattle.objects.filter(counted=True).count()
    out(f"setup: {counted:,} counted votes; arena_entries.rebuild() fitted {boards_fitted} boards in {rebuild:.1f} s")
    return {"counts": {"arena_battles": total, "arena_votes": counted, "arena_entries": ArenaEntry.objects.count()},
            "timings": {"arena_generate_s": round(generate, 2), "arena_insert_s": round(insert, 2),
                        "arena_rebuild_s": round(rebuild, 2)}}


def fill_arena_only(params: dict, out: Out) -> dict:
    t = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    out(f"setup: migrated the arena's scratch database in {time.perf_counter() - t:.1f} s")
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA synchronous=OFF")
            cursor.execute("PRAGMA cache_size=-262144")
    return fill_arena_votes(params, out)


def measure_arena(params: dict, out: Out) -> dict:
    """The arena's figures (see the module docstring): lib.arena's stages in memory, then the refresh of
    the ArenaEntry table from the ArenaBattle rows; one BLAS thread throughout, as the site runs it."""
    style_rounds = settings.LLMCHAIN_ARENA_STYLE_BOOTSTRAP
    with arena.one_blas_thread():
        stages = lib_arena.arena_bench(params["models"], params["votes"], bootstrap=ARENA_BOOTSTRAP,
                                       seed=params["seed"], style_bootstrap_rounds=style_rounds)
    out(f"arena: lib.arena on {params['votes']:,} votes and {params['models']} models in memory: tally "
        f"{stages['tally_s']:.2f} s, fit {stages['fit_s']:.3f} s, {ARENA_BOOTSTRAP}-round bootstrap "
        f"{stages[f'bootstrap_{ARENA_BOOTSTRAP}_s']:.2f} s, style fit {stages['style_fit_s']:.2f} s, "
        f"{style_rounds}-round style bootstrap {stages[f'style_bootstrap_{style_rounds}_s']:.2f} s")

    def timed(fn, *args):
        t = time.perf_counter()
        value = fn(*args)
        return value, round(time.perf_counter() - t, 3)

    rounds = {"bootstrap": settings.LLMCHAIN_ARENA_BOOTSTRAP, "style_bootstrap": style_rounds}
    refresh = {}
    busiest = (ArenaBattle.objects.filter(counted=True).values_list("context_id").annotate(n=Count("id"))
               .order_by("-n").values_list("context_id", flat=True).first())
    arena_entries.forget_votes()
    _, first_read_s = timed(arena_entries.load_votes, GLOBAL_CONTEXT_ID)
    out(f"arena: first read of every vote into this process (once per process: later refits read only the "
        f"votes folded since) {first_read_s:.2f} s")
    for label, ctx in (("global", GLOBAL_CONTEXT_ID), ("context", busiest)):
        columns, load_s = timed(arena_entries.load_votes, ctx)
        result, fit_s = timed(lambda: arena.compute(ctx, columns, **rounds))
        _, total_s = timed(arena_entries.refresh_board, ctx)
        refresh[label] = {"votes": result.votes, "load_s": load_s, "fit_s": fit_s, "refresh_s": total_s,
                          "style_failed": result.style_failed, "style_problem": result.style_problem}
        out(f"arena: refit of the {label} board ({result.votes:,} votes): votes read {load_s:.2f} s, both fits "
            f"with their bootstraps {fit_s:.2f} s; arena_entries.refresh_board (all, entries written) {total_s:.2f} s")
    t = time.perf_counter()
    with transaction.atomic():  # a new vote in the busiest context, as the indexer folds it: the boards are
        arena_entries.mark_stale({busiest})  # marked, and the commit's callback refits them
    vote_s = round(time.perf_counter() - t, 3)
    out(f"arena: one new vote, end to end (its context and the global board refitted after the fold): {vote_s:.2f} s")
    texts = [("# Title\n\n" if k % 3 == 0 else "") + "- item **bold** text\n" * (20 + k % 80) for k in range(2000)]
    _, style_s = timed(lambda: [arena.answer_style(t) for t in texts])
    return {"votes": params["votes"], "models": params["models"], "blas_threads": 1, "first_read_s": first_read_s,
            "bootstrap": settings.LLMCHAIN_ARENA_BOOTSTRAP, "style_bootstrap": style_rounds,
            "memory": stages, "refresh": refresh, "vote_refresh_s": vote_s,
            "answer_style_us": round(style_s / len(texts) * 1e6, 1)}


# --- the check (runs against the scratch database, with the servers up) --------------------------

def check(base_url: str, served_dir: Path, out: Out) -> dict:
    """Every context's API board as served equals `board_data(build_board(...))` of this database
    (generated_at aside), and its page names every model; then time a board recomputed from the
    raw ReputationChange rows (what a request would cost without the precomputed table)."""
    served_dir.mkdir(parents=True, exist_ok=True)
    ids = [GLOBAL_CONTEXT_ID, *Context.objects.order_by("name").values_list("context_id", flat=True)]
    mismatched = []
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for ctx in ids:
            response = client.get(f"/api/boards/{ctx}")
            (served_dir / f"{ctx}.json").write_bytes(response.content)
            expected = json.loads(json.dumps(board_data(boards.build_board(ctx, strict=True))))
            served = response.json() if response.status_code == 200 else {}
            served.pop("generated_at", None)
            expected.pop("generated_at")
            page = client.get("/", params={"context": ctx})
            names_shown = page.status_code == 200 and all(
                html.escape(row["name"]) in page.text for row in expected["ranked"] + expected["provisional"])
            if served != expected or not names_shown:
                mismatched.append(ctx)
    out(f"check: {len(ids) - len(mismatched)}/{len(ids)} boards served equal build_board "
        f"(API body, and every model on the page)" + (f"; MISMATCH: {', '.join(mismatched)}" if mismatched else ""))

    recompute = {}
    for label, ctx in (("context", ids[1] if len(ids) > 1 else ids[0]), ("global", GLOBAL_CONTEXT_ID)):
        pairs = {(m, ctx) for m in Reputation.objects.filter(context_id=ctx).values_list("model_id", flat=True)}
        names = entries.model_names({m for m, _ in pairs})
        t = time.perf_counter()
        for m, c in sorted(pairs):
            entries.entry_for(m, c, names[m])
        recompute[f"{label}_ms"] = round((time.perf_counter() - t) * 1000, 1)
    out(f"check: one board recomputed from the raw ReputationChange rows (what a request would cost without the "
        f"precomputed table): a context {recompute['context_ms']:.0f} ms, the global board "
        f"{recompute['global_ms']:.0f} ms (one request, no concurrency)")
    return {"boards": len(ids), "mismatched": mismatched, "recompute": recompute}


# --- the load generator (its own process) --------------------------------------------------------

def request_targets(contexts: list[str]) -> list[tuple[str, str]]:
    """(kind, path) of every board view the load picks from: the page and the API, of the global
    board and every context, in every sort and direction."""
    targets = []
    for ctx in [GLOBAL_CONTEXT_ID, *contexts]:
        for sort in boards.SORT_KEYS:
            for direction in boards.DIRECTIONS:
                targets.append(("page", f"/?context={ctx}&sort={sort}&dir={direction}"))
                targets.append(("api", f"/api/boards/{ctx}?sort={sort}&dir={direction}"))
    return targets


class HttpError(Exception):
    pass


class Connection(asyncio.BufferedProtocol):
    """One keep-alive HTTP/1.1 client connection that reads each answer's body into one reused buffer
    and counts it, without keeping it: the load generator shares the servers' two cores, and asyncio's
    streams copied every body three times (a board page is ~270 KB), a fifth of its CPU."""

    HEAD_LIMIT = 64 * 1024

    def __init__(self):
        self.buffer = memoryview(bytearray(256 * 1024))
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future | None = None
        self._reset()

    def _reset(self) -> None:
        self.head = bytearray()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.remaining = -1  # body bytes still to come; -1: the head is not read yet
        self.chunked: bytearray | None = None  # a chunked body, kept to find its end
        self.size = 0

    @classmethod
    async def open(cls, port: int) -> "Connection":
        _, conn = await asyncio.get_running_loop().create_connection(cls, "127.0.0.1", port)
        return conn

    async def exchange(self, request: bytes) -> tuple[int, int, bool, str]:
        """(status, body bytes, connection kept alive, the board cache's X-Board-Cache label or "")."""
        if self.transport.is_closing():
            raise ConnectionResetError("the connection is closed")
        self._reset()
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- asyncio's side ------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self._received(self.buffer[:nbytes])
        except (HttpError, ValueError) as exc:
            self._finish(exc)
            self.close()

    def connection_lost(self, exc) -> None:
        self._finish(exc or asyncio.IncompleteReadError(b"", None))

    def _finish(self, result) -> None:
        if self.waiter is not None and not self.waiter.done():
            if isinstance(result, BaseException):
                self.waiter.set_exception(result)
            else:
                self.waiter.set_result(result)

    def _received(self, data: memoryview) -> None:
        if self.remaining < 0:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > self.HEAD_LIMIT:
                    raise HttpError("a response head over 64 KiB")
                return
            body = self.head[end + 4:]
            self._parse_head(bytes(self.head[:end]))
            data = memoryview(body)
        if self.chunked is not None:
            self.chunked += data
            self._chunks()
            return
        self.remaining -= len(data)
        self.size += len(data)
        if self.remaining <= 0:
            self._done()

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ", 2)[1])
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip().lower()
        if "content-length" in self.headers:
            self.remaining = int(self.headers["content-length"])
        elif self.headers.get("transfer-encoding") == "chunked":
            self.remaining, self.chunked = 0, bytearray()
        else:
            raise HttpError(f"status {self.status}: a response without Content-Length or chunked body")

    def _chunks(self) -> None:
        buf = self.chunked
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return
            length = int(bytes(buf[:line_end]).split(b";")[0], 16)
            if length == 0:  # the last chunk: then trailers, if any, up to an empty line
                if buf[line_end + 2:line_end + 4] == b"\r\n" or buf.find(b"\r\n\r\n", line_end + 2) >= 0:
                    self._done()
                return
            if len(buf) < line_end + 2 + length + 2:
                return
            self.size += length
            del buf[:line_end + 2 + length + 2]

    def _done(self) -> None:
        self._finish((self.status, self.size, self.headers.get("connection") != "close",
                      self.headers.get("x-board-cache", "")))


class LoadGenerator:
    """`clients` closed-loop clients, each on its own keep-alive connection to `port`, sending the
    next request as soon as the last response is read. First every target is requested once through
    each of `coverage_ports` (one per server process: each renders and caches every board view),
    then `warmup` seconds of load, then the measured window of `duration` seconds: a request counts
    when it starts and ends inside the window."""

    def __init__(self, port: int, targets: list[tuple[str, str]], clients: int, duration: float, warmup: float,
                 coverage_ports: list[int] = (), seed: int = 0, mark: Callable[[str], None] = lambda _: None,
                 gzip: bool = False):
        self.port = port
        self.gzip = gzip
        self.clients = clients
        self.duration = duration
        self.warmup = warmup
        self.coverage_ports = list(coverage_ports)
        self.rnd = random.Random(seed)
        self.mark = mark
        self.targets = [(kind, self._request(kind, path)) for kind, path in targets]
        self.latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
        self.errors: dict[str, int] = {kind: 0 for kind in KINDS}
        self.labels: dict[str, int] = {}  # measured answers by their X-Board-Cache label ("": none)
        self.unmeasured_errors = 0  # in the coverage pass and the warm-up
        self.error_samples: list[str] = []
        self.bytes = 0

    def _request(self, kind: str, path: str) -> bytes:
        accept = "text/html" if kind == "page" else "application/json"
        encoding = "Accept-Encoding: gzip, deflate, br\r\n" if self.gzip else ""
        return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUser-Agent: llmchain-bench-boards\r\n"
                f"Accept: {accept}\r\n{encoding}\r\n").encode()

    def _error(self, kind: str, what: str, counted: bool) -> None:
        if counted:
            self.errors[kind] += 1
        else:
            self.unmeasured_errors += 1
        if len(self.error_samples) < 10:
            self.error_samples.append(f"{kind}: {what}")

    async def _client(self, queue: list[tuple[str, bytes]], phase: dict, port: int | None = None) -> None:
        rnd = random.Random(self.rnd.random())
        conn = None
        while True:
            if phase["queue"] and queue:
                kind, request = queue.pop()
            elif phase["queue"]:
                return  # this client's part of the coverage pass is done
            else:
                kind, request = self.targets[int(rnd.random() * len(self.targets))]
            start = time.perf_counter()
            if start >= phase["end"]:
                break
            try:
                if conn is None:
                    conn = await Connection.open(port or self.port)
                status, size, alive, label = await conn.exchange(request)
                error = None if status == 200 else f"HTTP {status}"
            except (OSError, asyncio.IncompleteReadError, HttpError, ValueError) as exc:
                error, alive = f"{type(exc).__name__}: {exc}", False
                size = 0
            end = time.perf_counter()
            counted = phase["start"] <= start and end <= phase["end"]
            if error:
                self._error(kind, error, counted)
            elif counted:
                self.latencies[kind].append((end - start) * 1000)
                self.bytes += size
                self.labels[label] = self.labels.get(label, 0) + 1
            if not alive and conn is not None:
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    async def run(self) -> dict:
        inf = float("inf")
        phase = {"queue": True, "start": inf, "end": inf}
        # Coverage: every target through every server's private port, a few connections each.
        per_port = max(1, min(8, self.clients // max(1, len(self.coverage_ports))))
        t = time.perf_counter()
        clients = []
        for port in self.coverage_ports:
            work = list(self.targets)
            self.rnd.shuffle(work)
            clients += [self._client(work[i::per_port], phase, port) for i in range(per_port)]
        await asyncio.gather(*clients)
        coverage_s = time.perf_counter() - t
        work = [t for t in self.targets for _ in self.coverage_ports]
        phase["queue"] = False
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        phase["start"], phase["end"] = now + self.warmup, now + self.warmup + self.duration
        loop.call_later(self.warmup, self._mark_window, "start")
        loop.call_later(self.warmup + self.duration, self._mark_window, "end")
        await asyncio.gather(*(self._client([], phase) for _ in range(self.clients)))
        return {"coverage_requests": len(work), "coverage_s": round(coverage_s, 2)}

    def _mark_window(self, which: str) -> None:
        if which == "start":
            self._cpu = time.process_time()
        else:
            self.cpu_s = time.process_time() - self._cpu
        self.mark(which)

    def summary(self) -> dict:
        kinds = {kind: stats(self.latencies[kind], self.errors[kind], self.duration) for kind in KINDS}
        everything = [x for kind in KINDS for x in self.latencies[kind]]
        kinds["all"] = stats(everything, sum(self.errors.values()), self.duration)
        return {"kinds": kinds, "bytes": self.bytes, "unmeasured_errors": self.unmeasured_errors,
                "cache": cache_figures(self.labels, self.duration),
                "error_samples": self.error_samples,
                "loadgen_cpu_s": round(getattr(self, "cpu_s", 0.0), 2)}


def cache_figures(labels: dict[str, int], duration: float) -> dict | None:
    """What the board cache answered in the window, from its X-Board-Cache labels (None: no cache in
    front): shares of the answers that were current, stale (kept from before their board changed, within
    LLMCHAIN_BOARD_MAX_STALE_S), waited for another request's render, or rendered for their request; and
    Django's renders a second, each set off by one answer (miss: for itself; updating: in the background)."""
    total = sum(labels.values())
    if not total or not any(labels):
        return None

    def share(*names):
        return round(sum(labels.get(n, 0) for n in names) / total, 4)

    return {"answers": dict(sorted(labels.items())), "current_share": share("hit"),
            "stale_share": share("stale", "updating"), "waited_share": share("waited"),
            "rendered_share": share("miss"),
            # Answers that set off a render (miss) or a refresh of their board (updating), a second: what the
            # readers asked for, not the views rendered (a board's refresh renders every view read lately).
            "set_off_per_s": round((labels.get("miss", 0) + labels.get("updating", 0)) / duration, 1)}


def stats(latencies: list[float], errors: int, duration: float) -> dict:
    def q(p):
        return round(percentile(latencies, p), 2) if latencies else None

    return {"requests": len(latencies), "errors": errors, "rps": round(len(latencies) / duration, 1),
            "p50_ms": q(50), "p95_ms": q(95), "p99_ms": q(99), "max_ms": round(max(latencies), 2) if latencies else None,
            "mean_ms": round(sum(latencies) / len(latencies), 2) if latencies else None}


def copy_database(source: Path, target: Path) -> None:
    """`target` becomes a consistent copy of the SQLite database `source` (SQLite's online backup)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def fold_live(rate: int, seconds: float, seed: int, out: Out) -> dict:
    """`rate` autoEvals a second, for `seconds`, folded through the indexer's own `fold` one block a
    second (what a live site's indexer does): their ReputationUpdated events move the pairs' REP a
    little, the board entries of those pairs are recomputed and their boards' versions move, so the
    servers' caches drop those boards. Returns what was folded and how long each block took to fold."""
    from apps.chain import indexer

    rnd = random.Random(seed + 1)
    reps = {(m, c): [ra, rh, r, na, nh] for m, c, ra, rh, r, na, nh in Reputation.objects.values_list(
        "model_id", "context_id", "ra", "rh", "r", "n_auto", "n_human")}
    pairs = [pair for pair in reps if pair[1] != GLOBAL_CONTEXT_ID]
    block = (ReputationChange.objects.order_by("-block_number").values_list("block_number", flat=True).first() or 0)
    user = "0x" + "ab" * 20
    took, folded = [], 0
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))  # the load is over: report
    started = time.monotonic()
    while time.monotonic() - started < seconds and not stopping:
        tick = time.monotonic()
        block += 1
        tx = f"0x{block:064x}"
        events, log_index = [], 0
        for _ in range(rate):
            model, ctx = pairs[int(rnd.random() * len(pairs))]
            iid = rnd.randbytes(32)
            sa, wa = int(rnd.random() * WAD), WAD // 2
            events.append({"event": "AutoEvaluated", "block": block, "log_index": log_index, "tx": tx, "args": {
                "interactionId": iid, "modelId": bytes.fromhex(model[2:]), "contextId": bytes.fromhex(ctx[2:]),
                "user": user, "hasReference": True, "sA": sa, "wA": wa, "evidenceCid": "bafylive"}})
            log_index += 1
            for c in (ctx, GLOBAL_CONTEXT_ID):
                rep = reps[(model, c)]
                rep[0] += (sa - rep[0]) // 100  # Ra moves towards the score, a little
                rep[2] = (rep[0] + rep[1]) // 2
                rep[3] += 1
                events.append({"event": "ReputationUpdated", "block": block, "log_index": log_index, "tx": tx,
                               "timestamp": START_TIMESTAMP + block * BLOCK_SECONDS, "args": {
                                   "interactionId": iid, "modelId": bytes.fromhex(model[2:]),
                                   "contextId": bytes.fromhex(c[2:]), "rA": rep[0], "rH": rep[1], "r": rep[2],
                                   "nAuto": rep[3], "nHuman": rep[4]}})
                log_index += 1
        with transaction.atomic():
            indexer.fold(events)
        folded += rate
        took.append(time.monotonic() - tick)
        rest = 1.0 - (time.monotonic() - tick)
        while rest > 0 and not stopping:
            time.sleep(min(rest, 0.1))
            rest = 1.0 - (time.monotonic() - tick)
    elapsed = time.monotonic() - started
    return {"folded": folded, "blocks": len(took), "seconds": round(elapsed, 1), "rate": round(folded / elapsed, 1),
            "block_p50_ms": round(percentile(took, 50) * 1000, 1), "block_max_ms": round(max(took) * 1000, 1)}


def run_load(spec: dict, out: Out) -> dict:
    """The load phase: `spec` from the orchestrator; marks the measured window with '@window start|end' lines."""
    gen = LoadGenerator(spec["port"], [tuple(t) for t in spec["targets"]], spec["clients"], spec["duration"],
                        spec["warmup"], spec["coverage_ports"], seed=spec["seed"], mark=lambda w: out(f"@window {w}"),
                        gzip=spec.get("gzip", False))
    info = asyncio.run(gen.run())
    return {**info, **gen.summary()}


# --- processes ----------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (Linux /proc), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot, all cores (Linux /proc/stat)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK")


def listening_socket(port: int = 0, *, reuse_port: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1024)
    return sock


class ServerPool:
    """`count` daphne processes serving llmchain_site.asgi on one loopback port.

    Each process listens on its own SO_REUSEPORT socket bound to that port, so the kernel spreads
    the keep-alive connections evenly over them (one shared accept queue lets whichever process
    wakes first take most of them), and on a private port of its own, through which the load
    generator serves every board view once by every process before measuring."""

    def __init__(self, count: int, env: dict, log_dir: Path, label: str):
        self.count = count
        self.env = env
        self.log_dir = log_dir
        self.label = label
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.sockets: list[socket.socket] = []
        self.port = 0
        self.private_ports: list[int] = []

    def start(self, timeout: float = 90) -> "ServerPool":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for i in range(self.count):
                shared = listening_socket(self.port, reuse_port=True)
                self.port = shared.getsockname()[1]
                private = listening_socket()
                self.sockets += [shared, private]
                self.private_ports.append(private.getsockname()[1])
                fds = (shared.fileno(), private.fileno())
                log = self.log_dir / f"daphne-{self.label}-{i + 1}.log"
                with log.open("wb") as f:
                    self.procs.append(subprocess.Popen(
                        [sys.executable, "-m", "llmchain_site.serve", "--fd", str(fds[0]), "-e", f"fd:fileno={fds[1]}"],
                        cwd=settings.BASE_DIR, env=self.env, stdout=f, stderr=subprocess.STDOUT, pass_fds=fds))
                self.logs.append(log)
            deadline = time.monotonic() + timeout
            waiting = set(range(self.count))
            while waiting:
                for i in list(waiting):
                    if self.procs[i].poll() is not None:
                        raise BenchError(f"daphne exited with {self.procs[i].returncode}:\n"
                                               f"{self.logs[i].read_text(errors='replace')[-3000:]}")
                    try:  # a malformed context id: answered (400) without touching the database
                        httpx.get(f"http://127.0.0.1:{self.private_ports[i]}/api/boards/0x", timeout=5)
                        waiting.discard(i)
                    except httpx.HTTPError:
                        pass
                if time.monotonic() > deadline:
                    raise BenchError(f"daphne did not answer within {timeout:.0f} s (logs in {self.log_dir})")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        for sock in self.sockets:
            sock.close()
        self.sockets = []


# --- the orchestrator ----------------------------------------------------------------------------

@dataclass
class Measurement:
    label: str
    servers: int
    summary: dict
    window_cpu: dict = field(default_factory=dict)

    @property
    def all(self) -> dict:
        return self.summary["kinds"]["all"]

    @property
    def errors(self) -> int:
        return self.all["errors"]

    @property
    def unmeasured_errors(self) -> int:
        return self.summary["unmeasured_errors"]


class BoardsBench:
    def __init__(self, config: BoardsBenchConfig, out: Out = print):
        self.cfg = config
        self.out = out
        self.live: dict | None = None
        self.folder = config.folder
        self.db = self.folder / DB_NAME
        self.sidecar = self.folder / SIDECAR

    # -- environment of the processes that see the scratch database -------------------------------
    def env(self, *, cached: bool = True, db: Path | None = None) -> dict:
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{db or self.db}", "LLMCHAIN_IPFS_BACKEND": "local",
               "LLMCHAIN_IPFS_DIR": str(self.folder / "bench-ipfs"), "PYTHONUNBUFFERED": "1",
               "DJANGO_SETTINGS_MODULE": "llmchain_site.settings", **debug_off_env()}
        if not cached:
            # The same site with a DummyCache: every request builds and renders its board.
            env["DJANGO_SETTINGS_MODULE"] = UNCACHED_SETTINGS
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.folder), os.environ.get("PYTHONPATH")) if p)
        return env

    def phase(self, name: str, env: dict, on_line: Callable[[str], None] | None = None, **extra) -> dict:
        """Run `manage.py bench boards --phase NAME`, relaying its lines; returns its last line's JSON."""
        args = [*manage_py(), "bench", "boards", "--phase", name, "--dir", str(self.folder)]
        for key, value in extra.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        proc = subprocess.Popen(args, cwd=settings.BASE_DIR, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        last = ""
        tail: list[str] = []
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = (tail + [line])[-40:]
            if line.startswith("{"):
                last = line
            elif line.startswith("@") and on_line:
                on_line(line)
            elif line:
                self.out(line)
        if proc.wait() != 0 or not last:
            raise BenchError(f"the {name} phase failed (exit {proc.returncode}):\n" + "\n".join(tail))
        return json.loads(last)

    # -- data ---------------------------------------------------------------------------------------
    def ensure_data(self) -> dict:
        self.folder.mkdir(parents=True, exist_ok=True)
        params = {**self.cfg.data_params(), "schema": schema()}
        recorded = json.loads(self.sidecar.read_text()) if self.sidecar.exists() else None
        if self.db.exists() and recorded is None:
            raise BenchError(f"{self.db} exists but has no {SIDECAR} beside it: not a database this bench "
                                   f"filled. Remove it or choose another --dir.")
        if recorded and recorded["params"] == params and self.db.exists() and not self.cfg.refill:
            t = recorded["timings"]
            self.out(f"setup: reusing {self.db} (filled {recorded['filled_at']}: generate {t['generate_s']:.0f} s, "
                     f"insert {t['insert_s']:.0f} s, rebuild {t['rebuild_s']:.0f} s; --refill regenerates it)")
            return recorded
        same_history = recorded and {k: v for k, v in recorded["params"].items() if k != "schema"} == {
            k: v for k, v in params.items() if k != "schema"}
        if same_history and self.db.exists() and not self.cfg.refill:
            # The synthetic history does not depend on the migrations (GENERATOR_VERSION says when it
            # does): the database is migrated as a site's would be, and the board table derived again.
            self.out(f"setup: the migrations changed since {self.db} was filled: migrating it and rebuilding its "
                     f"board entries (--refill regenerates it instead)")
            migrated = self.phase("migrate", self.env())
            recorded = {**recorded, "params": params, "migrated_at": datetime.now(dt_timezone.utc).isoformat(
                timespec="seconds"), "timings": {**recorded["timings"], **migrated["timings"]}}
            self.sidecar.write_text(json.dumps(recorded, indent=1))
            self.out(f"setup: migrated in {migrated['timings']['migrate_s']:.1f} s, entries.rebuild() wrote "
                     f"{migrated['board_entries']:,} board entries in {migrated['timings']['rebuild_s']:.1f} s")
            return recorded
        if recorded and recorded["params"].get("schema") != params["schema"] and not self.cfg.refill:
            self.out("setup: the migrations changed since the scratch database was filled: filling it again")
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.db}{suffix}").unlink(missing_ok=True)
        self.sidecar.unlink(missing_ok=True)
        (self.folder / "params.json").write_text(json.dumps(params))
        self.out(f"setup: filling {self.db} with {self.cfg.models} models x {self.cfg.contexts} contexts, "
                 f"{self.cfg.evaluations:,} autoEval interactions ({self.cfg.human_share:.0%} also rated by their "
                 f"user: humEval + updateReputation), through the contract's Python mirror")
        t = time.perf_counter()
        result = self.phase("fill", self.env())
        recorded = {"params": params, "filled_at": datetime.now(dt_timezone.utc).isoformat(timespec="seconds"),
                    "counts": result["counts"], "timings": {**result["timings"],
                                                            "total_s": round(time.perf_counter() - t, 1)}}
        self.sidecar.write_text(json.dumps(recorded, indent=1))
        c, t = recorded["counts"], recorded["timings"]
        self.out(f"setup: {c['interactions']:,} interactions ({c['with_reference']:,} with reference, "
                 f"{c['humEval']:,} rated), {c['reputation_changes']:,} ReputationChange rows in {c['blocks']:,} "
                 f"blocks, {c['board_entries']:,} board entries; migrate {t['migrate_s']:.1f} s, generate "
                 f"{t['generate_s']:.1f} s, insert {t['insert_s']:.1f} s, rebuild {t['rebuild_s']:.1f} s, "
                 f"total {t['total_s']:.0f} s")
        return recorded

    # -- load -----------------------------------------------------------------------------------------
    def measure(self, pool: ServerPool, label: str, cached: bool, cover: bool = True,
                warmup: float | None = None) -> Measurement:
        cfg = self.cfg
        warmup = cfg.warmup if warmup is None else warmup
        spec = {"port": pool.port, "targets": request_targets(context_ids(cfg.contexts)), "clients": cfg.clients,
                "duration": cfg.duration, "warmup": warmup, "seed": cfg.seed, "gzip": cfg.gzip,
                # Without a cache there is nothing to fill: the warm-up alone.
                "coverage_ports": pool.private_ports if cached and cover else []}
        spec_file = self.folder / "load.json"
        spec_file.write_text(json.dumps(spec))
        marks: dict[str, tuple] = {}

        def on_line(line: str) -> None:
            if line.startswith("@window "):
                marks[line.split()[1]] = (pool.cpu(), machine_busy_cpu(), time.perf_counter())

        first = ("every one once by each server first, then " if spec["coverage_ports"] else "")
        clients = f"{cfg.clients} clients ({'taking gzip' if cfg.gzip else 'no Accept-Encoding'})"
        self.out(f"load: {label}: {clients}, {len(spec['targets'])} URLs; {first}{warmup:g} s "
                 f"warm-up and {cfg.duration:g} s measured ...")
        summary = self.phase("load", self.env(), on_line=on_line, spec=spec_file)
        window = {}
        if "start" in marks and "end" in marks:
            (s0, b0, w0), (s1, b1, w1) = marks["start"], marks["end"]
            elapsed = w1 - w0
            busy = b1 - b0
            servers = s1 - s0
            loadgen = summary["loadgen_cpu_s"]
            window = {"cores": os.cpu_count(), "busy_cores": round(busy / elapsed, 2),
                      "server_cores": round(servers / elapsed, 2), "loadgen_cores": round(loadgen / elapsed, 2),
                      "other_cores": round(max(0.0, busy - servers - loadgen) / elapsed, 2),
                      "loadavg_1m": round(os.getloadavg()[0], 2)}
        return Measurement(label, pool.count, summary, window)

    def serve_and_measure(self, label: str, cached: bool, contexts_check: bool) -> tuple[Measurement, dict | None]:
        pool = ServerPool(self.cfg.servers, self.env(cached=cached), self.folder / "logs", label.split()[0])
        live = cached and self.cfg.live_rate
        at_rest = self.folder / "boards.at-rest.sqlite3"
        if live:
            # The live folds change the database: the baseline, the next run reusing it and whoever checks it
            # against the served boards must find the history it was filled with. Copied before the servers
            # start: copied between the phases (~30 s for 3.3 GB), no board was read meanwhile, and the live
            # phase began with every kept answer already past the bound.
            copy_database(self.db, at_rest)
        try:
            t = time.perf_counter()
            pool.start()
            self.out(f"servers: {pool.count} daphne process(es) on {pool.url} ({label}, DEBUG off), up in "
                     f"{time.perf_counter() - t:.1f} s")
            checked = self.phase("check", self.env(), port=pool.port) if contexts_check else None
            measured = self.measure(pool, label, cached)
            if live:
                self.print_measurement(measured)
                self.live = self.measure_live(pool)
            return measured, checked
        finally:
            pool.stop()
            if live:
                copy_database(at_rest, self.db)
                at_rest.unlink()

    def measure_live(self, pool: ServerPool) -> dict:
        """The same load on the same (warm) servers while `live_rate` evaluations a second are folded into
        the database and their boards' versions move: what a live site's readers get."""
        cfg = self.cfg
        spec = self.folder / "live.json"
        spec.write_text(json.dumps({"rate": cfg.live_rate, "seconds": cfg.warmup + cfg.duration + 600,
                                    "seed": cfg.seed}))
        args = [*manage_py(), "bench", "boards", "--phase", "fold", "--dir", str(self.folder), "--spec", str(spec)]
        folder = subprocess.Popen(args, cwd=settings.BASE_DIR, env=self.env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(2)  # the folds under way before the warm-up starts
            label = f"cached, live: {cfg.live_rate} evaluations/s folded and their boards invalidated"
            # The answers kept at rest may be served for LLMCHAIN_BOARD_MAX_STALE_S after their board moved:
            # the window starts once they all could have expired, so it shows how the site keeps up.
            measured = self.measure(pool, label, True, cover=False,
                                    warmup=cfg.warmup + settings.LLMCHAIN_BOARD_MAX_STALE_S)
        finally:
            folder.send_signal(signal.SIGTERM)
            output, _ = folder.communicate(timeout=120)
        lines = [line for line in output.splitlines() if line.startswith("{")]
        if folder.returncode != 0 or not lines:
            raise BenchError(f"the fold phase failed (exit {folder.returncode}):\n{output[-3000:]}")
        folded = json.loads(lines[-1])
        self.print_measurement(measured)
        self.out(f"  folded meanwhile: {folded['folded']:,} evaluations in {folded['blocks']} blocks over "
                 f"{folded['seconds']:g} s ({folded['rate']:g}/s; a block folded in {folded['block_p50_ms']:g} ms "
                 f"median, {folded['block_max_ms']:g} ms at most)")
        return {"measurement": measured, "folded": folded}

    # -- the arena alone ------------------------------------------------------------------------------
    def run_arena_only(self) -> dict:
        """The arena's figures on a scratch database of votes alone (filled once, reused like the boards')."""
        started = time.perf_counter()
        self.folder.mkdir(parents=True, exist_ok=True)
        db, sidecar = self.folder / ARENA_DB_NAME, self.folder / ARENA_SIDECAR
        params = {**self.cfg.arena_params(), "schema": schema()}
        spec = self.folder / "arena-params.json"
        spec.write_text(json.dumps(params))
        recorded = json.loads(sidecar.read_text()) if sidecar.exists() else None
        if db.exists() and recorded is None:
            raise BenchError(f"{db} exists but has no {ARENA_SIDECAR} beside it: not a database this bench filled. "
                             f"Remove it or choose another --dir.")
        if recorded and recorded["params"] == params and db.exists() and not self.cfg.refill:
            self.out(f"setup: reusing {db} (filled {recorded['filled_at']}; --refill regenerates it)")
        else:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            sidecar.unlink(missing_ok=True)
            self.out(f"setup: filling {db} with {params['votes']:,} arena votes between {params['models']} models "
                     f"in {params['contexts']} contexts")
            t = time.perf_counter()
            filled = self.phase("fill", self.env(db=db), spec=spec)
            recorded = {"params": params, "filled_at": datetime.now(dt_timezone.utc).isoformat(timespec="seconds"),
                        "counts": filled["counts"], "timings": {**filled["timings"],
                                                                "total_s": round(time.perf_counter() - t, 1)}}
            sidecar.write_text(json.dumps(recorded, indent=1))
        figures = self.phase("check", self.env(db=db), spec=spec)["arena"]
        summary = {"arena_only": True, "arena": figures, "arena_setup": recorded["timings"],
                   "elapsed_s": round(time.perf_counter() - started, 1)}
        self.out(arena_line(figures))
        self.out(f"total {summary['elapsed_s']:.0f} s")
        return summary

    # -- the run ------------------------------------------------------------------------------------
    def run(self) -> dict:
        cfg = self.cfg
        if cfg.arena_only:
            return self.run_arena_only()
        started = time.perf_counter()
        data = self.ensure_data()
        if cfg.fill_only:
            return {"fill_only": True, "database": str(self.db), "counts": data["counts"], "timings": data["timings"],
                    "elapsed_s": round(time.perf_counter() - started, 1)}
        (self.folder / f"{UNCACHED_SETTINGS}.py").write_text(
            '"""The site as configured, with a DummyCache: written by `manage.py bench boards`."""\n'
            "from llmchain_site.settings import *  # noqa: F401,F403\n\n"
            'CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}\n'
            "LLMCHAIN_BOARD_FASTPATH = False\n")
        self.note_cache_size()
        cached, checked = self.serve_and_measure("cached (the site as configured)", True, True)
        self.print_measurement(cached)
        baseline = None
        if cfg.baseline:
            baseline, _ = self.serve_and_measure("uncached (baseline: no response cache, DummyCache)", False, False)
            self.print_measurement(baseline)
        summary = self.summary(data, cached, baseline, checked, time.perf_counter() - started)
        self.print_footer(summary)
        return summary

    # -- report -------------------------------------------------------------------------------------
    def note_cache_size(self) -> None:
        """Say so when each server's cache cannot hold every board view the load asks for."""
        views = len(request_targets(context_ids(self.cfg.contexts)))
        cache = settings.CACHES.get("default", {})
        backend = cache.get("BACKEND", "")
        entries_max = cache.get("OPTIONS", {}).get("MAX_ENTRIES", 300)  # Django's default
        if backend.endswith(("LocMemCache", "FileBasedCache")) and entries_max < views:
            self.out(f"note: the site's cache ({backend.rsplit('.', 1)[-1]}, MAX_ENTRIES {entries_max} per process) "
                     f"holds fewer entries than the {views} board views this load asks each server for: evicted "
                     f"views are built and rendered again")

    def print_measurement(self, m: Measurement) -> None:
        self.out(f"{m.label}: {m.servers} daphne process(es), {self.cfg.clients} clients, {self.cfg.duration:g} s")
        self.out(f"  {'kind':<5} {'requests':>9} {'rps':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} "
                 f"{'errors':>6}")
        for kind in (*KINDS, "all"):
            s = m.summary["kinds"][kind]

            def f(x):
                return f"{x:>8.1f}" if x is not None else f"{'-':>8}"
            self.out(f"  {kind:<5} {s['requests']:>9,} {s['rps']:>8.1f} {f(s['p50_ms'])} {f(s['p95_ms'])} "
                     f"{f(s['p99_ms'])} {f(s['max_ms'])} {s['errors']:>6}")
        w = m.window_cpu
        if w:
            self.out(f"  machine during the window: {w['busy_cores']:.2f} of {w['cores']} cores busy (servers "
                     f"{w['server_cores']:.2f}, load generator {w['loadgen_cores']:.2f}, other processes "
                     f"{w['other_cores']:.2f}); load average {w['loadavg_1m']:.2f}")
        c = m.summary.get("cache")
        if c:
            self.out(f"  answers: {c['current_share']:.1%} current, {c['stale_share']:.1%} stale (at most "
                     f"{settings.LLMCHAIN_BOARD_MAX_STALE_S:g} s), {c['waited_share']:.1%} waited for a render, "
                     f"{c['rendered_share']:.1%} rendered for their request; {c['set_off_per_s']:g} a second set off a "
                     f"render or a board's refresh")
        if m.summary["coverage_requests"]:
            self.out(f"  before the window: every board view once by each server ({m.summary['coverage_requests']:,} "
                     f"requests, {m.summary['coverage_s']:.0f} s), then the warm-up")
        if m.unmeasured_errors:
            self.out(f"  {m.unmeasured_errors} failed request(s) before the measured window")
        for sample in m.summary["error_samples"]:
            self.out(f"  error: {sample}")

    def summary(self, data: dict, cached: Measurement, baseline: Measurement | None, checked: dict,
                elapsed: float) -> dict:
        cfg, a = self.cfg, cached.all
        headline = {"p50_ms": a["p50_ms"], "p95_ms": a["p95_ms"], "p99_ms": a["p99_ms"], "rps": a["rps"],
                    "clients": cfg.clients, "evaluations": data["counts"]["interactions"],
                    "models": cfg.models, "contexts": cfg.contexts, "servers": cfg.servers,
                    "duration_s": cfg.duration, "requests": a["requests"], "errors": cached.errors,
                    "unmeasured_errors": cached.unmeasured_errors,
                    "target_p95_ms": TARGET_P95_MS,
                    "meets_target": a["p95_ms"] is not None and a["p95_ms"] < TARGET_P95_MS,
                    "kinds": {k: {x: cached.summary["kinds"][k][x] for x in ("rps", "p50_ms", "p95_ms", "p99_ms")}
                              for k in KINDS},
                    "machine": cached.window_cpu, "cache": cached.summary.get("cache"),
                    "boards_checked": checked["boards"], "boards_mismatched": len(checked["mismatched"]),
                    "recompute_ms": checked["recompute"], "arena": checked["arena"],
                    "board_entries": data["counts"]["board_entries"],
                    "reputation_changes": data["counts"]["reputation_changes"],
                    "setup_s": data["timings"], "elapsed_s": round(elapsed, 1)}
        if baseline is not None:
            b = baseline.all
            headline["baseline"] = {"p50_ms": b["p50_ms"], "p95_ms": b["p95_ms"], "p99_ms": b["p99_ms"],
                                    "rps": b["rps"], "errors": baseline.errors,
                                    "unmeasured_errors": baseline.unmeasured_errors, "machine": baseline.window_cpu}
            headline["cache_rps_ratio"] = round(a["rps"] / b["rps"], 1) if b["rps"] else None
        if self.live is not None:
            m = self.live["measurement"]
            headline["live"] = {"p50_ms": m.all["p50_ms"], "p95_ms": m.all["p95_ms"], "p99_ms": m.all["p99_ms"],
                                "rps": m.all["rps"], "errors": m.errors, "machine": m.window_cpu,
                                "cache": m.summary.get("cache"), "max_stale_s": settings.LLMCHAIN_BOARD_MAX_STALE_S,
                                "folded": self.live["folded"]}
        return headline

    def print_footer(self, summary: dict) -> None:
        verdict = "meets" if summary["meets_target"] else "MISSES"
        line = (f"boards: p95 {summary['p95_ms']} ms at {summary['clients']} clients, {summary['rps']:.0f} requests/s "
                f"({verdict} the {TARGET_P95_MS:.0f} ms target)")
        if "baseline" in summary:
            b = summary["baseline"]
            line += (f"; without the cache p95 {b['p95_ms']} ms, {b['rps']:.0f} requests/s "
                     f"(the cache: x{summary['cache_rps_ratio']} throughput)")
        self.out(line)
        self.out(arena_line(summary["arena"]))
        self.out(f"total {summary['elapsed_s']:.0f} s")


def arena_line(figures: dict) -> str:
    g, c = figures["refresh"]["global"], figures["refresh"]["context"]
    return (f"arena: {figures['votes']:,} votes, {figures['models']} models: refit of the global board "
            f"{g['refresh_s']:.2f} s (votes read {g['load_s']:.2f} s, fits and bootstraps {g['fit_s']:.2f} s), of a "
            f"context ({c['votes']:,} votes) {c['refresh_s']:.2f} s; one new vote end to end "
            f"{figures['vote_refresh_s']:.2f} s ({figures['bootstrap']} plain and {figures['style_bootstrap']} "
            f"style bootstrap rounds, one BLAS thread; first read of the votes {figures['first_read_s']:.2f} s)")


def run_boards_bench(config: BoardsBenchConfig, out: Out = print) -> dict:
    return BoardsBench(config, out).run()


def failures(summary: dict) -> list[str]:
    """Why a run's figures cannot stand (the command exits non-zero on any): a failed request, or
    a served board that is not build_board's."""
    found = []
    if summary.get("arena_only") or summary.get("fill_only"):
        return found
    baseline = summary.get("baseline", {})
    if summary["errors"] or summary["unmeasured_errors"] or baseline.get("errors") or baseline.get(
            "unmeasured_errors"):
        found.append("some requests failed (see the error lines above)")
    if summary["boards_mismatched"]:
        found.append(f"{summary['boards_mismatched']} served board(s) differ from build_board")
    return found


def migrate_forward(out: Out) -> dict:
    """Apply the migrations the filled database lacks, and derive the board table again."""
    t = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    timings = {"migrate_s": time.perf_counter() - t}
    t = time.perf_counter()
    written = entries.rebuild()
    timings["rebuild_s"] = time.perf_counter() - t
    return {"board_entries": written, "timings": {k: round(v, 2) for k, v in timings.items()}}


def renew_versions() -> None:
    """Move every board's version past any this database showed before. A run restores the copy it took
    before its live phase, so the next run's boards come to the versions that phase reached again, with
    other rows under them, while a cache the servers share (Redis) may still hold the views kept under
    them: the check then found served boards that were not build_board's."""
    BoardState.objects.update(version=time.time_ns() // 1000)


def run_phase(name: str, folder: Path, out: Out, *, port: int | None = None,
              spec: Path | None = None) -> dict:
    """One step run by the orchestrator in a child process (see the module docstring)."""
    if name == "migrate":
        return migrate_forward(out)
    if name == "fill" and spec:  # arena_only: the votes alone
        return fill_arena_only(json.loads(Path(spec).read_text()), out)
    if name == "fill":
        return fill(json.loads((folder / "params.json").read_text()), out)
    if name == "check" and spec:  # arena_only: no servers, the arena's figures only
        return {"arena": measure_arena(json.loads(Path(spec).read_text()), out)}
    if name == "check":
        renew_versions()
        # The arena's timing first: its refits move the boards' versions, and a server goes on building
        # views from the standing it built for the check for boards.reuse_within() after a move, so the
        # at-rest load that follows would find answers kept from before the move (stale), however soon
        # it started. Timed first, the check builds the servers' standings at the versions the load finds.
        arena_figures = measure_arena(json.loads((folder / "params.json").read_text())["arena"], out)
        checked = check(f"http://127.0.0.1:{port}", folder / "served", out)
        return {**checked, "arena": arena_figures}
    if name == "load":
        return run_load(json.loads(Path(spec).read_text()), out)
    if name == "fold":
        live = json.loads(Path(spec).read_text())
        return fold_live(live["rate"], live["seconds"], live["seed"], out)
    raise BenchError(f"unknown phase {name!r}")

