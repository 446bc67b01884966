"""The chain benchmark behind `python manage.py bench chain` (the paper's Fig. 7, measured here).

What it measures, end to end through the code the site runs:

- a fresh anvil node (block time 1 s, free gas, 1e9 block gas limit) on a free port, with the
  contracts deployed and wired by `deploy` (each of its transactions mined at once, then a block a
  second again before the submitters start); nothing touches the node in settings;
- for each function and each offered rate, a producer writes outbox rows at that rate (a bulk
  insert every ~50 ms, rows built as `outbox.enqueue` builds them) while the real `Submitter`
  signs, batches, broadcasts and confirms them; by default the submitter is `python manage.py
  chain submit` in its own process (no shared GIL), pointed at the bench node through
  LLMCHAIN_RPC_URL / LLMCHAIN_DEPLOYMENT / LLMCHAIN_TX_BATCH / LLMCHAIN_RELAYER_KEY;
- the functions, as the site queues them:
  `autoEval` (the oracle, batched in autoEvalBatch);
  `humEval`: a rating signed by its rater (an ERC-2771 request, EIP-712) and relayed by the
  relayer in executeBatch through the forwarder; every request is signed before the timed part,
  as raters sign when they rate, each rater's with consecutive forwarder nonces, and rates an
  interaction already autoEval'd and final;
  `updateReputation`: the relayer's, batched (updateReputationBatch), of interactions already rated;
  `complete`: one interaction's three calls queued together, autoEval, then the relayed humEval
  (depends on it) and updateReputation (depends on the humEval), as apps/chat/ratings.queue_rating
  queues them; confirmed when all three are, its latency from the autoEval's enqueue to the
  updateReputation's confirmation;
  `addModel` (cheap, the developer's, batched) and `humEval-direct` (the rating as a transaction
  from the rater's own address, one nonce lane per rater: the site's LLMCHAIN_RELAY=0) on request;
- per step: confirmed calls per second and latency percentiles of confirmed_at - created_at
  (enqueue to the submitter seeing the call final; LLMCHAIN_FINALITY's local rule is 5 blocks, so
  about 6 s at best); every row of a step must be confirmed before the next step starts;
- throughput, two ways. `confirmed/s` is the rate the pipeline sustained while the step ran, from
  every call's enqueue and confirmation times: the offered rate over the least-squares slope of
  confirmation time on enqueue time (`sustained_rate`: slope 1 when each call is confirmed about
  one latency after it was enqueued, R/C when C calls/s are sustained against R offered and the
  backlog grows), the pipeline's fill time (finality) left out, as the node ceiling is counted
  over full blocks. `e2e/s` is confirmed calls / (last confirmation - first enqueue)
  (Caliper's definition, the bench's earlier figure): it includes one latency, so a
  10 s step at 6 s latency reads at most 10/16 of the offered rate however fast the pipeline;
- a step is saturated when confirmed/s falls under SATURATED_SHARE of the rate actually offered;
  by default a function's higher rates are then skipped (`--full-sweep` runs them);
- the raw node ceiling in the same run: signed no-op transfers from the anvil dev keys,
  pipelined in JSON-RPC batches, counted from the blocks that mined them;
- each step (function and rate) on a fresh node of its own (new contracts, new keys, its own
  ceiling), unless `nodes` (`--nodes`) says "function" (a fresh node per function's sweep) or "one"
  (`--one-node`): on every block anvil (1.7.1, in-memory state) computes the state root over every
  account's storage, so a node's CPU per block grows with the storage earlier steps left (idle, 44%
  of a core at 200,000 storage slots and 100% at 600,000, measured on this machine; 38% at 200,000
  with --prune-history 64, so it is not the history it keeps), and a sweep's higher rates were
  bounded by what its lower ones wrote (autoEval at 3,000/s offered: 2,672/s confirmed on a fresh
  node, 1,986/s after five lower rates' 52,500 interactions). A node with an incremental state trie,
  such as Besu's, is not;
- exactly once, at every rate: each step's calls are counted on-chain (AutoEvaluated,
  HumanEvaluated, ModelAdded events; updateReputation calls as the ReputationUpdated events, two
  per call, of transactions that carry no autoEval or humEval) over the step's blocks, and must
  equal the calls the outbox confirmed; at the end each rater's forwarder nonce must equal their
  confirmed relayed requests;
- where the time goes: per step, the CPU time of the submitter, anvil, PostgreSQL and the bench
  itself (from /proc), the fullest block's gas, and how many calls the submitter took per pass
  (its limit is max_items); with `profile_dir`, the submitter runs under cProfile, one profile per
  step, and each saturated step's profile is summarised (time by kind: database, node RPC,
  signing, ABI, JSON; the submitter's phases; the top cumulative entries).

Rows: the bench uses the command's database. Every sender it uses is a key it creates
(`keys.new_key`), so its rows are told apart by sender address and deleted at the end
(`keep_rows` keeps them). Because the submitter works on every pending row of the database, the
bench refuses to start when the database holds pending work of other senders or a submitter
lease that is still running: it would send those calls to the throw-away node.
"""

from __future__ import annotations

import math
import os
import pstats
import queue
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

from coincurve import PrivateKey
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import Count
from django.test.utils import override_settings
from django.utils import timezone
from eth_account import Account
from eth_utils import keccak, to_canonical_address

from apps.chain.client import ChainClient, ChainError, account_from_key, from_hex, to_hex
from apps.chain.deploy import deploy, grant_oracle_roles
from apps.chain.keys import (account_for, address_slot, new_key, oracle_address, oracle_addresses, relayer_address,
                             store_key)
from apps.chain import relay
from apps.chain.ledger import RELAY_NONCE_WINDOW, RELAYABLE, Deployment, Ledger
from apps.chain.metatx import DOMAIN_NAME, DOMAIN_VERSION, EIP712_DOMAIN, FORWARD_REQUEST, ForwardRequest, to_json
from apps.chain.models import ChainTransaction, OutboxItem, Sender, SigningKey
from apps.chain.node import DEV_KEYS, AnvilNode
from apps.chain.outbox import HUM_FIELDS, check_call, check_request, idempotency_key
from apps.chain.submitter import Submitter
from apps.chain.work import run_worker
from lib.reputation import WAD

from .common import BenchError, Out, debug_off_env, manage_py, percentile

ITEM = OutboxItem.Status
FUNCTIONS = ("autoEval", "humEval", "updateReputation", "complete", "addModel", "humEval-direct")
DEFAULT_FUNCTIONS = ("autoEval", "humEval", "updateReputation", "complete")
NODES = ("step", "function", "one")  # where the steps run: see ChainBenchConfig.nodes
DEFAULT_RATES = (250, 500, 1000, 1500, 2000, 3000, 4000)
PAPER_PEAK_PER_S = 420  # Fig. 7: 16-validator Besu cluster
SATURATED_SHARE = 0.85
SAMPLE_CHECKED = 50  # pre-signed requests of each step checked with outbox.check_request


