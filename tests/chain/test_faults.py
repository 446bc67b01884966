"""The ledger under faults, end to end.

A real stack in subprocesses (an anvil with a state file, `chain work`, `oracle work`, the site under
daphne), load through the HTTP API (token auth, chats with replay models, ratings) and a
`replay mtbench` run, and on a schedule drawn from the seed: kill -9 of the node right after a
receipt and at random moments (restarted on the same port from its state file, so it loses the
blocks mined since its last dump), kill -9 of each worker, an evidence store that cannot be written.

At the end nothing is lost and nothing doubled: every interaction is on-chain once, every rating the
API accepted is on-chain, every outbox item is confirmed and every lane drained, `chain audit` and
`leaderboard verify` exit 0, and no log line repeats more than a few times a second.

Run with -s to see each seed's schedule and its summary line (`FAULTS {...}`).
"""

from __future__ import annotations

import heapq
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from io import StringIO
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from apps.chain.audit import all_events
from apps.chain.client import ChainError
from apps.chain.demo import context_id
from apps.chain.keys import admin_address
from apps.chain.models import ChainTransaction, Context, IndexerCursor, OutboxItem
from apps.chain.models import LedgerInteraction
from apps.chain.node import DEV_KEYS, AnvilNode, NodeError, free_port
from apps.chain import outbox
from apps.chat.models import Interaction, Rating, RegisteredModel
from apps.chat.replay import import_mtbench
from apps.oracle.models import EvaluationJob
from tests.support import deploy_on_interval_node
from tests.chat.factories import write_mtbench
from tests.personas import PASSWORD, user

from .conftest import database_url
from .stack import REPO, LogWatch, Service, Unwritable

# `alone`: make test runs these after the other tests, the seeds side by side (one xdist worker each).
pytestmark = [pytest.mark.slow, pytest.mark.chain, pytest.mark.alone, pytest.mark.django_db(transaction=True)]

# Seed 1603 once ended in 2 of 5 runs with interactions in the contract's storage that no event of
# the restarted node's blocks recorded: anvil's own periodic dump had caught a block's state without the
# block. The node's state file is now written only consistent (apps/chain/node.StateKeeper,
# tests/chain/test_node_state.py).
SEEDS = [1601, 1602, 1603]
LOAD_S = 40  # the load and every fault start within this window
CHATS = 24
DRAIN_TIMEOUT_S = 90
USERS = ["alice", "bob", "carol"]
MODELS = ["alpha-7b", "beta-13b", "gamma-3b", "delta-30b"]
REPLAYED = "delta-30b"  # `replay mtbench --models delta-30b --turns 1`: one interaction per question
TOPICS = ["the sea", "a sunrise", "clear writing", "a city at night", "autumn leaves", "a quiet library",
          "the moon", "a kitchen garden"]
STYLES = ["Plainly put, {t} is calm and wide and full of light.", "Consider {t}: it changes slowly, then all at once.",
          "In short, {t} rewards a patient look.", "{T} is a small wonder that most people pass by."]
FOLLOW_UP = "Now shorter."
QUESTIONS = {q: f"Write two sentences about {t}." for q, t in enumerate(TOPICS, start=1)}

# No log line may repeat more than a few times a second (stack.LogWatch counts each line, numbers
# and hashes blanked, per file and per second). Calibrated on a clean run (the same load, no fault)
# and on the three seeds with the re-send fixes, under SQLite and PostgreSQL: the workers' own
# lines peaked at 1 a second (chain) and 2 (oracle: the two `put` frames of one traceback while the
# evidence store is unwritable), the site's access log at 6 (ratings posted together). anvil logs
# one line per JSON-RPC call, and the submitter asks for the receipt of every live transaction in
# one batch each pass, a few passes a second: the clean run peaked at 81 identical lines a second
# (eth_getTransactionReceipt), the faulty ones at 68-116. The re-send hot loop these limits catch wrote ~6,500
# identical lines a second to anvil's log (the same transactions re-sent on every pass); the code
# before the fix, in this test, wrote "re-sending N transactions the node does not hold" 73-117
# times a second to the chain worker's log, and 511-1,460 eth_getTransactionReceipt lines a second
# to anvil's with 7 and 20 transactions stuck (168 with one: the worker's own line catches that).
# The limits sit several times above the clean peaks and below those loops.
MAX_REPEATS = {"chain": 10, "oracle": 10, "site": 20, "anvil": 300}


