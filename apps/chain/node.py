"""Start and stop a local anvil node: the embedded chain of `make run` and of the tests.

Production talks to a Hyperledger Besu network over JSON-RPC; nothing here is used then.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .client import ChainClient, ChainError

REPO = Path(__file__).resolve().parents[2]
ANVIL_BIN = REPO / "node_modules" / ".bin" / "anvil"
# npm's `anvil` is a Node.js launcher that spawns the platform package's binary: sent SIGTERM, the
# launcher exits at once while anvil still writes its state file, so the next start read half a
# file (a fresh chain). The binary itself is started when the platform package is there.
ANVIL_BINARIES = REPO / "node_modules" / "@foundry-rs"
# anvil's deterministic development accounts (mnemonic "test test ... junk"): local only.
DEV_KEYS = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
]


log = logging.getLogger(__name__)


class NodeError(RuntimeError):
    pass


def local_client(url: str, timeout: float = 5) -> ChainClient:
    """The project's JSON-RPC client for a local node, without retries: a node that does not answer
    is down (or being killed) and says so at once."""
    return ChainClient(url, timeout=timeout, retries=0)


BEST_BLOCK = re.compile(rb'"best_block_number"\s*:\s*"?(0x[0-9a-fA-F]+|[0-9]+)')


def dump_best_block(state: bytes) -> int | None:
    """The head block recorded in an anvil state dump (JSON), without parsing the whole of it."""
    found = BEST_BLOCK.search(state)
    return int(found.group(1), 0) if found else None


class StateKeeper(threading.Thread):
    """Writes a running anvil's state to its file every `interval` s: only a consistent state, and
    atomically (a new file renamed over the old one).

    anvil's own `--state-interval` dump is neither. It reads the list of blocks, then waits for the
    state database, which the block being mined holds: a dump taken while a block with transactions
    is mined holds that block's storage, balances and nonces but not the block, its transactions or
    their events. A node restarted from it has storage and nonces that no block of its chain
    explains (a real node, Besu or geth, commits a block and its state together): the submitter saw
    "nonce too low" with no receipt, re-signed the calls, and the contract refused them as already
    recorded, with no event for the indexer to fold (the ledger-under-faults test, seed 1603). And
    anvil writes the file in place, so a kill during the write leaves half a file.

    Here a dump is kept only if the node's head, read once the dump is in, is still the head the
    dump records: no block was added while it was taken, so its state is the state of its last
    block. Otherwise it is taken again."""

    def __init__(self, url: str, path: Path, interval: float, attempts: int = 5):
        super().__init__(daemon=True, name=f"anvil-state {path}")
        self.url, self.path, self.interval, self.attempts = url, Path(path), interval, attempts
        self.client = local_client(url, timeout=60)  # a whole chain's dump
        self.stopping = threading.Event()
        self.kept = 0
        self.discarded = 0  # dumps a block was added during: taken again

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.snapshot()
            except (OSError, ValueError, ChainError) as exc:  # the node is down or restarting: next time
                if not self.stopping.is_set():
                    log.debug("no state snapshot of %s: %s", self.url, exc)

    def snapshot(self) -> bool:
        """Take a consistent dump and write it; False if every attempt saw a block added meanwhile."""
        for _ in range(self.attempts):
            state = gzip.decompress(bytes.fromhex(self.client.request("anvil_dumpState")[2:]))
            head = int(self.client.request("eth_blockNumber"), 16)
            if dump_best_block(state) == head:
                if self.stopping.is_set():
                    return False  # the node was stopped or killed meanwhile: its file is its own now
                tmp = self.path.with_name(self.path.name + ".tmp")
                tmp.write_bytes(state)
                os.replace(tmp, self.path)
                self.kept += 1
                return True
            self.discarded += 1
        log.warning("no consistent state of %s in %d dumps (a block was added during each)", self.url, self.attempts)
        return False

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def anvil_binary() -> str | None:
    """The anvil executable: the npm platform package's binary, else npm's launcher, else PATH's."""
    for candidate in sorted(ANVIL_BINARIES.glob("anvil-*/bin/anvil")):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return str(ANVIL_BIN) if ANVIL_BIN.exists() else shutil.which("anvil")


def anvil_available() -> bool:
    return anvil_binary() is not None


