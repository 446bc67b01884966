"""A real stack in subprocesses for fault tests: each part killable with SIGKILL and restartable,
an evidence directory that can be made unwritable (even for root), and a watch over the logs that
counts how often each line repeats per second (the symptom of a hot loop)."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Service:
    """One subprocess in its own process group, its output appended to `log`."""

    def __init__(self, name: str, argv: list[str], env: dict, log: Path):
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Service":
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9 of the whole group, as a crash would."""
        if self.running:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20) -> None:
        if not self.running:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


# --- the log watch -------------------------------------------------------------------------------

# What varies between two lines of the same kind: hex (hashes, addresses), CIDs, numbers (nonces,
# block numbers, counts, ports, timestamps).
NOISE = re.compile(r"0x[0-9a-fA-F]+|\bbaf[a-z2-7]{20,}\b|\b[0-9a-fA-F]{16,}\b|\d+(?:\.\d+)?")


def normalize(line: str) -> str:
    return " ".join(NOISE.sub("#", line).split())


class LogWatch(threading.Thread):
    """Tails log files every 0.1 s and counts each normalized line per file and per second of
    reading. Lines carry no usable timestamps (anvil's and the workers' have none), so the second is
    the one the line was read in: at 0.1 s polling, a count is off by a tenth of a second at most."""

    POLL_S = 0.1

    def __init__(self, files: dict[str, Path]):
        super().__init__(daemon=True, name="log-watch")
        self.files = files
        self.offsets = {name: 0 for name in files}
        self.partial = {name: b"" for name in files}
        self.counts: dict[str, Counter] = {name: Counter() for name in files}
        self.lines = Counter()
        self.t0 = time.monotonic()
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.read()
            self._halt.wait(self.POLL_S)

    def read(self) -> None:
        second = int(time.monotonic() - self.t0)
        for name, path in self.files.items():
            try:
                with path.open("rb") as f:
                    f.seek(self.offsets[name])
                    data = f.read()
            except FileNotFoundError:
                continue
            self.offsets[name] += len(data)
            *complete, self.partial[name] = re.split(rb"[\r\n]", self.partial[name] + data)
            for raw in complete:
                line = normalize(raw.decode("utf-8", "replace"))
                if line:
                    self.counts[name][(second, line)] += 1
                    self.lines[name] += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        self.read()

    def peak(self, name: str) -> tuple[int, str, int]:
        """(count, line, second) of the line that repeated most within one second in `name`."""
        if not self.counts[name]:
            return 0, "", 0
        (second, line), n = self.counts[name].most_common(1)[0]
        return n, line, second


# --- an evidence store that cannot be written -------------------------------------------------

class Unwritable:
    """Makes a directory tree refuse new files for a while, and gives it back.

    `chmod a-w` is what an operator would do, but root ignores it (CAP_DAC_OVERRIDE), and these
    tests run as root. So each way is tried in turn and kept only if a write really fails:
    `chmod` (a non-root user), `chattr +i` on every directory (root on ext4 and most local file
    systems: reads still work, like a read-only mount), and last, the directory swapped for a
    plain file of the same name (reads fail too, so it is a harsher fault)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.method: str | None = None
        self._modes: dict[Path, int] = {}
        self._dirs: list[Path] = []

    def _writable(self) -> bool:
        try:
            fd, probe = tempfile.mkstemp(dir=self.root, prefix=".probe-")
        except OSError:
            return False
        os.close(fd)
        os.unlink(probe)
        return True

    def on(self) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        for method in ("chmod", "chattr", "swap"):
            if getattr(self, f"_{method}_on")() and not self._writable():
                self.method = method
                return method
            getattr(self, f"_{method}_off")()
        raise RuntimeError(f"cannot make {self.root} unwritable")

    def off(self) -> None:
        if self.method:
            getattr(self, f"_{self.method}_off")()
            self.method = None

    def _all_dirs(self) -> list[Path]:
        return [self.root] + [Path(d) / sub for d, subs, _ in os.walk(self.root) for sub in subs]

    def _chmod_on(self) -> bool:
        self._modes = {d: d.stat().st_mode for d in self._all_dirs()}
        for d in self._modes:
            d.chmod(stat.S_IMODE(self._modes[d]) & ~0o222)
        return True

    def _chmod_off(self) -> None:
        for d, mode in self._modes.items():
            d.chmod(stat.S_IMODE(mode))
        self._modes = {}

    def _chattr_on(self) -> bool:
        self._dirs = self._all_dirs()
        try:
            return subprocess.run(["chattr", "+i", *map(str, self._dirs)], capture_output=True).returncode == 0
        except FileNotFoundError:
            return False

    def _chattr_off(self) -> None:
        if self._dirs:
            try:
                subprocess.run(["chattr", "-i", *map(str, self._dirs)], capture_output=True)
            except FileNotFoundError:
                pass
        self._dirs = []

    def _swap_on(self) -> bool:
        self.root.rename(self.root.with_name(self.root.name + ".away"))
        self.root.write_text("the evidence store is away (fault test)\n")
        return True

    def _swap_off(self) -> None:
        away = self.root.with_name(self.root.name + ".away")
        if away.is_dir():
            if self.root.is_file():
                self.root.unlink()
            away.rename(self.root)