# --- the world -----------------------------------------------------------------------------------

def mtbench(root: Path) -> Path:
    """Eight writing questions, each with two turns, answered by all four replay models."""
    answers = {m: {q: [STYLES[i].format(t=t, T=t[0].upper() + t[1:]), f"Short: {t}."]
                   for q, t in enumerate(TOPICS, start=1)} for i, m in enumerate(MODELS)}
    return write_mtbench(root, {q: ("writing", [text, FOLLOW_UP]) for q, text in QUESTIONS.items()}, answers)


def wait_until(condition, timeout: float, what: str, services=()) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s; logs:\n" + "\n".join(
                f"--- {s.name}\n{s.tail()}" for s in services))
        time.sleep(0.2)


def fault_schedule(seed: int) -> list[dict]:
    """The faults of one run, drawn from `seed`: times in seconds from the start of the load."""
    rng = random.Random(seed)
    faults = []
    # The node: three kills, one every ~12 s, at least one right after a receipt.
    kinds = ["node-after-receipt", "node-random", rng.choice(["node-after-receipt", "node-random"])]
    rng.shuffle(kinds)
    for i, kind in enumerate(kinds):
        down = rng.uniform(0.2, 1.5) if kind == "node-after-receipt" else rng.uniform(1.0, 6.0)
        faults.append({"kind": kind, "at": round(3 + 12 * i + rng.uniform(0, 5), 2), "down_s": round(down, 2)})
    for worker in ("chain", "oracle"):
        for i in range(rng.choice([1, 2])):
            faults.append({"kind": f"kill-{worker}-worker", "at": round(2 + 17 * i + rng.uniform(0, 14), 2),
                           "down_s": round(rng.uniform(0.5, 5.0), 2)})
    faults.append({"kind": "evidence-unwritable", "at": round(rng.uniform(3, LOAD_S - 14), 2),
                   "down_s": round(rng.uniform(4, 10), 2)})
    faults.append({"kind": "replay-run", "at": round(rng.uniform(2, 12), 2)})
    return sorted(faults, key=lambda f: f["at"])


# --- the load, over HTTP only --------------------------------------------------------------------

class Load(threading.Thread):
    """Chats and ratings through the API, paced over the load window; touches no database."""

    def __init__(self, base_url: str, tokens: dict[str, str], model_pks: dict[str, int], context: str, seed: int):
        super().__init__(daemon=True, name="load")
        self.base_url, self.tokens, self.model_pks, self.context = base_url, tokens, model_pks, context
        self.rng = random.Random(f"load:{seed}")
        self.interactions: list[dict] = []  # {"pk", "interaction_id", "user"}
        self.ratings: list[int] = []  # interaction pks whose rating the API accepted (201)
        self.refused: list[tuple[int, int, str]] = []
        self.errors: list[str] = []
        self.done = threading.Event()

    def client(self, person: str) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Token {self.tokens[person]}"},
                            timeout=30, trust_env=False)

    def post(self, client: httpx.Client, url: str, body: dict) -> httpx.Response | None:
        try:
            return client.post(url, json=body)
        except httpx.HTTPError as exc:
            self.errors.append(f"POST {url}: {exc!r}")
            return None

    def run(self) -> None:
        clients = {u: self.client(u) for u in self.tokens}
        pending: list[tuple[float, int, str]] = []  # (when, interaction pk, user): ratings to give
        t0 = time.monotonic()
        try:
            for n in range(CHATS):
                self._rate_due(clients, pending, time.monotonic())
                person, model = self.rng.choice(list(clients)), self.rng.choice(MODELS)
                question = self.rng.choice(list(QUESTIONS))
                client = clients[person]
                conv = self.post(client, "/api/conversations", {"model": self.model_pks[model],
                                                                "context": self.context})
                if conv is None or conv.status_code != 201:
                    self.errors.append(f"conversation: {conv and conv.status_code} {conv and conv.text[:200]}")
                    continue
                prompts = [QUESTIONS[question]] + ([FOLLOW_UP] if self.rng.random() < 0.4 else [])
                for prompt in prompts:
                    answer = self.post(client, f"/api/conversations/{conv.json()['id']}/messages", {"prompt": prompt})
                    if answer is None or answer.status_code != 201:
                        self.errors.append(f"message: {answer and answer.status_code} {answer and answer.text[:200]}")
                        break
                    body = answer.json()
                    self.interactions.append({"pk": body["id"], "interaction_id": body["interaction_id"],
                                              "user": person})
                    if self.rng.random() < 0.8:  # most answers are rated, some at once, some seconds later
                        heapq.heappush(pending, (time.monotonic() + self.rng.uniform(0, 8), body["id"], person))
                # Spread the chats over the window (minus time to rate the last ones).
                pause = t0 + (n + 1) * (LOAD_S - 6) / CHATS - time.monotonic()
                while pause > 0:
                    self._rate_due(clients, pending, time.monotonic())
                    time.sleep(min(pause, 0.2))
                    pause = t0 + (n + 1) * (LOAD_S - 6) / CHATS - time.monotonic()
            self._rate_due(clients, pending, float("inf"))
        finally:
            for c in clients.values():
                c.close()
            self.done.set()

    def _rate_due(self, clients, pending, now: float) -> None:
        while pending and pending[0][0] <= now:
            _, pk, person = heapq.heappop(pending)
            answers = {f: self.rng.randint(1, 5) for f in
                       ("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")}
            r = self.post(clients[person], f"/api/interactions/{pk}/rating", answers)
            if r is not None and r.status_code == 201:
                self.ratings.append(pk)
            else:
                self.refused.append((pk, r.status_code if r is not None else 0, r.text[:200] if r is not None else ""))