def sustained_rate(enqueued: list[float], confirmed: list[float], offered_per_s: float) -> tuple[float, float]:
    """The rate a step's pipeline sustained, and the slope it is read from.

    `enqueued[i]` and `confirmed[i]` are one call's (or interaction's) times in seconds. Calls
    confirm in bunches (one submitter pass, one final block), so counting the calls between two
    passes swings with where a step's few passes fall. Every call is used instead: the
    least-squares slope of confirmation time over enqueue time. A pipeline that keeps up confirms
    each call about one latency after it was enqueued (slope 1); one that sustains C calls/s
    against R offered confirms the i-th at about i/C (slope R/C), its backlog and latency growing
    all along the step. So confirmed/s = offered/s / slope, never above the rate offered (a slope
    under 1 means the first calls waited longer, not that the pipeline outran its input).
    NaN for fewer than three calls or calls all enqueued at one instant.
    """
    n = len(enqueued)
    if n < 3 or n != len(confirmed):
        return math.nan, math.nan
    mx, my = sum(enqueued) / n, sum(confirmed) / n
    var = sum((x - mx) ** 2 for x in enqueued)
    if var <= 0:
        return math.nan, math.nan
    slope = sum((x - mx) * (y - my) for x, y in zip(enqueued, confirmed)) / var
    return offered_per_s / max(slope, 1.0), slope


@dataclass
class ChainBenchConfig:
    rates: list[int] = field(default_factory=lambda: list(DEFAULT_RATES))
    duration: float = 10.0  # seconds of offered load per (function, rate) step
    batch: int = 64  # the submitter's batch size (LLMCHAIN_TX_BATCH; the site default is 64)
    functions: list[str] = field(default_factory=lambda: list(DEFAULT_FUNCTIONS))
    users: int = 200  # raters: each signs with consecutive forwarder nonces (humEval-direct: a lane each)
    contexts: int = 4
    models: int = 16
    tick: float = 0.05  # the producer writes a bulk of rows this often
    drain_timeout: float = 120.0  # bounded wait for a step's rows after its load stops
    # Skip a function's higher rates once a step saturated the pipeline: each of them would only
    # add a long drain.
    stop_when_saturated: bool = True
    ceiling_duration: float = 8.0
    submitter: str = "process"  # "process" (`manage.py chain submit`) or "thread"
    # Submitter processes side by side (`chain submit --shard i/n`), with one oracle key and one relayer
    # key each: the autoEval calls spread over the oracle's lanes by interaction, the relayed ratings and
    # updateReputation calls over the relayers' by rater.
    submitters: int = 2
    keep_rows: bool = False
    # Where the steps run: "step", each (function, rate) on a fresh node of its own (new contracts, keys and
    # ceiling); "function", each function's sweep on one fresh node; "one", everything on one node. anvil
    # computes its state root over the whole state on every block, so its CPU per block grows with the
    # storage the earlier steps left (measured: idle, 44% of a core at 200,000 storage slots, 100% at
    # 600,000; autoEval at 3,000/s offered confirmed 2,672/s on a fresh node and 1,986/s after the sweep's
    # five lower rates had written 52,500 interactions).
    nodes: str = "step"
    work_dir: Path | None = None  # anvil log, deployment file, submitter log
    profile_dir: Path | None = None  # the submitter process under cProfile, one .prof per step

    def __post_init__(self):
        if self.batch < 1 or self.users < 1 or self.duration <= 0:
            raise ValueError("--batch and --users must be at least 1, --duration positive")
        if self.profile_dir and self.submitter != "process":
            raise ValueError("--profile profiles the submitter process: not with --submitter thread")
        if self.submitters < 1 or (self.submitter == "thread" and self.submitters != 1):
            raise ValueError("--submitters: at least 1, and 1 with --submitter thread")
        if self.nodes not in NODES:
            raise ValueError(f"--nodes is one of {', '.join(NODES)}, not {self.nodes!r}")

    @property
    def one_node(self) -> bool:
        """Every step on one node: nothing to split (one function and one rate), or asked for."""
        return self.nodes == "one" or (len(self.functions) == 1 and (self.nodes == "function" or len(self.rates) == 1))


@dataclass
class StepResult:
    function: str
    rate: int
    offered: int  # calls, or interactions for `complete`
    offered_per_s: float  # as actually written by the producer
    confirmed: int
    failed: int
    unconfirmed: int
    duplicates: int
    txs: int
    per_s: float  # sustained: offered/s over the slope of confirmation time on enqueue time (sustained_rate)
    e2e_per_s: float  # confirmed / (last confirmation - first enqueue)
    p50_ms: float
    p95_ms: float
    max_ms: float
    drain_s: float  # last confirmation - last enqueue: about one latency when the submitter keeps up
    ratio: float = math.nan  # per_s / the node ceiling (tx/s)
    node_tx_per_s: float = math.nan  # the ceiling of the node the step ran on
    calls: dict = field(default_factory=dict)  # confirmed calls by function (the three of `complete`)
    on_chain: dict = field(default_factory=dict)  # the same, counted from the step's blocks
    blocks: int = 0
    max_block_gas: float = math.nan  # share of the block gas limit used by the fullest block
    passes: int = 0  # submitter passes that broadcast the step's transactions
    max_items_per_pass: int = 0
    cpu: dict = field(default_factory=dict)  # % of one core over the step (load + drain), by process
    bound: str = ""

    @property
    def saturated(self) -> bool:
        return not math.isnan(self.per_s) and self.per_s < SATURATED_SHARE * self.offered_per_s

    @property
    def on_chain_ok(self) -> bool:
        return self.on_chain == self.calls


@dataclass
class Ceiling:
    tx_per_s: float
    txs: int
    blocks: int
    send_per_s: float


class Scored(NamedTuple):
    """An interaction whose autoEval is final: a rater may rate it."""
    auto_pk: int
    iid: str
    user: str


def rand_id() -> str:
    return "0x" + secrets.token_hex(32)


def outbox_row(function: str, sender: str, payload: dict, depends_on_id: int | None = None) -> OutboxItem:
    """An unsaved outbox row, exactly as `outbox.enqueue` would write it."""
    clean = check_call(function, payload)
    return OutboxItem(function=function, sender_address=sender, key=idempotency_key(function, clean),
                      payload=clean, depends_on_id=depends_on_id)


def relayed_row(function: str, rater: str, clean: dict, request: ForwardRequest, relayer: str,
                depends_on_id: int | None = None) -> OutboxItem:
    """An unsaved outbox row of a signed request, as `outbox.enqueue(..., request=request)` writes it
    (the relayer's lane, the rater as signer, the request and its nonce); `clean` is check_call's."""
    return OutboxItem(function=function, sender_address=relayer, signer=rater, request=to_json(request),
                      relay_nonce=request.nonce, key=idempotency_key(function, clean), payload=clean,
                      depends_on_id=depends_on_id)


