"""The chain benchmark behind `python manage.py bench chain` (the paper's Fig. 7, measured here).

What it measures, end to end through the code the site runs:

- a fresh anvil node (block time 1 s, free gas, 1e9 block gas limit) on a free port, with the
  contracts deployed and wired by `deploy`; nothing touches the node in settings;
- for each function (addModel, autoEval, humEval) and each offered rate, a producer writes
  outbox rows at that rate (a bulk insert every ~50 ms, rows built as `outbox.enqueue` builds
  them) while the real `Submitter` signs, batches, broadcasts and confirms them; by default the
  submitter is `python manage.py chain submit` in its own process (no shared GIL), pointed at the
  bench node through LLMCHAIN_RPC_URL / LLMCHAIN_DEPLOYMENT / LLMCHAIN_TX_BATCH;
- per step: confirmed evaluations per second = confirmed rows / (last confirmation - first
  enqueue), and latency percentiles of confirmed_at - created_at (enqueue to the submitter
  reading the receipt); every row of a step must be confirmed before the next step starts;
  once a step saturates the pipeline (confirmed/s under 60 % of the offered rate, with a
  backlog left when the load stopped) the function's higher rates are skipped (`--full-sweep`);
- the raw node ceiling in the same run: signed no-op transfers from the anvil dev keys,
  pipelined in JSON-RPC batches, counted from the blocks that mined them.

Rows: the bench uses the command's database. Every sender it uses is a key it creates
(`keys.new_key`), so its rows are told apart by sender address and deleted at the end
(`keep_rows` keeps them). Because the submitter works on every pending row of the database, the
bench refuses to start when the database holds pending work of other senders or a submitter
lease that is still running: it would send those calls to the throw-away node.
"""

from __future__ import annotations

import math
import os
import queue
import random
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import Count
from django.test.utils import override_settings
from django.utils import timezone

from apps.chain.client import ChainClient, ChainError, account_from_key
from apps.chain.deploy import deploy, grant_role
from apps.chain.keys import account_for, new_key
from apps.chain.ledger import Deployment, Ledger
from apps.chain.models import ChainTransaction, OutboxItem, Sender, SigningKey
from apps.chain.node import DEV_KEYS, AnvilNode
from apps.chain.outbox import HUM_FIELDS, check_call, idempotency_key
from apps.chain.submitter import Submitter
from apps.chain.work import run_worker
from lib.reputation import WAD

from .common import BenchError, Out, debug_off_env, manage_py, percentile

ITEM = OutboxItem.Status
FUNCTIONS = ("addModel", "autoEval", "humEval")
DEFAULT_RATES = (50, 100, 200, 400, 700, 1000)
PAPER_PEAK_PER_S = 420  # Fig. 7: 16-validator Besu cluster
SATURATED_SHARE = 0.6
SATURATED_DRAIN_S = 3.0


@dataclass
class ChainBenchConfig:
    rates: list[int] = field(default_factory=lambda: list(DEFAULT_RATES))
    duration: float = 10.0  # seconds of offered load per (function, rate) step
    batch: int = 64  # the submitter's batch size (LLMCHAIN_TX_BATCH; the site default is 64)
    functions: list[str] = field(default_factory=lambda: list(FUNCTIONS))
    users: int = 50  # humEval senders (one nonce lane each)
    contexts: int = 4
    models: int = 16
    tick: float = 0.05  # the producer writes a bulk of rows this often
    drain_timeout: float = 120.0  # bounded wait for a step's rows after its load stops
    # Skip a function's higher rates once a step saturated the pipeline (confirmed/s under
    # SATURATED_SHARE of the offered rate and a backlog left when the load stopped): each of
    # them would only add a long drain (keeps the default run near 5 minutes).
    stop_when_saturated: bool = True
    ceiling_duration: float = 8.0
    submitter: str = "process"  # "process" (`manage.py chain submit`) or "thread"
    keep_rows: bool = False
    work_dir: Path | None = None  # anvil log, deployment file, submitter log

    def __post_init__(self):
        if self.batch < 1 or self.users < 1 or self.duration <= 0:
            raise ValueError("--batch and --users must be at least 1, --duration positive")