# --- the stack -----------------------------------------------------------------------------------

class Stack:
    """The node, the two workers and the site of one run, all pointed at the test database."""

    def __init__(self, tmp: Path, settings):
        self.tmp = tmp
        self.node = AnvilNode(block_time=1, base_fee=0, state_file=tmp / "chain" / "state.json",
                              log_file=tmp / "anvil.log")
        self.ipfs = tmp / "ipfs"
        self.ipfs.mkdir()
        self.unwritable = Unwritable(self.ipfs)
        self.settings = settings
        self.services: dict[str, Service] = {}
        self.replay: Service | None = None
        self.site_url = ""

    def start(self) -> None:
        """The node with the contracts deployed, then the workers and the site."""
        self.node.start()
        # The contracts go in at once, then the node mines every second as started (and as it does
        # again after each restart).
        self.deployment_file = self.tmp / "deployment.json"
        self.ledger = deploy_on_interval_node(self.node, self.deployment_file)
        s = self.settings
        s.LLMCHAIN_RPC_URL, s.LLMCHAIN_DEPLOYMENT, s.LLMCHAIN_ORACLE_KEY = self.node.url, self.deployment_file, DEV_KEYS[1]
        s.LLMCHAIN_IPFS_BACKEND, s.LLMCHAIN_IPFS_DIR, s.LLMCHAIN_FINALITY = "local", self.ipfs, "auto"
        self.env = {**os.environ, "DATABASE_URL": database_url(), "LLMCHAIN_RPC_URL": self.node.url,
                    "LLMCHAIN_DEPLOYMENT": str(self.deployment_file), "LLMCHAIN_ORACLE_KEY": DEV_KEYS[1],
                    "LLMCHAIN_IPFS_BACKEND": "local", "LLMCHAIN_IPFS_DIR": str(self.ipfs),
                    # Leases short enough that a killed worker's jobs and lanes pass to its successor
                    # within seconds, and lanes checked for lost final transactions every 5 s (the
                    # defaults, 120 s and 30 s, would make each fault cost that much of the budget).
                    "LLMCHAIN_ORACLE_LEASE_S": "5", "LLMCHAIN_LEASE_S": "5", "LLMCHAIN_RESEND_AFTER_S": "5",
                    # A local anvil's own finality depth (tests/conftest.py sets "0" for the other tests):
                    # with "0", a call would be confirmed in a block that a crash of the node loses.
                    "LLMCHAIN_FINALITY": "auto",
                    "PYTHONUNBUFFERED": "1"}
        manage, port = [sys.executable, "manage.py"], free_port()
        self.site_url = f"http://127.0.0.1:{port}"
        self.services = {
            "chain": Service("chain", manage + ["chain", "work"], self.env, self.tmp / "chain.log"),
            "oracle": Service("oracle", manage + ["oracle", "work", "--no-health"], self.env, self.tmp / "oracle.log"),
            "site": Service("site", [sys.executable, "-m", "llmchain_site.serve", "-b", "127.0.0.1", "-p", str(port)],
                            self.env, self.tmp / "site.log"),
        }
        for service in self.services.values():
            service.start()

    def wait_for_site(self) -> None:
        def site_up() -> bool:
            try:
                return httpx.get(self.site_url + "/api/contexts", timeout=2, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(site_up, 60, "the site answered", list(self.services.values()))

    def start_replay(self, root: Path) -> None:
        self.replay = Service("replay", [sys.executable, "manage.py", "replay", "mtbench", str(root), "--models",
                                         REPLAYED, "--turns", "1", "--timeout", "240"], self.env,
                              self.tmp / "replay.log").start()

    def logs(self) -> dict[str, Path]:
        return {"chain": self.tmp / "chain.log", "oracle": self.tmp / "oracle.log", "site": self.tmp / "site.log",
                "anvil": self.tmp / "anvil.log"}

    def manage(self, *commands: list[str], timeout: float = 180) -> list[subprocess.CompletedProcess]:
        """`manage.py` commands run side by side against the stack; their outcomes in order."""
        procs = [subprocess.Popen([sys.executable, "manage.py", *args], cwd=REPO, env=self.env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for args in commands]
        done = []
        for args, proc in zip(commands, procs):
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
        return done

    def shutdown(self) -> None:
        self.unwritable.off()
        for s in [self.replay, *self.services.values()]:
            if s is not None:
                s.stop()
        self.node.stop()


# --- the faults ----------------------------------------------------------------------------------

class Faults:
    """Runs the schedule on the test's thread, ticking every 10 ms: each fault starts at its time and
    ends (node or worker restarted, store writable again) `down_s` later. A kill "after a receipt"
    is armed at its time and fires on the first transaction the submitter records as mined after
    that (a receipt in a block that is not final yet: one the kill may make the node lose), polling
    the database every tick."""

    TICK_S = 0.01
    RECEIPT_WAIT_S = 20

    def __init__(self, stack: Stack, schedule: list[dict], root: Path):
        self.stack, self.root = stack, root
        self.events: list[tuple[float, int, str, dict]] = []
        for i, fault in enumerate(schedule):
            heapq.heappush(self.events, (fault["at"], i, "start", fault))
        self.seq = len(schedule)
        self.armed: tuple[dict, float, object] | None = None  # fault, since (monotonic), since (db time)
        self.log: list[dict] = []
        self.heads: dict[int, int | None] = {}  # the node's head when a fault killed it
        self.head, self.head_read_at = None, 0.0  # the head while a kill after a receipt is armed
        self.last_fault_end = 0.0

    def push(self, at: float, what: str, fault: dict) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, what, fault))

    def run(self, t0: float) -> None:
        deadline = t0 + LOAD_S + 60
        while self.events or self.armed:
            now = time.monotonic() - t0
            if time.monotonic() > deadline:
                raise AssertionError(f"the fault schedule did not finish: {self.events} {self.armed}")
            if self.armed:
                self._poll_receipt(now)
            while self.events and self.events[0][0] <= now:
                _, _, what, fault = heapq.heappop(self.events)
                getattr(self, f"_{what}")(fault, now)
            time.sleep(self.TICK_S)
        self.last_fault_end = time.monotonic()

    def _record(self, fault: dict, now: float, **extra) -> None:
        self.log.append({"kind": fault["kind"], "at": round(now, 2), **extra})

    def _start(self, fault: dict, now: float) -> None:
        kind = fault["kind"]
        if kind == "replay-run":
            self.stack.start_replay(self.root)
            self._record(fault, now)
        elif kind.startswith("node-"):
            if not self.stack.node.proc or self.stack.node.proc.poll() is not None or self.armed:
                self.push(now + 1, "start", fault)  # the node is down or about to be: a bit later
            elif kind == "node-after-receipt":
                self.armed = (fault, time.monotonic(), timezone.now())
                self.head, self.head_read_at = self._head(), time.monotonic()
            else:
                self._kill_node(fault, now)
        elif kind.startswith("kill-"):
            service = self.stack.services[kind.split("-")[1]]
            if not service.running:
                self.push(now + 1, "start", fault)
                return
            service.kill()
            self._record(fault, now, down_s=fault["down_s"])
            self.push(now + fault["down_s"], "end", fault)
        elif kind == "evidence-unwritable":
            method = self.stack.unwritable.on()
            self._record(fault, now, down_s=fault["down_s"], method=method)
            self.push(now + fault["down_s"], "end", fault)

    def _head(self) -> int | None:
        try:
            return self.stack.ledger.client.block_number()
        except ChainError:
            return None

    def _poll_receipt(self, now: float) -> None:
        fault, since, since_db = self.armed
        tx = (ChainTransaction.objects.filter(status=ChainTransaction.Status.MINED, mined_at__gte=since_db)
              .order_by("mined_at").values("function", "nonce", "block_number", "mined_at", "status").first())
        waited = time.monotonic() - since
        if tx is None and waited < self.RECEIPT_WAIT_S:
            if time.monotonic() - self.head_read_at > 0.2:  # the head, kept fresh off the kill's path
                self.head, self.head_read_at = self._head(), time.monotonic()
            return
        head = max(self.head or 0, tx["block_number"] if tx else 0) or None
        self.stack.node.kill()
        self.armed = None
        extra = {"armed_s": round(waited, 2)}
        if tx is None:
            extra["receipt"] = f"none within {self.RECEIPT_WAIT_S} s"
        else:
            extra["ms_after_receipt"] = round((timezone.now() - tx["mined_at"]).total_seconds() * 1000)
            extra["receipt"] = f"{tx['function']} nonce {tx['nonce']} block {tx['block_number']} ({tx['status']})"
        self._killed(fault, now, head, **extra)

    def _kill_node(self, fault: dict, now: float) -> None:
        head = self._head()
        self.stack.node.kill()
        self._killed(fault, now, head)

    def _killed(self, fault: dict, now: float, head: int | None, **extra) -> None:
        """The node was killed with `head` as its last block: its restart tells how many it lost."""
        self.heads[id(fault)] = head
        self._record(fault, now, down_s=fault["down_s"], head=head, **extra)
        self.push(now + fault["down_s"], "end", fault)

    def _restart_node(self, attempts: int = 5) -> None:
        """The same port, the same state file; a port another process took meanwhile is retried a few times."""
        for attempt in range(attempts):
            try:
                self.stack.node.start()
                return
            except NodeError:
                if attempt == attempts - 1:
                    raise
                time.sleep(1)

    def _end(self, fault: dict, now: float) -> None:
        kind = fault["kind"]
        if kind.startswith("node-"):
            self._restart_node()
            head, restarted = self.heads.pop(id(fault)), self.stack.ledger.client.block_number()
            record = next(r for r in reversed(self.log) if r["kind"] == kind)
            record["restarted_at_block"] = restarted
            if head is not None:
                record["blocks_lost"] = max(0, head - restarted)
        elif kind.startswith("kill-"):
            self.stack.services[kind.split("-")[1]].start()
        elif kind == "evidence-unwritable":
            self.stack.unwritable.off()


