"""Start and stop a local anvil node: the embedded chain of `make run` and of the tests.

Production talks to a Hyperledger Besu network over JSON-RPC; nothing here is used then.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANVIL_BIN = REPO / "node_modules" / ".bin" / "anvil"
# anvil's deterministic development accounts (mnemonic "test test ... junk"): local only.
DEV_KEYS = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
]


class NodeError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def anvil_available() -> bool:
    return ANVIL_BIN.exists() or shutil.which("anvil") is not None


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

    `state_file` keeps the chain on disk across restarts: anvil writes its current state (accounts,
    storage, blocks and transactions) there on exit and every `state_interval` seconds, without the
    historical state of every block (`--preserve-historical-states` made the file and the process
    grow with every block: 234 MB and 847 MB resident after ~900 interactions). A node killed
    without warning loses the blocks mined since its last write; the submitter sends their
    transactions again and the indexer rolls back what it folded of them (README, "The ledger").
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

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        binary = str(ANVIL_BIN) if ANVIL_BIN.exists() else (shutil.which("anvil") or "anvil")
        cmd = [binary, "--host", self.host, "--port", str(self.port), "--chain-id", str(self.chain_id),
               "--gas-limit", str(self.gas_limit), "--accounts", "4", "--balance", "1000000"]
        if self.block_time:
            cmd += ["--block-time", str(self.block_time)]
        if self.base_fee is not None:
            cmd += ["--base-fee", str(self.base_fee)]
            if self.base_fee == 0:
                cmd += ["--gas-price", "0", "--disable-min-priority-fee"]
        if self.state_file:
            Path(self.state_file).parent.mkdir(parents=True, exist_ok=True)
            cmd += ["--state", str(self.state_file), "--state-interval", str(self.state_interval)]
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
                return self
            time.sleep(0.1)
        self.stop()
        raise NodeError(f"anvil did not answer on {self.url} within {timeout} s")

    def is_up(self) -> bool:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}).encode()
        req = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self, timeout: float = 20) -> None:
        """Stop gracefully (SIGTERM: anvil writes its state file), then kill if needed."""
        self._terminate(timeout)

    def kill(self) -> None:
        """Die at once, as a crashed node would (no state dump on the way out)."""
        self._kill()