class RequestSigner:
    """Signs raters' ERC-2771 requests as `metatx.sign_request` does, about 20 times faster: the
    EIP-712 digest (domain separator once, the ForwardRequest struct hash per request) is computed
    here and signed with coincurve (RFC 6979, low s, as eth_account). The bench signs tens of
    thousands of requests before its steps; eth_account's typed-data path takes ~1 ms each."""

    def __init__(self, chain_id: int, forwarder: str):
        def type_hash(name: str, fields: list[dict]) -> bytes:
            return keccak(text=f"{name}({','.join(f['type'] + ' ' + f['name'] for f in fields)})")

        assert [f["name"] for f in EIP712_DOMAIN] == ["name", "version", "chainId", "verifyingContract"]
        assert [f["name"] for f in FORWARD_REQUEST] == ["from", "to", "value", "gas", "nonce", "deadline", "data"]
        self.domain = keccak(type_hash("EIP712Domain", EIP712_DOMAIN) + keccak(text=DOMAIN_NAME)
                             + keccak(text=DOMAIN_VERSION) + chain_id.to_bytes(32, "big")
                             + to_canonical_address(forwarder).rjust(32, b"\0"))
        self.type_hash = type_hash("ForwardRequest", FORWARD_REQUEST)
        self._keys: dict[bytes, PrivateKey] = {}

    def digest(self, r: ForwardRequest) -> bytes:
        struct = keccak(self.type_hash + to_canonical_address(r.sender).rjust(32, b"\0")
                        + to_canonical_address(r.to).rjust(32, b"\0") + r.value.to_bytes(32, "big")
                        + r.gas.to_bytes(32, "big") + r.nonce.to_bytes(32, "big") + r.deadline.to_bytes(32, "big")
                        + keccak(r.data))
        return keccak(b"\x19\x01" + self.domain + struct)

    def sign(self, request: ForwardRequest, private_key: bytes) -> ForwardRequest:
        key = self._keys.get(private_key) or self._keys.setdefault(private_key, PrivateKey(private_key))
        rsv = key.sign_recoverable(self.digest(request), hasher=None)
        return request.signed(rsv[:64] + bytes([rsv[64] + 27]))


def shard_account(index: int, count: int):
    """A new account whose address is `index` modulo `count`: the lane of the index-th submitter."""
    while True:
        account = Account.create()
        if address_slot(account.address, count) == index:
            return account


def database_url() -> str:
    """This process's database as a DATABASE_URL, for the submitter process."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    if "postgresql" in s["ENGINE"]:
        auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
        return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    raise BenchError(f"cannot hand database engine {s['ENGINE']} to a process: use --submitter thread")


# --- where the time goes ------------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), None when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _tree_cpu_s(pid: int) -> float | None:
    """CPU seconds of a process and its descendants (anvil runs as a child of its npm launcher)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir() if Path("/proc").exists() else []:
        if entry.name.isdigit():
            try:
                children[int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])].append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    total, todo = None, [pid]
    while todo:
        p = todo.pop()
        cpu = _cpu_s(p)
        if cpu is not None:
            total = (total or 0.0) + cpu
        todo += children.get(p, [])
    return total


def _postgres_cpu_s() -> float | None:
    """CPU seconds of every process named postgres on this machine (the database server, if local)."""
    total, found = 0.0, False
    for entry in Path("/proc").iterdir() if Path("/proc").exists() else []:
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() != "postgres":
                    continue
            except OSError:
                continue
            cpu = _cpu_s(int(entry.name))
            if cpu is not None:
                total, found = total + cpu, True
    return total if found else None


def _machine_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine, all cores (/proc/stat)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / CLOCK_TICKS


class CpuMeter:
    """CPU time of the processes in the pipeline over a window, as % of one core: each of `pids`
    with its descendants, PostgreSQL's, and this process's own (the producer, not its children)."""

    def __init__(self, pids: dict[str, list[int]]):
        self.pids = pids

    def read(self) -> dict[str, float | None]:
        out = {}
        for name, pids in self.pids.items():
            times = [_tree_cpu_s(pid) for pid in pids]
            out[name] = None if not times or None in times else sum(times)
        out["bench"] = _cpu_s(os.getpid())
        out["postgres"] = _postgres_cpu_s() if connection.vendor == "postgresql" else None
        out["machine"] = _machine_busy_s()
        out["wall"] = time.monotonic()
        return out

    @staticmethod
    def share(before: dict, after: dict) -> dict[str, float]:
        """% of one core by process over the window; `others`: the machine's busy time that none of
        them used (other work on a shared machine)."""
        wall = after["wall"] - before["wall"]
        out = {k: round(100 * (after[k] - before[k]) / wall) for k in before
               if k != "wall" and before[k] is not None and after[k] is not None and wall > 0}
        if "machine" in out:
            out["others"] = max(0, out["machine"] - sum(v for k, v in out.items() if k != "machine"))
        return out


PROFILE_KINDS = (  # (kind, substrings of a cProfile entry's file or name), first match wins
    ("idle", ("time.sleep", "method 'wait' of", "acquire' of '_thread")),
    ("database", ("psycopg", "django/db", "sqlite3")),
    ("node RPC (HTTP, waiting for anvil)", ("_socket", "http/client", "socket.py", "ssl.py", "urllib",
                                            "requests/", "selectors", "select.", "email/")),
    ("signing and hashing", ("eth_account", "eth_keys", "coincurve", "eth_hash", "Crypto", "rlp/",
                             "eth_rlp", "hexbytes", "keccak")),
    ("ABI encode/decode and address checksums", ("eth_abi", "apps/chain/abi.py", "parsimonious", "eth_utils")),
    ("start-up (imports)", ("importlib", "marshal.loads")),
    ("JSON", ("json",)),
    ("Django (not the database)", ("django/",)),
    ("submitter logic", ("apps/chain/",)),
)


def profile_summary(paths: list[Path]) -> tuple[dict[str, float], dict[str, float], list[str], float]:
    """cProfile files of the submitters, added up: (share of their time by kind, cumulative seconds
    of their phases, the top cumulative entries, total seconds). Kinds partition the own time
    (tottime) of every function by its file or, for a builtin, its name."""
    stats = pstats.Stats(*[str(p) for p in paths])
    by_kind: Counter = Counter()
    phases: dict[str, float] = {}
    total = 0.0
    for (filename, _, name), (_, _, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        total += tottime
        where = f"{filename}:{name}"
        kind = next((k for k, marks in PROFILE_KINDS if any(m in where for m in marks)), "other")
        by_kind[kind] += tottime
        if "apps/chain/submitter/" in filename and name in (
                "run_once", "_acquire_lanes", "check", "relay_outcomes", "heal", "sign_new",
                "ready_items", "_in_nonce_order", "call_of", "broadcast", "settle"):
            phases[name] = phases.get(name, 0.0) + cumtime
    shares = {k: round(100 * v / total, 1) for k, v in by_kind.most_common()} if total else {}
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][3], reverse=True)  # type: ignore[attr-defined]
    lines = []
    for (filename, line, name), (_, ncalls, _, cumtime, _) in top:
        if filename == "~" and name in ("<built-in method builtins.exec>",):
            continue
        short = filename.split("site-packages/")[-1].replace(str(settings.BASE_DIR) + "/", "")
        lines.append(f"{cumtime:8.2f} s {ncalls:>9} calls  {short}:{line}({name})")
        if len(lines) == 15:
            break
    return shares, phases, lines, total


# --- the submitter under test -------------------------------------------------------------------