# --- the verdict ---------------------------------------------------------------------------------

# signed, sent, and mined (a receipt in a block that is not final yet): the submitter's live transactions
PENDING_TX = [ChainTransaction.Status.SIGNED, ChainTransaction.Status.SENT, ChainTransaction.Status.MINED]


def left_to_drain(load: Load) -> dict[str, int]:
    """What still has to happen; empty when everything the load started is on-chain and indexed."""
    ours = set(Interaction.objects.filter(status=Interaction.Status.DONE).values_list("interaction_id", flat=True))
    indexed = dict(LedgerInteraction.objects.values_list("interaction_id", "reputation_tx"))
    rated = set(Rating.objects.values_list("interaction__interaction_id", flat=True))
    last_block = (ChainTransaction.objects.exclude(status="dropped").exclude(block_number=None)
                  .order_by("-block_number").values_list("block_number", flat=True).first()) or 0
    cursor = IndexerCursor.objects.filter(name__startswith="ledger:").values_list("last_block", flat=True).first()
    left = {
        "load_running": int(not load.done.is_set()),
        "jobs_not_onchain": EvaluationJob.objects.exclude(status="onchain").count(),
        "outbox_not_confirmed": OutboxItem.objects.exclude(status="confirmed").count(),
        "transactions_pending": ChainTransaction.objects.filter(status__in=PENDING_TX).count(),
        "interactions_not_indexed": len(ours - set(indexed)),
        "ratings_not_indexed": sum(1 for i in rated if not indexed.get(i)),
        "blocks_not_indexed": max(0, last_block - (cursor if cursor is not None else -1)),
    }
    return {k: v for k, v in left.items() if v}