@dataclass
class StepResult:
    function: str
    rate: int
    offered: int
    offered_per_s: float  # as actually written by the producer
    confirmed: int
    failed: int
    unconfirmed: int
    duplicates: int
    txs: int
    per_s: float
    p50_ms: float
    p95_ms: float
    max_ms: float
    drain_s: float  # last confirmation - last enqueue: about one block when the submitter keeps up

    @property
    def saturated(self) -> bool:
        return self.per_s < SATURATED_SHARE * self.offered_per_s and self.drain_s > SATURATED_DRAIN_S


@dataclass
class Ceiling:
    tx_per_s: float
    txs: int
    blocks: int
    send_per_s: float


def rand_id() -> str:
    return "0x" + secrets.token_hex(32)


def outbox_row(function: str, sender: str, payload: dict, depends_on_id: int | None = None) -> OutboxItem:
    """An unsaved outbox row, exactly as `outbox.enqueue` would write it."""
    clean = check_call(function, payload)
    return OutboxItem(function=function, sender_address=sender, key=idempotency_key(function, clean),
                      payload=clean, depends_on_id=depends_on_id)


def database_url() -> str:
    """This process's database as a DATABASE_URL, for the submitter process."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    if "postgresql" in s["ENGINE"]:
        auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
        return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    raise BenchError(f"cannot hand database engine {s['ENGINE']} to a process: use --submitter thread")


# --- the submitter under test -------------------------------------------------------------------

class SubmitterProcess:
    """`python manage.py chain submit` on the bench node and this database."""

    def __init__(self, node_url: str, deployment_file: Path, batch: int, log_file: Path):
        env = {**os.environ, "DATABASE_URL": database_url(), "LLMCHAIN_RPC_URL": node_url,
               "LLMCHAIN_DEPLOYMENT": str(deployment_file), "LLMCHAIN_TX_BATCH": str(batch),
               "LLMCHAIN_GAS_PRICE": "auto", "LLMCHAIN_POA": "0",
               # as in production: with DEBUG on, Django logs and quotes every query's parameters
               **debug_off_env()}
        self.log_file = log_file
        self._log = open(log_file, "ab")
        self.proc = subprocess.Popen([*manage_py(), "chain", "submit"], cwd=settings.BASE_DIR, env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self.label = f"process (pid {self.proc.pid})"

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_file.read_text(errors="replace")[-2000:]
            raise BenchError(f"the submitter process exited with code {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class SubmitterThread:
    """The same loop as `Submitter.run_forever`, in a thread of this process (shares the GIL)."""

    def __init__(self, ledger: Ledger, batch: int):
        self.ledger, self.batch = ledger, batch
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="bench-submitter", daemon=True)
        self.thread.start()
        self.label = "thread"

    def _run(self) -> None:
        submitter = Submitter(self.ledger, batch_size=self.batch, owner=f"bench-thread:{os.getpid()}")
        try:
            run_worker(submitter.run_once, idle_sleep=0.2, stop=self._stop, pause_max=0.2, say=None,
                       survive=lambda exc: isinstance(exc, ChainError))
        except Exception as exc:  # reported by check()
            self.error = exc
        finally:
            try:
                submitter.release()
            finally:
                connections.close_all()

    def check(self) -> None:
        if self.error is not None:
            raise BenchError(f"the submitter thread died: {self.error!r}") from self.error

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(60)


# --- the benchmark ------------------------------------------------------------------------------

class ChainBench:
    def __init__(self, config: ChainBenchConfig, out: Out = print):
        self.cfg = config
        self.out = out
        self.addresses: set[str] = set()
        self.node: AnvilNode | None = None
        self.submitter: SubmitterProcess | SubmitterThread | None = None
        self.results: list[StepResult] = []
        self.expected: Counter = Counter()  # calls of each function confirmed outside the steps
        self.on_chain: dict[str, int] = {}
        self.skipped: dict[str, list[int]] = {}
        self.ceiling: Ceiling | None = None
        self.notes: list[str] = []

    # -- guards --------------------------------------------------------------------------------
    def check_database(self) -> None:
        busy = (OutboxItem.objects.filter(status__in=[ITEM.PENDING, ITEM.SIGNED]).exclude(
                    sender_address__in=self.addresses).values_list("sender_address", flat=True).distinct())
        busy = list(busy[:3])
        if busy:
            raise BenchError(
                f"the database holds pending outbox rows of other senders ({', '.join(busy)}): the bench's "
                "submitter would send them to its throw-away node. Run it on a scratch database "
                "(DATABASE_URL=sqlite:////tmp/bench.sqlite3, after `manage.py migrate`).")
        leased = Sender.objects.filter(lease_until__gt=timezone.now()).exclude(lease_owner="").first()
        if leased:
            raise BenchError(f"a submitter ({leased.lease_owner}) holds lanes of this database until "
                             f"{leased.lease_until:%H:%M:%S}: stop it or run the bench on a scratch database")

    def key(self, label: str) -> str:
        address = new_key(label).address
        self.addresses.add(address)
        return address

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> dict:
        # As in production (and as the submitter process runs): no query log, which with DEBUG
        # on costs a quoting round trip per query of the producer.
        with override_settings(DEBUG=False):
            return self._run()

    def _run(self) -> dict:
        cfg = self.cfg
        unknown = set(cfg.functions) - set(FUNCTIONS)
        if unknown:
            raise BenchError(f"unknown functions {sorted(unknown)}; choose among {', '.join(FUNCTIONS)}")
        self.check_database()
        started = time.monotonic()
        # Logs are kept only in a folder the caller names (anvil logs every transaction).
        work_dir = Path(cfg.work_dir or tempfile.mkdtemp(prefix="llmchain-bench-"))
        work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._setup_chain(work_dir)
            self._setup_world()
            if "humEval" in cfg.functions:
                self._prepare_interactions()
            self.ceiling = self.measure_ceiling(cfg.ceiling_duration)
            self._print_header()
            for function in cfg.functions:
                saturated: StepResult | None = None
                for rate in cfg.rates:
                    if saturated:
                        self.skipped.setdefault(function, []).append(rate)
                        self.out(f"{function:<10} {rate:>9}  skipped: saturated at offered {saturated.rate}/s "
                                 f"({saturated.per_s:.0f}/s confirmed; --full-sweep runs it)")
                        continue
                    result = self.step(function, rate)
                    self.results.append(result)
                    self._print_row(result)
                    if cfg.stop_when_saturated and result.saturated:
                        saturated = result
            self.submitter.stop()
            self.on_chain = self.count_on_chain()
        finally:
            if self.submitter:
                self.submitter.stop()
            if self.node:
                self.node.stop()
            if not cfg.keep_rows:
                self.delete_rows()
            if not cfg.work_dir:
                shutil.rmtree(work_dir, ignore_errors=True)
        summary = self.summary(time.monotonic() - started)
        self._print_footer(summary)
        return summary

    # -- setup (not timed) ---------------------------------------------------------------------
    def _setup_chain(self, work_dir: Path) -> None:
        cfg = self.cfg
        self.node = AnvilNode(block_time=1, base_fee=0,
                              log_file=work_dir / "anvil.log" if cfg.work_dir else None).start()
        self.client = ChainClient(self.node.url)
        self.admin = self.key("bench-admin")
        self.oracle = self.key("bench-oracle")
        self.developer = self.key("bench-developer")
        self.users = [self.key(f"bench-user{i}") for i in range(cfg.users)]
        # Free gas: no funds are needed; a balance anyway, in case the node ever prices gas.
        self.client.batch([("anvil_setBalance", [a, hex(10**24)]) for a in sorted(self.addresses)])
        admin = account_for(self.admin)
        self.deployment: Deployment = deploy(self.client, admin)
        grant_role(self.client, self.deployment, admin, "ORACLE_ROLE", self.oracle)
        deployment_file = work_dir / "deployment.json"
        self.deployment.save(deployment_file)
        self.ledger = Ledger(self.client, self.deployment)
        if cfg.submitter == "process":
            self.submitter = SubmitterProcess(self.node.url, deployment_file, cfg.batch, work_dir / "submitter.log")
        elif cfg.submitter == "thread":
            self.submitter = SubmitterThread(Ledger(ChainClient(self.node.url), self.deployment), cfg.batch)
        else:
            raise BenchError(f"--submitter is process or thread, not {cfg.submitter!r}")
        self.work_dir = work_dir

    def _setup_world(self) -> None:
        cfg = self.cfg
        rows = [outbox_row("register", self.admin, {"account": self.developer, "role": "developer"})]
        rows += [outbox_row("register", self.admin, {"account": u, "role": "user"}) for u in self.users]
        self.contexts = [rand_id() for _ in range(cfg.contexts)]
        rows += [outbox_row("addContext", self.admin, {"contextId": c, "name": f"bench context {i}"})
                 for i, c in enumerate(self.contexts)]
        self._insert(rows)
        self._wait([r.pk for r in rows], "registrations and contexts", cfg.drain_timeout, setup=True)
        self.models = [rand_id() for _ in range(cfg.models)]
        rows = [outbox_row("addModel", self.developer, {"modelId": m, "metadataCid": f"bafybenchmodel{i}"})
                for i, m in enumerate(self.models)]
        self._insert(rows)
        self._wait([r.pk for r in rows], "models", cfg.drain_timeout, setup=True)
        self.expected["addModel"] += len(rows)

    def _prepare_interactions(self) -> None:
        """The interactions the humEval steps answer: autoEval'd and confirmed beforehand."""
        cfg = self.cfg
        needed = sum(round(rate * cfg.duration) for rate in cfg.rates)
        rows = [self._auto_eval_row(self.users[i % len(self.users)]) for i in range(needed)]
        t0 = time.monotonic()
        self._insert(rows)
        self._wait([r.pk for r in rows], "interactions for humEval", max(cfg.drain_timeout, needed / 100),
                   setup=True)
        self.interactions = [(r.pk, r.payload["interactionId"], r.payload["user"]) for r in rows]
        self.expected["autoEval"] += len(rows)
        self.out(f"setup: {needed} interactions autoEval'd for the humEval steps in "
                 f"{time.monotonic() - t0:.1f} s (not timed)")

    # -- rows ----------------------------------------------------------------------------------
    def _auto_eval_row(self, user: str) -> OutboxItem:
        iid = rand_id()
        return outbox_row("autoEval", self.oracle, {
            "interactionId": iid, "modelId": random.choice(self.models), "contextId": random.choice(self.contexts),
            "user": user, "hasReference": random.random() < 0.5, "sA": str(random.randint(0, WAD)),
            "wA": str(random.randint(WAD // 10, WAD)), "evidenceCid": f"bafybench{iid[2:18]}"})

    def _rows_for(self, function: str, count: int) -> list[OutboxItem]:
        if function == "addModel":
            return [outbox_row("addModel", self.developer, {"modelId": rand_id(), "metadataCid": f"bafybench{i}"})
                    for i in range(count)]
        if function == "autoEval":
            return [self._auto_eval_row(random.choice(self.users)) for _ in range(count)]
        # humEval: the next prepared interactions, from their own users (one nonce lane each),
        # each depending on its autoEval row as the site queues them.
        taken, self.interactions = self.interactions[:count], self.interactions[count:]
        if len(taken) < count:
            raise BenchError("not enough prepared interactions for humEval")
        return [outbox_row("humEval", user, {"interactionId": iid, **{f: random.randint(1, 5) for f in HUM_FIELDS}},
                           depends_on_id=pk) for pk, iid, user in taken]

    @staticmethod
    def _insert(rows: list[OutboxItem]) -> None:
        now = timezone.now()
        for r in rows:
            r.created_at = now
        OutboxItem.objects.bulk_create(rows, batch_size=500)
        if rows and rows[0].pk is None:  # backends without RETURNING on bulk insert
            ids = dict(OutboxItem.objects.filter(key__in=[r.key for r in rows]).values_list("key", "pk"))
            for r in rows:
                r.pk = ids[r.key]

    def _wait(self, pks: list[int], what: str, timeout: float, setup: bool = False) -> dict[str, int]:
        """Wait until none of these rows is pending or signed; their counts by status. Setup rows
        must all be confirmed; a step's leftovers are reported."""
        deadline = time.monotonic() + timeout
        qs = OutboxItem.objects.filter(pk__gte=min(pks), pk__lte=max(pks), sender_address__in=self.addresses)
        while True:
            counts = Counter(dict(qs.values_list("status").annotate(n=Count("id"))))
            left = counts[ITEM.PENDING] + counts[ITEM.SIGNED]
            if not left:
                break
            self.submitter.check()
            if time.monotonic() > deadline:
                self.notes.append(f"{left} rows of {what} were still unconfirmed after {timeout:.0f} s "
                                  "(the next step ran with them in the queue)")
                break
            time.sleep(0.25)  # a light poll: each read holds SQLite's shared lock for a moment
        if setup and counts[ITEM.FAILED]:
            error = qs.filter(status=ITEM.FAILED).values_list("key", "last_error").first()
            raise BenchError(f"setup failed: {counts[ITEM.FAILED]} rows of {what} failed, e.g. {error}")
        if setup and left:
            raise BenchError(f"setup did not finish: {left} rows of {what} unconfirmed after {timeout:.0f} s")
        return dict(counts)

    # -- one step ------------------------------------------------------------------------------
    def step(self, function: str, rate: int) -> StepResult:
        cfg = self.cfg
        total = round(rate * cfg.duration)
        rows = self._rows_for(function, total)
        sent = 0
        t0 = time.monotonic()
        next_tick = t0
        while sent < total:
            due = min(total, int(rate * (time.monotonic() - t0)) + 1)
            if due > sent:
                self._insert(rows[sent:due])
                sent = due
            next_tick += cfg.tick
            pause = next_tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        produced_s = max(time.monotonic() - t0, 1e-9)
        counts = self._wait([r.pk for r in rows], f"{function} at {rate}/s", cfg.drain_timeout)
        stats = self._stats(rows)
        confirmed = [s for s in stats if s[0] == ITEM.CONFIRMED]
        latencies = [(s[2] - s[1]).total_seconds() * 1000 for s in confirmed]
        if confirmed:
            last = max(s[2] for s in confirmed)
            span = (last - min(s[1] for s in stats)).total_seconds()
            per_s = len(confirmed) / span if span > 0 else math.nan
            drain_s = (last - max(s[1] for s in stats)).total_seconds()
        else:
            per_s, drain_s = 0.0, math.nan
        return StepResult(
            function=function, rate=rate, offered=total, offered_per_s=total / produced_s,
            confirmed=len(confirmed), failed=counts.get(ITEM.FAILED, 0),
            unconfirmed=counts.get(ITEM.PENDING, 0) + counts.get(ITEM.SIGNED, 0),
            duplicates=sum(1 for s in confirmed if s[4]), txs=len({s[3] for s in confirmed if s[3]}),
            per_s=per_s, p50_ms=percentile(latencies, 50), p95_ms=percentile(latencies, 95),
            max_ms=max(latencies) if latencies else math.nan, drain_s=drain_s)

    def _stats(self, rows: list[OutboxItem]) -> list[tuple]:
        """(status, created_at, confirmed_at, transaction_id, duplicate) of a step's rows: the
        bench's rows of that function in the step's id range (only the producer writes them)."""
        ids = [r.pk for r in rows]
        return list(OutboxItem.objects.filter(pk__gte=min(ids), pk__lte=max(ids), function=rows[0].function,
                                              sender_address__in=self.addresses)
                    .values_list("status", "created_at", "confirmed_at", "transaction_id", "duplicate")
                    .iterator(chunk_size=2000))

    # -- the node ceiling ----------------------------------------------------------------------
    def measure_ceiling(self, duration: float, chunk: int = 250) -> Ceiling:
        """Signed no-op transfers (value 0, gas 21000) between the anvil dev keys, pipelined: this
        thread signs chunks while another sends each as one JSON-RPC batch, for `duration`
        seconds; then the blocks that mined them are counted. The rate is taken over the full
        blocks (the first and the last block of the run are only partly loaded)."""
        client = ChainClient(self.node.url)
        sender_client = ChainClient(self.node.url)
        accounts = [account_from_key(k) for k in DEV_KEYS]
        nonces = [int(n, 16) for n in client.batch([("eth_getTransactionCount", [a.address, "pending"])
                                                    for a in accounts])]
        fees = client.fee_fields()
        pipe: queue.Queue = queue.Queue(maxsize=4)
        errors: list[Exception] = []

        def send() -> None:
            while (part := pipe.get()) is not None:
                try:
                    refused = [e for e in sender_client.send_raw([s.raw for s in part]) if e is not None]
                except ChainError as exc:
                    refused = [exc]
                if refused and not errors:
                    errors.append(refused[0])

        thread = threading.Thread(target=send, name="bench-ceiling-sender", daemon=True)
        thread.start()
        sent: list = []
        i = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < duration and not errors:
            part = []
            for _ in range(chunk):
                k = i % len(accounts)
                part.append(client.sign(accounts[k], accounts[(k + 1) % len(accounts)].address, b"",
                                        nonces[k], 21_000, fees))
                nonces[k] += 1
                i += 1
            pipe.put(part)
            sent.extend(part)
        pipe.put(None)
        thread.join()
        send_s = time.monotonic() - t0
        if errors:
            raise BenchError(f"the node refused no-op transfers: {errors[0]}")
        last_by_sender = {s.sender: s for s in sent}
        last_block = max(int(client.wait_receipt(s.hash, timeout=120)["blockNumber"], 16)
                         for s in last_by_sender.values())
        first_block = int(client.wait_receipt(sent[0].hash)["blockNumber"], 16)
        ours = {"0x" + s.hash.hex() for s in sent}
        per_block = []
        for n in range(first_block, last_block + 1):
            block = client.get_block(n)
            per_block.append((int(block["timestamp"], 16), sum(1 for h in block["transactions"] if h in ours)))
        mined = sum(n for _, n in per_block)
        if len(per_block) >= 3:
            # transactions of the full blocks 2..k-1 arrived between block 1 and block k-1
            rate = sum(n for _, n in per_block[1:-1]) / max(per_block[-2][0] - per_block[0][0], 1)
        else:
            rate = mined / max(per_block[-1][0] - per_block[0][0] + 1, 1)
        return Ceiling(tx_per_s=rate, txs=mined, blocks=len(per_block), send_per_s=len(sent) / send_s)

    # -- exactly once, on-chain -----------------------------------------------------------------
    def count_on_chain(self) -> dict[str, int]:
        """How many ModelAdded / AutoEvaluated / HumanEvaluated events the node holds: each call
        the outbox confirmed must be there exactly once (the contract refuses repeats)."""
        abi = self.ledger.abis["reputation"]
        names = {"ModelAdded": "addModel", "AutoEvaluated": "autoEval", "HumanEvaluated": "humEval"}
        by_topic = {"0x" + abi.event_topic(ev).hex(): fn for ev, fn in names.items()}
        head = self.client.block_number()
        counts: Counter = Counter()
        step = 20
        for start in range(self.deployment.deployBlock, head + 1, step):
            logs = self.client.request("eth_getLogs", [{
                "address": self.deployment.reputation, "fromBlock": hex(start),
                "toBlock": hex(min(head, start + step - 1)), "topics": [list(by_topic)]}])
            counts.update(by_topic[log["topics"][0]] for log in logs)
        return dict(counts)

    # -- report --------------------------------------------------------------------------------
    def _print_header(self) -> None:
        cfg, c = self.cfg, self.ceiling
        self.out(f"node ceiling: {c.tx_per_s:.0f} tx/s mined ({c.txs} signed no-op transfers in {c.blocks} blocks; "
                 f"signed+sent at {c.send_per_s:.0f} tx/s from 4 dev keys, pipelined JSON-RPC batches of 250)")
        self.out(f"chain bench: anvil block time 1 s, free gas; submitter batch {cfg.batch} "
                 f"({self.submitter.label}, DEBUG off); {cfg.users} humEval users; {cfg.duration:g} s per step; "
                 f"{connection.vendor} database")
        self.out(f"{'function':<10} {'offered/s':>9} {'actual/s':>8} {'items':>6} {'txs':>6} {'confirmed/s':>11} "
                 f"{'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'drain s':>7} {'unconf':>6} {'failed':>6}")

    def _print_row(self, r: StepResult) -> None:
        self.out(f"{r.function:<10} {r.rate:>9} {r.offered_per_s:>8.0f} {r.offered:>6} {r.txs:>6} {r.per_s:>11.1f} "
                 f"{r.p50_ms:>7.0f} {r.p95_ms:>7.0f} {r.max_ms:>7.0f} {r.drain_s:>7.1f} {r.unconfirmed:>6} {r.failed:>6}")

    def summary(self, elapsed: float) -> dict:
        ceiling = self.ceiling.tx_per_s if self.ceiling else math.nan
        functions: dict[str, dict] = {}
        for fn in self.cfg.functions:
            steps = [r for r in self.results if r.function == fn and not math.isnan(r.per_s)]
            if not steps:
                continue
            best = max(steps, key=lambda r: r.per_s)
            functions[fn] = {"peak_per_s": round(best.per_s, 1),
                             "p95_ms_at_peak": None if math.isnan(best.p95_ms) else round(best.p95_ms),
                             "rate_at_peak": best.rate, "saturated": any(r.saturated for r in steps),
                             "offered": sum(r.offered for r in steps),
                             "confirmed": sum(r.confirmed for r in steps)}
        return {
            "functions": functions,
            "node_ceiling_tx_per_s": round(ceiling, 1),
            "ratio": {fn: round(v["peak_per_s"] / ceiling, 3) for fn, v in functions.items()},
            "batch": self.cfg.batch,
            "duration_s": self.cfg.duration,
            "rates": list(self.cfg.rates),
            "skipped": self.skipped,
            "submitter": self.cfg.submitter,
            "unconfirmed": sum(r.unconfirmed for r in self.results),
            "failed": sum(r.failed for r in self.results),
            "duplicates": sum(r.duplicates for r in self.results),
            "on_chain_ok": self.on_chain_ok(),
            "elapsed_s": round(elapsed, 1),
            "steps": [asdict(r) for r in self.results],
        }

    def on_chain_ok(self) -> bool:
        """Every confirmed call is on-chain exactly once (events = confirmed calls, setup included)."""
        if not self.on_chain:
            return False
        confirmed = Counter(self.expected)
        for r in self.results:
            confirmed[r.function] += r.confirmed
        return all(self.on_chain.get(fn, 0) == confirmed[fn] for fn in set(confirmed) | set(self.on_chain))

    def _print_footer(self, summary: dict) -> None:
        for fn, v in summary["functions"].items():
            bound = ("saturated" if v["saturated"] else
                     "not saturated: bounded by the offered rate, try higher --rates")
            self.out(f"peak {fn}: {v['peak_per_s']:.0f}/s at offered {v['rate_at_peak']}/s "
                     f"(p95 {v['p95_ms_at_peak']} ms) = {summary['ratio'][fn]:.2f} x the node ceiling; {bound}; "
                     f"paper: ~{PAPER_PEAK_PER_S}/s on 16 Besu validators")
        self.out("on-chain events: " + ", ".join(f"{fn} {n}" for fn, n in sorted(self.on_chain.items()))
                 + (" = the confirmed calls (setup included), each once" if summary["on_chain_ok"]
                    else " != the confirmed calls: MISMATCH"))
        for note in self.notes:
            self.out(f"note: {note}")
        self.out(f"total {summary['elapsed_s']:.0f} s")

    # -- cleanup -------------------------------------------------------------------------------
    def delete_rows(self) -> None:
        """Delete every row the bench wrote (by its senders), with raw deletes: the ORM would
        load every row to honour on_delete, and the foreign keys are checked at commit."""
        addresses = sorted(self.addresses)
        if not addresses:
            return
        marks = ",".join(["%s"] * len(addresses))
        item, tx, lane, key = (m._meta.db_table for m in (OutboxItem, ChainTransaction, Sender, SigningKey))
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"DELETE FROM {item} WHERE sender_address IN ({marks})", addresses)
            cur.execute(f"DELETE FROM {tx} WHERE sender_id IN (SELECT id FROM {lane} WHERE address IN ({marks}))",
                        addresses)
            cur.execute(f"DELETE FROM {lane} WHERE address IN ({marks})", addresses)
            cur.execute(f"DELETE FROM {key} WHERE address IN ({marks})", addresses)


def run_chain_bench(config: ChainBenchConfig, out: Out = print) -> dict:
    return ChainBench(config, out).run()


HEADLINE = ("functions", "node_ceiling_tx_per_s", "ratio", "batch", "duration_s", "rates", "skipped", "submitter",
            "unconfirmed", "failed", "duplicates", "on_chain_ok", "elapsed_s")


def headline(summary: dict) -> dict:
    """The figures `bench chain` prints as its last line (the per-step rows are in the table above it)."""
    return {k: summary[k] for k in HEADLINE}