class LocalProcess:
    """What the local nodes share: a child process group to stop gently or kill, and restart.
    Subclasses provide `proc`, `start()` and `stop()`."""

    proc: subprocess.Popen | None

    def _terminate(self, timeout: float) -> None:
        """SIGTERM to the whole group, then SIGKILL if it is still there after `timeout`."""
        if not self.proc or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self):
        self.stop()
        return self.start()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class AnvilNode(LocalProcess):
    """An anvil process. `block_time=None` mines each transaction at once (automine).

    `state_file` keeps the chain on disk across restarts: its current state (accounts, storage,
    blocks and transactions) is written there every `state_interval` seconds by a StateKeeper of
    this process (consistent, atomic: anvil's own periodic dump is neither), and by anvil on a
    graceful stop, mining paused first; without the historical state of every block
    (`--preserve-historical-states` made the file and the process grow with every block: 234 MB and
    847 MB resident after ~900 interactions). A node killed without warning loses the blocks mined
    since the last write, state and blocks alike, as a real node's crash would; the submitter sends
    their transactions again and the indexer rolls back what it folded of them (docs/ledger.md).
    `base_fee=0` gives a free-gas chain like a Besu network with min-gas-price 0; the default is a
    priced chain.
    """

    port: int = 0
    block_time: float | None = 1
    state_file: Path | None = None
    state_interval: int = 3
    base_fee: int | None = None
    gas_limit: int = 1_000_000_000
    chain_id: int = 31337
    host: str = "127.0.0.1"
    log_file: Path | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    keeper: StateKeeper | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        binary = anvil_binary() or "anvil"
        cmd = [binary, "--host", self.host, "--port", str(self.port), "--chain-id", str(self.chain_id),
               "--gas-limit", str(self.gas_limit), "--accounts", "4", "--balance", "1000000"]
        if self.block_time:
            cmd += ["--block-time", str(self.block_time)]
        if self.base_fee is not None:
            cmd += ["--base-fee", str(self.base_fee)]
            if self.base_fee == 0:
                cmd += ["--gas-price", "0", "--disable-min-priority-fee"]
        if self.state_file:
            state = Path(self.state_file)
            state.parent.mkdir(parents=True, exist_ok=True)
            if state.exists() and state.stat().st_size:
                cmd += ["--load-state", str(state)]
            cmd += ["--dump-state", str(state)]  # on exit; while it runs, the StateKeeper writes it
        return cmd

    def start(self, timeout: float = 30) -> "AnvilNode":
        if not anvil_available():
            raise NodeError("anvil is not installed: run `npm ci` in the repository root")
        if not self.port:
            self.port = free_port()
        if self.log_file:
            Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
        if self.log_file:
            with open(self.log_file, "ab") as out:  # the child keeps its own copy of the descriptor
                self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        else:
            self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise NodeError(f"anvil exited with code {self.proc.returncode}: {' '.join(self.command())}")
            if self.is_up():
                if self.state_file:
                    self.keeper = StateKeeper(self.url, Path(self.state_file), self.state_interval)
                    self.keeper.start()
                return self
            time.sleep(0.1)
        self.stop()
        raise NodeError(f"anvil did not answer on {self.url} within {timeout} s")

    def is_up(self) -> bool:
        try:
            local_client(self.url, timeout=1).request("eth_chainId")
            return True
        except ChainError:
            return False

    def stop(self, timeout: float = 20) -> None:
        """Stop gracefully: no more blocks (a block mined during anvil's exit dump would leave the file
        inconsistent, as StateKeeper says), then SIGTERM (anvil writes its state file); kill if needed."""
        self._stop_keeper()
        if self.state_file and self.proc and self.proc.poll() is None:
            client = local_client(self.url)
            try:
                client.request("evm_setIntervalMining", [0])
                client.request("evm_setAutomine", [False])
                time.sleep(0.2)  # a block being mined when mining stopped is done by then
            except ChainError:
                pass  # not answering: SIGTERM anyway
        self._terminate(timeout)

    def kill(self) -> None:
        """Die at once, as a crashed node would (no state written on the way out)."""
        self._kill()
        self._stop_keeper()

    def _stop_keeper(self) -> None:
        if self.keeper is not None:
            self.keeper.stop()
            self.keeper = None