def run_seed(seed: int, tmp: Path, settings, schedule: list[dict] | None = None) -> tuple[dict, list[str]]:
    """One run: the stack, the load and the faults of `seed` (or `schedule`); its summary and what went wrong."""
    schedule = fault_schedule(seed) if schedule is None else schedule
    print(f"\nFAULT SCHEDULE seed={seed} {json.dumps(schedule)}", flush=True)
    started = time.monotonic()
    stack = Stack(tmp, settings)
    watch = LogWatch(stack.logs())
    problems: list[str] = []
    try:
        stack.start()
        watch.start()
        outbox.enqueue("addContext", admin_address(), {"contextId": context_id("writing"), "name": "writing"})
        wait_until(lambda: Context.objects.filter(context_id=context_id("writing")).exists(), 60,
                   "the writing context indexed", list(stack.services.values()))
        writing = Context.objects.get(context_id=context_id("writing"))
        root = mtbench(tmp / "mt_bench")
        import_mtbench(root, contexts=[writing], progress=lambda _: None)
        for name in USERS:
            user(name)
        stack.wait_for_site()
        tokens = {u: httpx.post(stack.site_url + "/api/token", json={"username": u, "password": PASSWORD},
                                timeout=30, trust_env=False).json()["token"] for u in USERS}
        model_pks = dict(RegisteredModel.objects.values_list("name", "pk"))
        load = Load(stack.site_url, tokens, model_pks, writing.context_id, seed)
        faults = Faults(stack, schedule, root)
        t0 = time.monotonic()
        load.start()
        faults.run(t0)
        wait_until(load.done.is_set, 120, "the load finished")
        # Drain: everything the load started ends on-chain and indexed.
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while (left := left_to_drain(load)) and time.monotonic() < deadline:
            time.sleep(0.5)
        drain_s = round(time.monotonic() - faults.last_fault_end, 1)
        drained_at = time.monotonic()
        if left:
            problems.append(f"not drained {DRAIN_TIMEOUT_S} s after the load: {left}")
        if stack.replay is not None:
            try:
                stack.replay.proc.wait(30)
            except subprocess.TimeoutExpired:
                stack.replay.kill()
            if stack.replay.proc.returncode != 0:
                problems.append(f"replay mtbench exited {stack.replay.proc.returncode}: {stack.replay.tail(600)}")

        status = StringIO()
        call_command("chain", "status", stdout=status)
        report = json.loads(status.getvalue().strip().splitlines()[-1])
        if report.get("stuck_lanes") or left:
            problems.append(f"chain status: {status.getvalue().strip()}")
        audit, verify = stack.manage(["chain", "audit"], ["leaderboard", "verify"])
        if audit.returncode != 0:
            problems.append(f"chain audit exited {audit.returncode}:\n{audit.stdout[-3000:]}{audit.stderr[-2000:]}")
        if verify.returncode != 0:
            problems.append(f"leaderboard verify exited {verify.returncode}:\n"
                            f"{verify.stdout[-4000:]}{verify.stderr[-2000:]}")

        # On-chain exactly once, from the contract's events.
        events = all_events(stack.ledger)
        kinds = Counter(e["event"] for e in events)
        auto = Counter("0x" + bytes(e["args"]["interactionId"]).hex() for e in events if e["event"] == "AutoEvaluated")
        human = Counter("0x" + bytes(e["args"]["interactionId"]).hex() for e in events if e["event"] == "HumanEvaluated")
        interactions = set(Interaction.objects.filter(status=Interaction.Status.DONE)
                           .values_list("interaction_id", flat=True))
        rated = set(Rating.objects.values_list("interaction__interaction_id", flat=True))
        accepted = set(Interaction.objects.filter(pk__in=load.ratings).values_list("interaction_id", flat=True))
        lost = sorted(i for i in interactions if auto[i] == 0)
        doubled = sorted(i for i, n in auto.items() if n > 1)
        strangers = sorted(set(auto) - interactions)
        lost_ratings = sorted(i for i in rated | accepted if human[i] == 0)
        doubled_ratings = sorted(i for i, n in human.items() if n > 1)
        indexed = set(LedgerInteraction.objects.values_list("interaction_id", flat=True))
        for what, found in (("interactions not on-chain", lost), ("interactions on-chain twice", doubled),
                            ("on-chain interactions the site never had", strangers),
                            ("accepted ratings not on-chain", lost_ratings),
                            ("ratings on-chain twice", doubled_ratings),
                            ("accepted ratings with no Rating row", sorted(accepted - rated)),
                            ("interactions indexed but not on-chain", sorted(indexed - set(auto))),
                            ("on-chain interactions not indexed", sorted(set(auto) - indexed))):
            if found:
                problems.append(f"{len(found)} {what}: {found[:5]}")
        if load.errors:
            problems.append(f"{len(load.errors)} API calls failed: {load.errors[:5]}")
        unconfirmed = list(OutboxItem.objects.exclude(status="confirmed")
                           .values_list("key", "status", "last_error")[:5])
        if unconfirmed:
            problems.append(f"outbox items not confirmed: {unconfirmed}")
        stuck = list(ChainTransaction.objects.filter(status__in=PENDING_TX)
                     .values_list("function", "nonce", "status", "attempts", "last_error")[:5])
        if stuck:
            problems.append(f"transactions not drained: {stuck}")

        watch.stop()
        peaks = {name: watch.peak(name) for name in watch.files}
        for name, (n, line, second) in peaks.items():
            if n > MAX_REPEATS[name]:
                problems.append(f"{name}'s log repeated a line {n} times in one second (limit {MAX_REPEATS[name]}), "
                                f"second {second}: {line[:200]}")
        summary = {
            "seed": seed, "db": connection.vendor, "finality": settings.LLMCHAIN_FINALITY,
            "schedule": faults.log,
            "interactions": len(interactions), "chats": len(load.interactions),
            "replayed": len(interactions) - len(load.interactions),
            "ratings_accepted": len(load.ratings), "ratings_refused": len(load.refused), "api_errors": len(load.errors),
            "onchain": {k: kinds[k] for k in ("AutoEvaluated", "HumanEvaluated", "ReputationUpdated")},
            "lost": {"interactions": len(lost), "ratings": len(lost_ratings)},
            "doubled": {"interactions": len(doubled), "ratings": len(doubled_ratings)},
            "drain_s_after_last_fault": drain_s if not left else None,
            "left": left,
            "audit_exit": audit.returncode, "verify_exit": verify.returncode,
            "log_peaks": {name: [n, line[:80]] for name, (n, line, _) in peaks.items()},
            "log_lines": dict(watch.lines),
            "seconds": {"setup": round(t0 - started, 1), "load_and_faults": round(faults.last_fault_end - t0, 1),
                        "drain": round(drained_at - faults.last_fault_end, 1),
                        "checks": round(time.monotonic() - drained_at, 1),
                        "total": round(time.monotonic() - started, 1)},
        }
        print("FAULTS " + json.dumps(summary), flush=True)
        return summary, problems
    finally:
        watch.stop()
        stack.shutdown()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_ledger_loses_nothing_and_doubles_nothing_under_faults(seed, tmp_path, settings):
    summary, problems = run_seed(seed, tmp_path, settings)
    assert not problems, f"seed {seed}, logs in {tmp_path}:\n" + "\n".join(problems)