class SubmitterProcess:
    """`python manage.py chain submit` on the bench node and this database (under cProfile,
    writing `profile`, when it is given)."""

    def __init__(self, node_url: str, deployment_file: Path, batch: int, keys: dict[str, str], log_file: Path,
                 profile: Path | None = None, shard: tuple[int, int] = (0, 1)):
        env = {**os.environ, "DATABASE_URL": database_url(), "LLMCHAIN_RPC_URL": node_url,
               "LLMCHAIN_DEPLOYMENT": str(deployment_file), "LLMCHAIN_TX_BATCH": str(batch),
               **keys,  # the oracle's and the relayers'
               "LLMCHAIN_GAS_PRICE": "auto", "LLMCHAIN_POA": "0",
               # as in production: with DEBUG on, Django logs and quotes every query's parameters
               **debug_off_env()}
        self.log_file = log_file
        self.profile = profile
        self._log = open(log_file, "ab")
        command = [*manage_py(), "chain", "submit", "--shard", f"{shard[0]}/{shard[1]}"]
        if profile:
            command = [sys.executable, "-m", "cProfile", "-o", str(profile), *command[1:]]
        self.proc = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        self.label = f"process (pid {self.proc.pid})"

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_file.read_text(errors="replace")[-2000:]
            raise BenchError(f"the submitter process exited with code {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class SubmitterPool:
    """`count` submitter processes side by side, the i-th taking the lanes whose address is i modulo
    `count` (`chain submit --shard i/count`): the bench's oracle keys and relayers are one per shard."""

    def __init__(self, count: int, node_url: str, deployment_file: Path, batch: int, keys: dict[str, str],
                 work_dir: Path, profile: Path | None = None):
        self.procs = [SubmitterProcess(node_url, deployment_file, batch, keys,
                                       work_dir / f"submitter-{i}.log" if count > 1 else work_dir / "submitter.log",
                                       profile_path(profile, i, count), shard=(i, count)) for i in range(count)]
        self.pids = [p.proc.pid for p in self.procs]
        self.profiles = [p.profile for p in self.procs if p.profile]
        self.label = (self.procs[0].label if count == 1 else
                      f"{count} processes side by side, one per oracle key and relayer (pids {', '.join(map(str, self.pids))})")

    def check(self) -> None:
        for proc in self.procs:
            proc.check()

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


def profile_path(profile: Path | None, index: int, count: int) -> Path | None:
    """The i-th of `count` submitters' profile file: `profile` itself when it is the only one."""
    if profile is None or count == 1:
        return profile
    return profile.with_name(f"{profile.stem}-{index}{profile.suffix}")


class SubmitterThread:
    """The same loop as `Submitter.run_forever`, in a thread of this process (shares the GIL)."""

    def __init__(self, ledger: Ledger, batch: int):
        self.ledger, self.batch = ledger, batch
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="bench-submitter", daemon=True)
        self.thread.start()
        self.pids: list[int] = []  # its CPU time is this process's
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
        self.submitter: SubmitterPool | SubmitterThread | None = None
        self.results: list[StepResult] = []
        self.skipped: dict[str, list[int]] = {}
        self.ceiling: Ceiling | None = None
        self.footer = True  # False for a part of a run (_run_on_fresh_nodes)
        self.header = True  # False for a part after the first: a line with its node's ceiling only
        self.notes: list[str] = []
        self.scored: deque[Scored] = deque()  # autoEval'd and final, not rated yet
        self.rated: deque[tuple[int, str]] = deque()  # (humEval row, interaction): rated, not updated yet
        self.user_keys: dict[str, bytes] = {}
        self.next_nonce: Counter = Counter()  # each rater's next forwarder nonce
        self.forwarder_nonces_ok: bool | None = None
        self.profiles: dict[tuple[str, int], list[Path]] = {}  # the submitters' profile files of a step
        self.relayed_requests = 0

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
        cfg = self.cfg
        unknown = set(cfg.functions) - set(FUNCTIONS)
        if unknown:
            raise BenchError(f"unknown functions {sorted(unknown)}; choose among {', '.join(FUNCTIONS)}")
        self.check_database()
        if not cfg.one_node:
            return self._run_on_fresh_nodes()
        # Logs are kept only in a folder the caller names (anvil logs every transaction).
        self.work_dir = Path(cfg.work_dir or tempfile.mkdtemp(prefix="llmchain-bench-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if cfg.profile_dir:
            Path(cfg.profile_dir).mkdir(parents=True, exist_ok=True)
        # The oracle and the relayers are bench keys too: the submitter processes get them as
        # LLMCHAIN_ORACLE_KEY and LLMCHAIN_RELAYER_KEY, and this process's code (oracle_address,
        # relayer_address, check_request) sees the same keys and the bench's deployment. DEBUG off as in
        # production (and as the submitter process runs): no query log, which with DEBUG on costs a
        # quoting round trip per query of the producer. One oracle key and one relayer per submitter,
        # each on its shard (its address modulo their number), as a deployment would choose them.
        oracles = [shard_account(i, cfg.submitters) for i in range(cfg.submitters)]
        relayers = [shard_account(i, cfg.submitters) for i in range(cfg.submitters)]
        self.operator_keys = {name: ",".join("0x" + bytes(a.key).hex() for a in accounts) for name, accounts in (
            ("LLMCHAIN_ORACLE_KEY", oracles), ("LLMCHAIN_RELAYER_KEY", relayers))}
        self.addresses |= {a.address for a in oracles + relayers}
        with override_settings(DEBUG=False, LLMCHAIN_DEPLOYMENT=str(self.work_dir / "deployment.json"),
                               **self.operator_keys):
            for i, relayer in enumerate(relayers):
                store_key(relayer.key, f"bench-relayer{i}")
            return self._run()

    def _run_on_fresh_nodes(self) -> dict:
        """Each function's sweep on a fresh node (nodes "function"), or each of its steps on one (nodes
        "step"): new contracts, keys and ceiling each; a step's ratio is to its own node's ceiling. The
        figures are gathered into one summary."""
        cfg = self.cfg
        started = time.monotonic()
        checked: list[bool] = []
        first = True
        for function in cfg.functions:
            saturated: StepResult | None = None
            for rates in ([[r] for r in cfg.rates] if cfg.nodes == "step" else [list(cfg.rates)]):
                if saturated and cfg.stop_when_saturated:
                    self._skip(function, rates, saturated)
                    continue
                label = f"{function} at {rates[0]}/s" if cfg.nodes == "step" else function
                self.out(f"--- {label}: a fresh node, contracts and keys")
                folder = Path(cfg.work_dir) / function if cfg.work_dir else None
                if folder and cfg.nodes == "step":
                    folder = folder / str(rates[0])
                part = ChainBench(replace(cfg, functions=[function], rates=rates, nodes="one", work_dir=folder),
                                  self.out)
                part.footer, part.header = False, first
                first = False
                part.run()
                self.results += part.results
                self.skipped.update(part.skipped)
                self.notes += part.notes
                self.relayed_requests += part.relayed_requests
                if part.forwarder_nonces_ok is not None:  # a part that relayed: all of them must be right
                    checked.append(part.forwarder_nonces_ok)
                saturated = saturated or next((r for r in part.results if r.saturated), None)
        self.forwarder_nonces_ok = all(checked) if checked else None
        summary = self.summary(time.monotonic() - started)
        self._print_footer(summary)
        return summary

    def _run(self) -> dict:
        cfg = self.cfg
        started = time.monotonic()
        try:
            self._setup_chain(self.work_dir)
            with override_settings(LLMCHAIN_RPC_URL=self.node.url):  # the chain's clock for check_request
                self._sweep()
            self.forwarder_nonces_ok = self.check_forwarder_nonces()
            self.submitter.stop()
        finally:
            if self.submitter:
                self.submitter.stop()
            if self.node:
                self.node.stop()
            if not cfg.keep_rows:
                self.delete_rows()
            if not cfg.work_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)
        summary = self.summary(time.monotonic() - started)
        if self.footer:
            self._print_footer(summary)
        return summary

    def _skip(self, function: str, rates: list[int], saturated: StepResult) -> None:
        """A function's higher rates, once a step saturated the pipeline: each would only add a long drain."""
        self.skipped.setdefault(function, []).extend(rates)
        self.out(f"{function:<16} {rates[0]:>9}  skipped: saturated at offered {saturated.rate}/s "
                 f"({saturated.per_s:.0f}/s confirmed; --full-sweep runs it)")

    def _sweep(self) -> None:
        cfg = self.cfg
        self._setup_world()
        self.ceiling = self.measure_ceiling(cfg.ceiling_duration)
        self._print_header()
        for function in cfg.functions:
            saturated: StepResult | None = None
            for rate in cfg.rates:
                if saturated:
                    self._skip(function, [rate], saturated)
                    continue
                result = self.step(function, rate)
                self.results.append(result)
                self._print_row(result)
                if result.saturated:
                    self._explain(result)
                if cfg.stop_when_saturated and result.saturated:
                    saturated = result

    # -- setup (not timed) ---------------------------------------------------------------------
    def _setup_chain(self, work_dir: Path) -> None:
        cfg = self.cfg
        self.node = AnvilNode(block_time=1, base_fee=0,
                              log_file=work_dir / "anvil.log" if cfg.work_dir else None).start()
        self.client = ChainClient(self.node.url)
        self.admin = self.key("bench-admin")
        self.developer = self.key("bench-developer")
        self.users = []
        for i in range(cfg.users):
            account = Account.create()
            store_key(account.key, f"bench-user{i}")
            self.users.append(account.address)
            self.user_keys[account.address] = bytes(account.key)
        self.addresses |= set(self.users)
        # The deployment's transactions one after the other, each mined at once (automine), where each
        # waited for the next block, a second (seven of them: 7 s of every fresh node's setup); then a
        # block a second again, before the submitters start and anything is measured.
        self.client.request("evm_setIntervalMining", [0])
        self.client.request("evm_setAutomine", [True])
        # Free gas: no funds are needed; a balance anyway, in case the node ever prices gas.
        self.client.batch([("anvil_setBalance", [a, hex(10**24)]) for a in sorted(self.addresses)])
        admin = account_for(self.admin)
        self.deployment: Deployment = deploy(self.client, admin)
        grant_oracle_roles(self.client, self.deployment, admin, oracle_addresses())
        self.client.request("evm_setAutomine", [False])
        self.client.request("evm_setIntervalMining", [1])
        self.deployment_file = work_dir / "deployment.json"
        self.deployment.save(self.deployment_file)
        self.ledger = Ledger(self.client, self.deployment)
        self.signer = RequestSigner(self.deployment.chainId, self.deployment.forwarder)
        self._start_submitter()

    def _start_submitter(self, profile: Path | None = None) -> None:
        cfg = self.cfg
        if cfg.submitter == "process":
            self.submitter = SubmitterPool(cfg.submitters, self.node.url, self.deployment_file, cfg.batch,
                                           self.operator_keys, self.work_dir, profile)
        elif cfg.submitter == "thread":
            self.submitter = SubmitterThread(Ledger(ChainClient(self.node.url), self.deployment), cfg.batch)
        else:
            raise BenchError(f"--submitter is process or thread, not {cfg.submitter!r}")

    def _restart_submitter(self, profile: Path | None = None) -> None:
        self.submitter.stop()
        self._start_submitter(profile)

    def _setup_world(self) -> None:
        """Registrations, contexts and models, confirmed before anything is timed."""
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

    def _ensure_scored(self, needed: int) -> None:
        """At least `needed` interactions autoEval'd and final, for humEval steps (not timed)."""
        missing = needed - len(self.scored)
        if missing <= 0:
            return
        t0 = time.monotonic()
        rows = [self._auto_eval_row(self.users[i % len(self.users)]) for i in range(missing)]
        self._insert(rows)
        self._wait([r.pk for r in rows], "interactions to rate", max(self.cfg.drain_timeout, missing / 100),
                   setup=True)
        self.scored.extend(Scored(r.pk, r.payload["interactionId"], r.payload["user"]) for r in rows)
        self.out(f"setup: {missing} interactions autoEval'd to be rated, in {time.monotonic() - t0:.1f} s (not timed)")

    def _ensure_rated(self, needed: int) -> None:
        """At least `needed` interactions rated (relayed humEval, final), for updateReputation steps."""
        missing = needed - len(self.rated)
        if missing <= 0:
            return
        self._ensure_scored(missing)
        t0 = time.monotonic()
        rows = self._hum_eval_rows(missing, relayed=True)
        self._insert(rows)
        self._wait([r.pk for r in rows], "ratings to update", max(self.cfg.drain_timeout, missing / 100), setup=True)
        self.rated.extend((r.pk, r.payload["interactionId"]) for r in rows)
        self.out(f"setup: {missing} interactions rated (relayed humEval) for updateReputation, in "
                 f"{time.monotonic() - t0:.1f} s (not timed)")

    # -- rows ----------------------------------------------------------------------------------
    def _auto_eval_row(self, user: str, iid: str | None = None) -> OutboxItem:
        iid = iid or rand_id()
        return outbox_row("autoEval", oracle_address(iid), {
            "interactionId": iid, "modelId": random.choice(self.models), "contextId": random.choice(self.contexts),
            "user": user, "hasReference": random.random() < 0.5, "sA": str(random.randint(0, WAD)),
            "wA": str(random.randint(WAD // 10, WAD)), "evidenceCid": f"bafybench{iid[2:18]}"})

    def _signed_requests(self, ratings: list[tuple[str, str]]) -> list[tuple[dict, ForwardRequest]]:
        """(clean payload, signed request) for each (interaction, rater): each rater's next forwarder
        nonces in this order, signed now, as the rater signs when they rate."""
        deadline = int(time.time()) + settings.LLMCHAIN_RELAY_DEADLINE_S
        out = []
        for iid, user in ratings:
            clean = check_call("humEval", {"interactionId": iid, **{f: random.randint(1, 5) for f in HUM_FIELDS}})
            to, data = self.ledger.request_calldata("humEval", clean)
            nonce = self.next_nonce[user]
            self.next_nonce[user] += 1
            request = ForwardRequest(sender=user, to=to, gas=RELAYABLE["humEval"], nonce=nonce, deadline=deadline,
                                     data=data)
            out.append((clean, self.signer.sign(request, self.user_keys[user])))
        # The rows are built directly for speed; a sample goes through the site's own door. The door
        # takes a nonce only within RELAY_NONCE_WINDOW of what the signer has queued so far, and none of
        # these rows is queued yet: the sample is drawn from the requests it would take now.
        first = {user: relay.next_nonce(user) for user in {u for _, u in ratings}}
        takeable = [(pair, user) for pair, (_, user) in zip(out, ratings)
                    if pair[1].nonce < first[user] + RELAY_NONCE_WINDOW]
        for (clean, request), user in random.sample(takeable, min(SAMPLE_CHECKED, len(takeable))):
            check_request("humEval", user, clean, request)
        return out

    def _hum_eval_rows(self, count: int, *, relayed: bool) -> list[OutboxItem]:
        """The next `count` scored interactions rated by their users, each row depending on its
        autoEval row as the site queues them: signed requests in the relayer's lane, or (not
        relayed) transactions from the rater's own lane."""
        if len(self.scored) < count:
            raise BenchError("not enough scored interactions to rate")
        taken = [self.scored.popleft() for _ in range(count)]
        if not relayed:
            return [outbox_row("humEval", s.user, {"interactionId": s.iid, **{f: random.randint(1, 5)
                                                                             for f in HUM_FIELDS}},
                               depends_on_id=s.auto_pk) for s in taken]
        t0 = time.monotonic()
        signed = self._signed_requests([(s.iid, s.user) for s in taken])
        self.out(f"setup: {count} humEval requests signed by {len({s.user for s in taken})} raters in "
                 f"{time.monotonic() - t0:.1f} s ({min(SAMPLE_CHECKED, count)} checked by outbox.check_request; "
                 "not timed)")
        return [relayed_row("humEval", s.user, clean, request, relayer_address(s.user), depends_on_id=s.auto_pk)
                for s, (clean, request) in zip(taken, signed)]

    def _units_for(self, function: str, count: int) -> list[tuple[OutboxItem, ...]]:
        """The step's load, built before it is timed: `count` units, each one row or (complete) the
        rows of one interaction, each depending on the one before it."""
        if function == "addModel":
            return [(outbox_row("addModel", self.developer, {"modelId": rand_id(), "metadataCid": f"bafybench{i}"}),)
                    for i in range(count)]
        if function == "autoEval":
            return [(self._auto_eval_row(random.choice(self.users)),) for _ in range(count)]
        if function in ("humEval", "humEval-direct"):
            self._ensure_scored(count)
            return [(r,) for r in self._hum_eval_rows(count, relayed=function == "humEval")]
        if function == "updateReputation":
            self._ensure_rated(count)
            taken = [self.rated.popleft() for _ in range(count)]
            return [(outbox_row("updateReputation", relayer_address(iid), {"interactionId": iid}, depends_on_id=pk),)
                    for pk, iid in taken]
        # complete: fresh interactions; their ratings signed beforehand (a request needs only the
        # interaction's id); the dependencies are set as each level is inserted.
        autos = [self._auto_eval_row(random.choice(self.users)) for _ in range(count)]
        t0 = time.monotonic()
        signed = self._signed_requests([(a.payload["interactionId"], a.payload["user"]) for a in autos])
        self.out(f"setup: {count} humEval requests signed in {time.monotonic() - t0:.1f} s for the complete "
                 "evaluations (not timed)")
        return [(auto, relayed_row("humEval", auto.payload["user"], clean, request,
                                   relayer_address(auto.payload["user"])),
                 outbox_row("updateReputation", relayer_address(auto.payload["user"]),
                            {"interactionId": auto.payload["interactionId"]}))
                for auto, (clean, request) in zip(autos, signed)]

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

    def _insert_units(self, units: list[tuple[OutboxItem, ...]]) -> None:
        """One bulk insert per level (an interaction's autoEval, then its humEval, then its
        updateReputation), each row pointing at the one before it; one database transaction."""
        with transaction.atomic():
            for level in range(len(units[0])):
                rows = [u[level] for u in units]
                if level:
                    for u in units:
                        u[level].depends_on_id = u[level - 1].pk
                self._insert(rows)

    def _vacuum(self) -> None:
        """Every call leaves dead row versions in the outbox (pending, signed, confirmed) and every step
        tens of thousands: on a PostgreSQL server whose autovacuum is off, the bench vacuums its
        tables itself before each step (not timed), as autovacuum would between them, or each step
        would read through the dead rows of all the steps before it."""
        if connection.vendor != "postgresql" or not self.vacuums:
            return
        with connection.cursor() as cur:
            for model in (OutboxItem, ChainTransaction, Sender):
                cur.execute(f"VACUUM ANALYZE {model._meta.db_table}")

    @cached_property
    def vacuums(self) -> bool:
        if connection.vendor != "postgresql":
            return False
        with connection.cursor() as cur:
            cur.execute("SHOW autovacuum")
            return cur.fetchone()[0] == "off"

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
        units = self._units_for(function, total)
        self._vacuum()
        profile = None
        if cfg.profile_dir:
            profile = Path(cfg.profile_dir) / f"submitter-{function}-{rate}.prof"
            self._restart_submitter(profile)
        meter = CpuMeter({"submitter": self.submitter.pids, "anvil": [self.node.proc.pid]})
        cpu0 = meter.read()
        sent = 0
        t0 = time.monotonic()
        next_tick = t0
        while sent < total:
            due = min(total, int(rate * (time.monotonic() - t0)) + 1)
            if due > sent:
                self._insert_units(units[sent:due])
                sent = due
            next_tick += cfg.tick
            pause = next_tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        produced_s = max(time.monotonic() - t0, 1e-9)
        pks = [r.pk for u in units for r in u]
        self._wait(pks, f"{function} at {rate}/s", cfg.drain_timeout)
        cpu = CpuMeter.share(cpu0, meter.read())
        if profile:
            self.profiles[(function, rate)] = self.submitter.profiles
            self._restart_submitter()
        result = self._result(function, rate, units, total / produced_s)
        result.cpu = cpu
        self._harvest(function, units)
        return result

    def _result(self, function: str, rate: int, units: list[tuple[OutboxItem, ...]],
                offered_per_s: float) -> StepResult:
        pks = [r.pk for u in units for r in u]
        rows = {pk: row for pk, *row in OutboxItem.objects.filter(
            pk__gte=min(pks), pk__lte=max(pks), sender_address__in=self.addresses).values_list(
            "pk", "function", "status", "created_at", "confirmed_at", "transaction_id", "duplicate").iterator(
            chunk_size=5000)}
        done, failed, starts, calls = [], 0, [], Counter()
        for unit in units:
            states = [rows[r.pk] for r in unit]
            starts.append(states[0][2])
            if all(s[1] == ITEM.CONFIRMED for s in states):
                done.append((states[0][2], max(s[3] for s in states)))
            elif any(s[1] == ITEM.FAILED for s in states):
                failed += 1
            calls.update(s[0] for s in states if s[1] == ITEM.CONFIRMED)
        step_rows = [rows[pk] for pk in pks]
        tx_ids = {s[4] for s in step_rows if s[4] and s[1] == ITEM.CONFIRMED}
        latencies = [(end - start).total_seconds() * 1000 for start, end in done]
        per_s = e2e = drain = math.nan
        if done:
            first, last = min(starts), max(end for _, end in done)
            span = (last - first).total_seconds()
            e2e = len(done) / span if span > 0 else math.nan
            drain = (last - max(starts)).total_seconds()
            per_s, _ = sustained_rate([(s - first).total_seconds() for s, _ in done],
                                      [(e - first).total_seconds() for _, e in done], offered_per_s)
        result = StepResult(
            function=function, rate=rate, offered=len(units), offered_per_s=offered_per_s, confirmed=len(done),
            failed=failed, unconfirmed=len(units) - len(done) - failed,
            duplicates=sum(1 for s in step_rows if s[5]), txs=len(tx_ids), per_s=per_s, e2e_per_s=e2e,
            p50_ms=percentile(latencies, 50), p95_ms=percentile(latencies, 95),
            max_ms=max(latencies) if latencies else math.nan, drain_s=drain, calls=dict(calls))
        if self.ceiling and self.ceiling.tx_per_s > 0 and not math.isnan(per_s):
            result.ratio = per_s / self.ceiling.tx_per_s
            result.node_tx_per_s = self.ceiling.tx_per_s
        self._chain_figures(result, tx_ids, {pk: rows[pk][4] for pk in pks})
        return result

    def _chain_figures(self, result: StepResult, tx_ids: set[int], tx_of: dict[int, int | None]) -> None:
        """The step's blocks (how full), the submitter's passes, and its calls counted on-chain."""
        if not tx_ids:
            return
        txs = list(ChainTransaction.objects.filter(pk__in=tx_ids).values_list("pk", "block_number", "sent_at"))
        blocks = [b for _, b, _ in txs if b is not None]
        if not blocks:
            return
        first, last = min(blocks), max(blocks)
        headers = self.client.batch([("eth_getBlockByNumber", [hex(n), False]) for n in range(first, last + 1)])
        result.blocks = len(headers)
        result.max_block_gas = max(int(h["gasUsed"], 16) / int(h["gasLimit"], 16) for h in headers)
        sent_at = {pk: s for pk, _, s in txs}
        per_pass = Counter(sent_at[t] for t in tx_of.values() if t in sent_at)
        result.passes, result.max_items_per_pass = len(per_pass), max(per_pass.values(), default=0)
        result.on_chain = self.count_on_chain(first, last, with_updates="updateReputation" in result.calls)

    def _harvest(self, function: str, units: list[tuple[OutboxItem, ...]]) -> None:
        """What a step leaves for later steps: its final autoEvals can be rated, its final ratings updated."""
        if function not in ("autoEval", "humEval", "humEval-direct"):
            return
        pks = [u[0].pk for u in units]
        confirmed = set(OutboxItem.objects.filter(pk__gte=min(pks), pk__lte=max(pks), status=ITEM.CONFIRMED,
                                                  function=units[0][0].function).values_list("pk", flat=True))
        for (row,) in units:
            if row.pk in confirmed:
                if function == "autoEval":
                    self.scored.append(Scored(row.pk, row.payload["interactionId"], row.payload["user"]))
                else:
                    self.rated.append((row.pk, row.payload["interactionId"]))

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
    def count_on_chain(self, first: int, last: int, with_updates: bool = False) -> dict[str, int]:
        """The calls the node holds in blocks first..last, from the Reputation contract's events:
        ModelAdded / AutoEvaluated / HumanEvaluated are one per call; an updateReputation emits two
        ReputationUpdated (its context's and the global REP), and so do autoEval and humEval, so
        those are counted only in transactions with no AutoEvaluated or HumanEvaluated (the
        submitter never mixes functions in one transaction). Each call the outbox confirmed must be
        there exactly once (the contract refuses repeats)."""
        abi = self.ledger.abis["reputation"]
        names = {"ModelAdded": "addModel", "AutoEvaluated": "autoEval", "HumanEvaluated": "humEval"}
        if with_updates:
            names["ReputationUpdated"] = "updateReputation"
        by_topic = {"0x" + abi.event_topic(ev).hex(): fn for ev, fn in names.items()}
        per_tx: dict[str, Counter] = defaultdict(Counter)
        step = 5 if with_updates else 20
        for start in range(first, last + 1, step):
            logs = self.client.request("eth_getLogs", [{
                "address": self.deployment.reputation, "fromBlock": hex(start),
                "toBlock": hex(min(last, start + step - 1)), "topics": [list(by_topic)]}])
            for log in logs:
                per_tx[log["transactionHash"]][by_topic[log["topics"][0]]] += 1
        counts: Counter = Counter()
        for found in per_tx.values():
            updates = found.pop("updateReputation", 0)
            counts.update(found)
            if updates and not (found["autoEval"] or found["humEval"]):
                counts["updateReputation"] += updates // 2
        return {fn: n for fn, n in counts.items() if n}

    def check_forwarder_nonces(self) -> bool:
        """Each rater's forwarder nonce equals the relayed requests of theirs the outbox confirmed."""
        confirmed = dict(OutboxItem.objects.filter(signer__in=self.users, status=ITEM.CONFIRMED)
                         .values("signer").annotate(n=Count("id")).values_list("signer", "n"))
        fn = self.ledger.abis["forwarder"].fn("nonces")
        replies = self.client.batch([("eth_call", [{"to": self.deployment.forwarder, "data": to_hex(fn.encode(u))},
                                                   "latest"]) for u in self.users])
        on_chain = {u: fn.decode_output(from_hex(r))[0] for u, r in zip(self.users, replies)}
        wrong = [u for u in self.users if on_chain[u] != confirmed.get(u, 0)]
        if wrong:
            u = wrong[0]
            self.notes.append(f"{len(wrong)} raters' forwarder nonces differ from their confirmed requests, e.g. "
                              f"{u}: {on_chain[u]} on-chain, {confirmed.get(u, 0)} confirmed")
        self.relayed_requests = sum(confirmed.values())
        return not wrong

    # -- where the time goes -------------------------------------------------------------------
    def _explain(self, r: StepResult) -> None:
        """Say what bounds a saturated step, from what was measured in it."""
        cpu = r.cpu
        parts = [f"{name} {cpu[name]}%" for name in ("submitter", "anvil", "postgres", "bench", "others")
                 if name in cpu]
        cores = os.cpu_count() or 1
        machine = f"; machine {cpu['machine']}% of {100 * cores}%" if "machine" in cpu else ""
        # A saturated step's span is the submitter's passes back to back: each pass's time over its calls.
        span = r.confirmed / r.per_s if r.per_s > 0 else math.nan
        pass_s = span / r.passes if r.passes else math.nan
        if r.max_block_gas >= 0.9:
            bound = "the node: blocks full (gas)"
        elif cpu.get("anvil", 0) >= 85:
            bound = "the node's CPU"
        elif cpu.get("submitter", 0) >= 85:
            bound = f"the submitter's CPU (one Python process; passes of ~{pass_s:.1f} s)"
        elif cpu.get("machine", 0) >= 80 * cores:
            bound = (f"the submitter's passes (~{pass_s:.1f} s each, up to {r.max_items_per_pass} calls), on a "
                     f"machine whose {cores} cores were busy (other work: {cpu.get('others', 0)}% of a core)")
        else:
            bound = f"the submitter's passes (~{pass_s:.1f} s each, up to {r.max_items_per_pass} calls), waiting"
        r.bound = bound
        self.out(f"  bounded by {bound}: CPU over the step {', '.join(parts)} (% of one core){machine}; "
                 f"fullest block {100 * r.max_block_gas:.0f}% of the gas limit; {r.passes} submitter passes, "
                 f"up to {r.max_items_per_pass} calls in one (LLMCHAIN_SUBMIT_MAX_ITEMS {settings.LLMCHAIN_SUBMIT_MAX_ITEMS})")
        files = [f for f in self.profiles.get((r.function, r.rate), []) if f.exists()]
        if files:
            shares, phases, top, total = profile_summary(files)
            self.out(f"  submitter profile ({', '.join(f.name for f in files)}, {total:.1f} s): "
                     + ", ".join(f"{k} {v:.0f}%" for k, v in shares.items() if v >= 1))
            self.out("  submitter phases (cumulative s): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])))
            for line in top:
                self.out(f"    {line}")

    # -- report --------------------------------------------------------------------------------
    def _print_header(self) -> None:
        cfg, c = self.cfg, self.ceiling
        self.out(f"node ceiling: {c.tx_per_s:.0f} tx/s mined ({c.txs} signed no-op transfers in {c.blocks} blocks; "
                 f"signed+sent at {c.send_per_s:.0f} tx/s from 4 dev keys, pipelined JSON-RPC batches of 250)")
        if not self.header:  # a later part of a run on fresh nodes: the rest was printed by the first
            return
        self.out(f"chain bench: anvil block time 1 s, free gas, finality {settings.LLMCHAIN_LOCAL_FINALITY} blocks; "
                 f"submitter batch {cfg.batch} ({self.submitter.label}, DEBUG off"
                 f"{', under cProfile' if cfg.profile_dir else ''}); {cfg.users} raters; "
                 f"{cfg.duration:g} s per step; {connection.vendor} database"
                 + (" (autovacuum off: the bench vacuums its tables before each step, not timed)"
                    if self.vacuums else ""))
        self.out("confirmed/s: sustained (offered/s over the slope of confirmation time on enqueue time, "
                 "fitted over every call); e2e/s: confirmed / (last confirmation - first enqueue); x ceil: confirmed/s / "
                 "node tx/s (one tx carries up to `batch` calls); complete: interactions with all three calls final")
        self.out(f"{'function':<16} {'offered/s':>9} {'actual/s':>8} {'items':>6} {'txs':>5} {'confirmed/s':>11} "
                 f"{'e2e/s':>6} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'drain s':>7} {'unconf':>6} {'failed':>6} "
                 f"{'x ceil':>6} {'sat':>3} {'chain':>5}")

    def _print_row(self, r: StepResult) -> None:
        self.out(f"{r.function:<16} {r.rate:>9} {r.offered_per_s:>8.0f} {r.offered:>6} {r.txs:>5} {r.per_s:>11.1f} "
                 f"{r.e2e_per_s:>6.0f} {r.p50_ms:>7.0f} {r.p95_ms:>7.0f} {r.max_ms:>7.0f} {r.drain_s:>7.1f} "
                 f"{r.unconfirmed:>6} {r.failed:>6} {r.ratio:>6.2f} {'yes' if r.saturated else 'no':>3} "
                 f"{'ok' if r.on_chain_ok else 'DIFF':>5}")

    def summary(self, elapsed: float) -> dict:
        functions: dict[str, dict] = {}
        ceilings: dict[str, float] = {}  # by function: the ceiling of the node its peak step ran on
        for fn in self.cfg.functions:
            steps = [r for r in self.results if r.function == fn and not math.isnan(r.per_s)]
            if not steps:
                continue
            best = max(steps, key=lambda r: r.per_s)
            if not math.isnan(best.node_tx_per_s):
                ceilings[fn] = best.node_tx_per_s
            first_saturated = next((r for r in steps if r.saturated), None)
            # The highest rate offered that it kept up with: a sustained confirmed/s counts a few passes
            # and can read above the rate offered; this one cannot.
            kept_up = max((r for r in steps if not r.saturated), key=lambda r: r.offered_per_s, default=None)
            functions[fn] = {"peak_per_s": round(best.per_s, 1),
                             "kept_up_per_s": round(kept_up.offered_per_s, 1) if kept_up else 0.0,
                             "e2e_per_s_at_peak": round(best.e2e_per_s, 1),
                             "p50_ms_at_peak": None if math.isnan(best.p50_ms) else round(best.p50_ms),
                             "p95_ms_at_peak": None if math.isnan(best.p95_ms) else round(best.p95_ms),
                             "rate_at_peak": best.rate, "saturated": first_saturated is not None,
                             "bounded_by": first_saturated.bound if first_saturated else "the offered rate",
                             "offered": sum(r.offered for r in steps),
                             "confirmed": sum(r.confirmed for r in steps)}
        # The node ceiling: the one node's, or the lowest of the fresh nodes' (each function's ratio is
        # to its own node's).
        ceiling = min(ceilings.values(), default=self.ceiling.tx_per_s if self.ceiling else math.nan)
        return {
            "functions": functions,
            "complete_per_s": functions["complete"]["peak_per_s"] if "complete" in functions else None,
            "node_ceiling_tx_per_s": round(ceiling, 1),
            "node_ceiling_by_function": {fn: round(c, 1) for fn, c in ceilings.items()},
            "one_node": self.cfg.one_node,
            "nodes": self.cfg.nodes,
            "ratio": {fn: round(v["peak_per_s"] / ceilings.get(fn, ceiling), 3) for fn, v in functions.items()},
            "batch": self.cfg.batch,
            "duration_s": self.cfg.duration,
            "rates": list(self.cfg.rates),
            "users": self.cfg.users,
            "skipped": self.skipped,
            "submitter": self.cfg.submitter,
            "unconfirmed": sum(r.unconfirmed for r in self.results),
            "failed": sum(r.failed for r in self.results),
            "duplicates": sum(r.duplicates for r in self.results),
            "on_chain_ok": bool(self.results) and all(r.on_chain_ok for r in self.results),
            "forwarder_nonces_ok": self.forwarder_nonces_ok,
            "elapsed_s": round(elapsed, 1),
            "steps": [{**asdict(r), "saturated": r.saturated} for r in self.results],
        }

    def _print_footer(self, summary: dict) -> None:
        for fn, v in summary["functions"].items():
            bound = (f"saturated, bounded by {v['bounded_by']}" if v["saturated"] else
                     "not saturated: bounded by the offered rate, try higher --rates")
            self.out(f"peak {fn}: {v['peak_per_s']:.0f}/s at offered {v['rate_at_peak']}/s; kept up with "
                     f"{v['kept_up_per_s']:.0f}/s offered "
                     f"(e2e {v['e2e_per_s_at_peak']:.0f}/s, p50 {v['p50_ms_at_peak']} ms, p95 {v['p95_ms_at_peak']} ms)"
                     f" = {summary['ratio'][fn]:.2f} x the node ceiling"
                     f" ({summary['node_ceiling_by_function'].get(fn, summary['node_ceiling_tx_per_s']):.0f} tx/s); {bound}; "
                     f"paper: ~{PAPER_PEAK_PER_S}/s on 16 Besu validators")
        on_chain: Counter = Counter()
        for r in self.results:
            on_chain.update(r.on_chain)
        self.out("on-chain calls of the steps: " + ", ".join(f"{fn} {n}" for fn, n in sorted(on_chain.items()))
                 + (" = the confirmed calls, each once, at every rate" if summary["on_chain_ok"]
                    else " != the confirmed calls: MISMATCH"))
        if self.forwarder_nonces_ok is not None:
            self.out(f"forwarder nonces: {'each rater' if self.forwarder_nonces_ok else 'NOT every rater'}'s = "
                     f"their confirmed relayed requests ({getattr(self, 'relayed_requests', 0)} in all)")
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
        self._vacuum()


def run_chain_bench(config: ChainBenchConfig, out: Out = print) -> dict:
    return ChainBench(config, out).run()


HEADLINE = ("functions", "complete_per_s", "node_ceiling_tx_per_s", "node_ceiling_by_function", "one_node", "nodes",
            "ratio",
            "batch", "duration_s", "rates", "users",
            "skipped", "submitter", "unconfirmed", "failed", "duplicates", "on_chain_ok", "forwarder_nonces_ok",
            "elapsed_s")


def headline(summary: dict) -> dict:
    """The figures `bench chain` prints as its last line (the per-step rows are in the table above it)."""
    return {k: summary[k] for k in HEADLINE}
