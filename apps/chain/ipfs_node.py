"""Start and stop a local, offline IPFS node: the evidence store of `make run` and of the tests.

The node is js-ipfs (npm `ipfs@0.66.1`, core 0.18.1) run by apps/chain/ipfs_daemon.mjs; it speaks
the Kubo RPC API (`POST /api/v0/add`, `cat`, `pin/add`, `id`, `version`) on 127.0.0.1. It never
dials out: no bootstrap peers, no MDNS, no webRTC-star, no delegates, no preload, no DHT, no pubsub,
no NAT port mapping, no swarm listener unless `swarm_port` is set (then on 127.0.0.1 only).

Facts the RPC client must know (measured on js-ipfs 0.66.1 under Node 20):
- every API call is POST (GET answers 405);
- `add` answers one JSON line `{"Name", "Hash", "Size"}` with Size a number (Kubo: a string), and
  gives CIDv1 in base58btc (`zb2...`) unless `cid-base=base32` is passed (pin/add, pin/ls,
  block/stat too); `Name` is the multipart filename, or the CID when that is shorter than 2
  characters (a parser quirk); a dag-pb root (data over 262144 bytes) also carries `"Mode": "0644"`;
- errors are `{"Message", "Code", "Type": "error"}`: 400 for a bad or missing CID, 404 for an unknown
  command, 500 for a failure or a timeout; a bare `timeout=1` means 1 ms (send a unit: `5s`);
- `cat` of a CID the node lacks waits for ever: always pass `timeout=` (it then answers 500
  `{"Message": "Failed to cat file: request timed out", "Code": 0, "Type": "error"}`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .node import REPO, LocalProcess, NodeError, free_port

DAEMON_JS = Path(__file__).with_name("ipfs_daemon.mjs")
IPFS_DAEMON_PKG = REPO / "node_modules" / "ipfs-daemon"
PID_FILE = "daemon.pid"  # written in the repo: tells a later start whether repo.lock is stale
LOCK_DIR = "repo.lock"  # proper-lockfile's lock (a directory), held while a node has the repo open


def ipfs_available() -> bool:
    return DAEMON_JS.exists() and (IPFS_DAEMON_PKG / "package.json").exists() and shutil.which("node") is not None


def _is_our_daemon(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True  # alive, and no /proc to tell what it is: assume it is the daemon
    return DAEMON_JS.name.encode() in cmdline


@dataclass
class IpfsNode(LocalProcess):
    """A js-ipfs process on `repo`. `api_port=0` picks a free port; `gateway_port=None` runs no
    gateway (0: a free port); `swarm_port=None` opens no libp2p listener (0: any port, 127.0.0.1).
    """

    repo: Path
    api_port: int = 0
    gateway_port: int | None = None
    swarm_port: int | None = None
    host: str = "127.0.0.1"
    log_file: Path | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    start_seconds: float | None = field(default=None, repr=False)
    _out: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.api_port}"

    @property
    def gateway_url(self) -> str | None:
        return f"http://{self.host}:{self.gateway_port}" if self.gateway_port else None

    def config(self) -> dict:
        """Merged into the repo's config at every start (js-ipfs keeps the rest: identity, keychain)."""
        return {
            "Addresses": {
                "API": f"/ip4/{self.host}/tcp/{self.api_port}",
                "Gateway": [f"/ip4/{self.host}/tcp/{self.gateway_port}"] if self.gateway_port else [],
                "RPC": "",  # no gRPC server
                "Swarm": [f"/ip4/127.0.0.1/tcp/{self.swarm_port}"] if self.swarm_port is not None else [],
                "Announce": [],
                "NoAnnounce": [],
                "Delegates": [],
            },
            "Bootstrap": [],
            "Discovery": {"MDNS": {"Enabled": False}, "webRTCStar": {"Enabled": False}},
            "Pubsub": {"Enabled": False},
            "Routing": {"Type": "none"},
            "Swarm": {"DisableNatPortMap": True},
            "relay": {"enabled": False},
        }

    def command(self) -> list[str]:
        node = shutil.which("node") or "node"
        return [node, str(DAEMON_JS), str(self.repo), json.dumps(self.config())]

    def start(self, timeout: float = 60) -> "IpfsNode":
        if not ipfs_available():
            raise NodeError("js-ipfs is not installed: run `npm ci` in the repository root")
        if self.proc and self.proc.poll() is None:
            return self
        t0 = time.monotonic()
        self.repo = Path(self.repo)
        self.repo.mkdir(parents=True, exist_ok=True)
        self._clear_stale_lock()
        if not self.api_port:
            self.api_port = free_port()
        if self.gateway_port == 0:
            self.gateway_port = free_port()
        if self.log_file:
            Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
            self._out = open(self.log_file, "ab")
        else:
            self._out = tempfile.TemporaryFile()  # read back if the node fails to start
        env = {**os.environ, "NO_UPDATE_NOTIFIER": "1"}
        self.proc = subprocess.Popen(self.command(), stdout=self._out, stderr=subprocess.STDOUT, env=env,
                                     cwd=REPO, start_new_session=True)
        (self.repo / PID_FILE).write_text(str(self.proc.pid))
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self._log_tail()  # the lock stays: it may be another process's (a repo in use)
                (self.repo / PID_FILE).unlink(missing_ok=True)
                self._close_out()
                raise NodeError(f"js-ipfs exited with code {self.proc.returncode} on {self.repo}: {tail}")
            if self.is_up():
                self.start_seconds = time.monotonic() - t0
                return self
            time.sleep(0.05)
        tail = self._log_tail()
        self.stop()
        raise NodeError(f"js-ipfs did not answer on {self.url} within {timeout} s: {tail}")

    def is_up(self) -> bool:
        req = urllib.request.Request(f"{self.url}/api/v0/id", b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM (js-ipfs closes the repo and removes repo.lock), then SIGKILL if needed."""
        if not self.proc:
            return
        self._terminate(timeout)
        self._release()

    def kill(self) -> None:
        """Die at once, as a crashed node would; the next start() clears the stale repo lock."""
        self._kill()
        self._close_out()

    def _release(self) -> None:
        """After our process is gone: drop what a killed node leaves behind in the repo."""
        self._remove_lock()
        (self.repo / PID_FILE).unlink(missing_ok=True)
        self._close_out()

    def _remove_lock(self) -> None:
        lock = self.repo / LOCK_DIR
        if lock.is_dir():
            shutil.rmtree(lock, ignore_errors=True)
        else:
            lock.unlink(missing_ok=True)
        (self.repo / "api").unlink(missing_ok=True)

    def _clear_stale_lock(self) -> None:
        """A node killed without SIGTERM leaves repo.lock, which js-ipfs honours for 20 s."""
        if not (self.repo / LOCK_DIR).exists():
            return
        pid_file = self.repo / PID_FILE
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            return  # not ours to judge: js-ipfs treats the lock as stale after 20 s
        if _is_our_daemon(pid):
            raise NodeError(f"the IPFS repo {self.repo} is in use by process {pid}")
        self._remove_lock()

    def _close_out(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def _log_tail(self, size: int = 2000) -> str:
        try:
            if self.log_file:
                data = Path(self.log_file).read_bytes()
            elif self._out is not None:
                self._out.seek(0)
                data = self._out.read()
            else:
                return ""
        except (OSError, ValueError):
            return ""
        return data[-size:].decode(errors="replace").strip()
