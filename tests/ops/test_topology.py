"""The production topology, run on this machine.

The processes are the ones `deploy/systemd/` starts, each from its unit's own `ExecStart` line (the
venv's python swapped for this one, `%i` for the instance): two web processes (daphne), two chain
workers, two oracle workers and two debate workers, all on one PostgreSQL database and one Redis
(channel layer and cache), with `DEBUG=0` and the production profile behind a TLS-terminating proxy
(the requests carry the proxy's `X-Forwarded-Proto: https`), on an anvil chain declared as a
throwaway development chain. 100 chats run at once through the API of both web processes, each
with a rating; when a third of the answers are in, one worker of each kind is killed with SIGKILL
and stays dead: the others take over its leased work. At the end `chain audit` and `leaderboard
verify` pass, every answered interaction is on-chain exactly once and so is every accepted rating.

Run with -s to see its summary line (`TOPOLOGY {...}`).
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import httpx
import pytest

from apps.chain.audit import all_events
from apps.chain.node import DEV_KEYS, AnvilNode, free_port
from tests.chain.stack import REPO, Service
from tests.chain.test_faults import MODELS, QUESTIONS, mtbench, wait_until
from tests.ops.topology_world import REPLY
from tests.personas import PASSWORD
from tests.support import deploy_on_interval_node

pytestmark = [pytest.mark.slow, pytest.mark.chain]

UNITS = REPO / "deploy" / "systemd"
VENV_PYTHON = "/opt/llmchain/.venv/bin/python"
CHATS = 100
USERS = 20
KILL_AFTER = CHATS // 3  # answers in before one worker of each kind is killed
DRAIN_TIMEOUT_S = 240
WORKERS = {"chain": "llmchain-chain@.service", "oracle": "llmchain-oracle@.service",
           "debate": "llmchain-debate@.service"}
PROXY = {"X-Forwarded-Proto": "https"}  # what deploy/nginx/llmchain.conf sets


def exec_start(unit: str, instance: str) -> list[str]:
    """The command systemd runs for `unit@instance`, with this interpreter in place of the venv's."""
    lines = [line for line in (UNITS / unit).read_text().splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, f"{unit}: one ExecStart expected, found {len(lines)}"
    argv = shlex.split(lines[0].removeprefix("ExecStart=").replace("%i", instance))
    assert argv[0] == VENV_PYTHON, f"{unit} runs {argv[0]}, not the venv's python"
    return [sys.executable, *argv[1:]]


def server_url(env_name: str, default: str) -> str:
    return os.environ.get(env_name) or default


def reachable_or_skip(what: str, check) -> None:
    """PostgreSQL and Redis are part of this machine and of CI (.ci/run sets DATABASE_URL and
    REDIS_URL): there a missing one fails the test; on a laptop without them it is skipped."""
    try:
        check()
    except Exception as exc:  # noqa: BLE001 - any failure to connect
        if os.environ.get("DATABASE_URL") or os.environ.get("REDIS_URL") or os.environ.get("CI"):
            pytest.fail(f"{what} is not reachable: {exc!r}")
        pytest.skip(f"{what} is not reachable here ({exc!r}); CI runs this test against its own")


class Postgres:
    """A database of the stack's own on the PostgreSQL server of DATABASE_URL (or the local one)."""

    def __init__(self):
        url = server_url("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
        if not url.startswith(("postgres://", "postgresql://")):
            url = "postgres://postgres@127.0.0.1:5432/postgres"
        self.server = url
        self.name = f"llmchain_topology_{secrets.token_hex(4)}"
        self.url = urlunparse(urlparse(url)._replace(path="/" + self.name))

    def _admin(self):
        import psycopg

        return psycopg.connect(urlunparse(urlparse(self.server)._replace(path="/postgres")), autocommit=True,
                               connect_timeout=5)

    def create(self) -> None:
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class World:
    """`python -m tests.ops.topology_world serve` on pipes: one process, one Django start-up, answers the
    setup and every report of the drain (a process each cost about 1.3 CPU-s, 15 to 40 times a run)."""

    def __init__(self, env: dict, log: Path):
        self.log = log
        with log.open("ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.ops.topology_world", "serve"], cwd=REPO,
                                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, bufsize=1)
        self.replies: queue.Queue = queue.Queue()
        self.other = deque(maxlen=20)  # anything else it printed, for the failure's message
        threading.Thread(target=self._read, daemon=True, name="topology-world").start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                self.replies.put(json.loads(line.removeprefix(REPLY)))
            else:
                self.other.append(line)
        self.replies.put(None)  # its stdout closed: it exited

    def ask(self, *args: str, timeout: float = 180) -> dict:
        try:
            self.proc.stdin.write(json.dumps(args) + "\n")
            self.proc.stdin.flush()
            out = self.replies.get(timeout=timeout)
        except (OSError, queue.Empty) as exc:
            out = {"error": f"no answer: {exc!r}"}
        if out is None:
            out = {"error": f"it exited with {self.proc.wait()}"}
        log = self.log.read_text(errors="replace")[-3000:]
        assert "error" not in out, f"topology_world {args}: {out['error'][-3000:]}{''.join(self.other)}{log}"
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # its loop ends
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Topology:
    """The node, then migrations, then every unit's processes, all pointed at one database and Redis."""

    def __init__(self, tmp: Path, database: str, redis_url: str):
        self.tmp = tmp
        # Its port now: the stack's environment names it before the node is started.
        self.node = AnvilNode(port=free_port(), block_time=1, base_fee=0, state_file=tmp / "chain" / "state.json",
                              log_file=tmp / "anvil.log")
        self.database, self.redis_url = database, redis_url
        self.services: dict[str, Service] = {}
        self.sites: list[str] = []
        self.world: World | None = None

    def start(self) -> None:
        (self.tmp / "ipfs").mkdir()
        deployment_file = self.tmp / "deployment.json"
        self.env = {
            **os.environ,
            # The production profile (deploy/llmchain.env.example), on a chain declared throwaway.
            "DEBUG": "0", "LLMCHAIN_PROFILE": "production", "SECRET_KEY": secrets.token_urlsafe(64),
            "LLMCHAIN_KEY_SECRETS": secrets.token_urlsafe(48), "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LLMCHAIN_BEHIND_PROXY": "1", "LLMCHAIN_DEV_CHAIN": "1",
            "DATABASE_URL": self.database, "LLMCHAIN_DB_POOL_SIZE": "20", "REDIS_URL": self.redis_url,
            "LLMCHAIN_RPC_URL": self.node.url, "LLMCHAIN_DEPLOYMENT": str(deployment_file),
            "LLMCHAIN_ADMIN_KEY": DEV_KEYS[0], "LLMCHAIN_ORACLE_KEY": DEV_KEYS[1],
            "LLMCHAIN_IPFS_BACKEND": "local", "LLMCHAIN_IPFS_DIR": str(self.tmp / "ipfs"),
            "LLMCHAIN_VAR_DIR": str(self.tmp / "var"),
            # A killed worker's leases pass to the other within seconds (defaults: 120 s and 30 s).
            "LLMCHAIN_ORACLE_LEASE_S": "5", "LLMCHAIN_LEASE_S": "5", "LLMCHAIN_DEBATE_LEASE_S": "5",
            "LLMCHAIN_RESEND_AFTER_S": "5", "LLMCHAIN_FINALITY": "auto",
            "PYTHONUNBUFFERED": "1",
        }
        # The migrations (llmchain-migrate.service) while the node starts and the contracts are deployed:
        # neither needs the other.
        migrate = subprocess.Popen([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO, env=self.env,
                                   text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            self.node.start()
            self.ledger = deploy_on_interval_node(self.node, deployment_file)
            out, _ = migrate.communicate(timeout=300)
        finally:
            if migrate.poll() is None:
                migrate.kill()
                migrate.wait()
        assert migrate.returncode == 0, f"migrate: {out[-3000:]}"
        self.world = World(self.env, self.tmp / "world.log")
        ports = [free_port(), free_port()]
        self.sites = [f"http://127.0.0.1:{p}" for p in ports]
        for i, port in enumerate(ports, start=1):
            self._start(f"web{i}", exec_start("llmchain-web@.service", str(port)))
        for kind, unit in WORKERS.items():
            for i in (1, 2):
                self._start(f"{kind}{i}", exec_start(unit, str(i)))

    def _start(self, name: str, argv: list[str]) -> None:
        self.services[name] = Service(name, argv, self.env, self.tmp / f"{name}.log").start()

    def run(self, argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=REPO, env=self.env, text=True, capture_output=True, timeout=timeout)

    def wait_for_sites(self) -> None:
        def up(url: str) -> bool:
            try:
                return httpx.get(url + "/api/contexts", headers=PROXY, timeout=2, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False

        for url in self.sites:
            wait_until(lambda: up(url), 90, f"the web process at {url} answered", list(self.services.values()))

    def logs(self) -> str:
        return "\n".join(f"--- {s.name}\n{s.tail(1500)}" for s in self.services.values())

    def shutdown(self) -> None:
        """SIGTERM to every process at once, then wait for them (killed if still there after 20 s): one
        after the other, each waited for before the next was told, the stops took about 10 s."""
        if self.world is not None:
            self.world.stop()
        running = [s for s in self.services.values() if s.running]
        for service in running:
            os.killpg(service.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for service in running:
            try:
                service.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                service.kill()
        self.node.stop()


class Chats:
    """CHATS conversations at once through the API, spread over both web processes: each creates a
    conversation with a replay model, asks one MT-Bench question and rates the answer."""

    def __init__(self, sites: list[str], tokens: dict[str, str], models: dict[str, int], context: str):
        self.sites, self.tokens, self.models, self.context = sites, tokens, models, context
        self.lock = threading.Lock()
        self.answered: list[dict] = []
        self.ratings: list[str] = []  # interaction ids whose rating the API accepted
        self.errors: list[str] = []
        self.first_third = threading.Event()
        self.clients: list[httpx.Client] = []

    def chat(self, n: int) -> None:
        person = list(self.tokens)[n % len(self.tokens)]
        headers = {**PROXY, "Authorization": f"Token {self.tokens[person]}"}
        model = MODELS[n % len(MODELS)]
        prompt = QUESTIONS[1 + n % len(QUESTIONS)]
        client = self.clients[n % len(self.sites)]
        conv = client.post("/api/conversations", headers=headers,
                           json={"model": self.models[model], "context": self.context})
        if conv.status_code != 201:
            return self._error(f"conversation {n}: {conv.status_code} {conv.text[:200]}")
        answer = client.post(f"/api/conversations/{conv.json()['id']}/messages", headers=headers,
                             json={"prompt": prompt})
        if answer.status_code != 201:
            return self._error(f"message {n}: {answer.status_code} {answer.text[:200]}")
        body = answer.json()
        with self.lock:
            self.answered.append(body)
            if len(self.answered) >= KILL_AFTER:
                self.first_third.set()
        rating = client.post(f"/api/interactions/{body['id']}/rating", headers=headers,
                             json={f: 1 + (n + i) % 5 for i, f in enumerate(
                                 ("reliability", "completeness", "utility", "familiarity", "trust",
                                  "uncertainty"))})
        if rating.status_code != 201:
            return self._error(f"rating {n}: {rating.status_code} {rating.text[:200]}")
        with self.lock:
            self.ratings.append(body["interaction_id"])

    def _error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)

    def run(self) -> None:
        # One client per web process, with a connection for each chat at once: a client of each chat's
        # own cost 15 ms of CPU apiece (httpx loads the CA bundle for every client), for plain http.
        limits = httpx.Limits(max_connections=CHATS, max_keepalive_connections=CHATS)
        self.clients = [httpx.Client(base_url=site, timeout=120, trust_env=False, limits=limits) for site in self.sites]
        try:
            with ThreadPoolExecutor(max_workers=CHATS) as pool:
                for future in [pool.submit(self.chat, n) for n in range(CHATS)]:
                    try:
                        future.result()
                    except httpx.HTTPError as exc:
                        self._error(repr(exc))
        finally:
            for client in self.clients:
                client.close()


def test_two_of_everything_lose_nothing_when_one_of_each_worker_dies(tmp_path):
    import redis

    database = Postgres()
    reachable_or_skip("PostgreSQL", lambda: database._admin().close())
    redis_server = server_url("REDIS_URL", "redis://127.0.0.1:6379/0")
    # Databases of the test's own: 13 for the channel layer, 14 for the cache (the settings' default:
    # the next one after REDIS_URL's).
    redis_url = urlunparse(urlparse(redis_server)._replace(path="/13"))
    reachable_or_skip("Redis", lambda: redis.Redis.from_url(redis_url, socket_timeout=5).flushdb())

    database.create()
    topology = Topology(tmp_path, database.url, redis_url)
    started = time.monotonic()
    try:
        topology.start()
        world = topology.world.ask("setup", str(mtbench(tmp_path / "mt_bench")), str(USERS))
        topology.wait_for_sites()

        def token(n: int, name: str) -> httpx.Response:
            return httpx.post(topology.sites[n % 2] + "/api/token", json={"username": name, "password": PASSWORD},
                              headers=PROXY, timeout=30, trust_env=False)

        # Side by side, both web processes at once: each sign-in checks a password hash (about 0.3 s of CPU).
        with ThreadPoolExecutor(max_workers=4) as pool:
            replies = list(pool.map(token, range(len(world["users"])), world["users"]))
        tokens = {}
        for name, r in zip(world["users"], replies):
            assert r.status_code == 200, f"token for {name}: {r.status_code} {r.text[:200]}"
            tokens[name] = r.json()["token"]
        chats = Chats(topology.sites, tokens, world["models"], world["context"])
        load = threading.Thread(target=chats.run, daemon=True)
        t0 = time.monotonic()
        load.start()
        assert chats.first_third.wait(180), f"{KILL_AFTER} answers not in within 180 s: {chats.errors[:5]}" \
                                            f"\n{topology.logs()}"
        killed_at = round(time.monotonic() - t0, 1)
        for kind in WORKERS:
            topology.services[f"{kind}1"].kill()
        load.join(300)
        assert not load.is_alive(), "the chats did not finish within 300 s"
        load_s = round(time.monotonic() - t0, 1)

        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while (state := topology.world.ask("report"))["left"] and time.monotonic() < deadline:
            time.sleep(0.5)
        drain_s = round(time.monotonic() - t0 - load_s, 1)
        assert not state["left"], f"not drained {DRAIN_TIMEOUT_S} s after the load: {state['left']} " \
                                  f"{state['unconfirmed']}\n{topology.logs()}"

        audit = topology.run([sys.executable, "manage.py", "chain", "audit"])
        verify = topology.run([sys.executable, "manage.py", "leaderboard", "verify"])
        events = all_events(topology.ledger)
        auto = Counter("0x" + bytes(e["args"]["interactionId"]).hex() for e in events if e["event"] == "AutoEvaluated")
        human = Counter("0x" + bytes(e["args"]["interactionId"]).hex() for e in events if e["event"] == "HumanEvaluated")
        interactions, rated = set(state["interactions"]), set(state["rated"])
        summary = {
            "chats": CHATS, "answered": len(chats.answered), "ratings_accepted": len(chats.ratings),
            "api_errors": len(chats.errors), "killed": [f"{kind}1" for kind in WORKERS], "killed_at_s": killed_at,
            "load_s": load_s, "drain_s": drain_s, "total_s": round(time.monotonic() - started, 1),
            "onchain": {"AutoEvaluated": sum(auto.values()), "HumanEvaluated": sum(human.values())},
            "audit_exit": audit.returncode, "verify_exit": verify.returncode,
        }
        print("TOPOLOGY " + json.dumps(summary), flush=True)

        assert not chats.errors, f"{len(chats.errors)} API calls failed: {chats.errors[:5]}"
        assert len(chats.answered) == CHATS and len(chats.ratings) == CHATS
        assert {a["interaction_id"] for a in chats.answered} <= interactions
        assert audit.returncode == 0, f"chain audit: {audit.stdout[-3000:]}{audit.stderr[-2000:]}"
        assert verify.returncode == 0, f"leaderboard verify: {verify.stdout[-3000:]}{verify.stderr[-2000:]}"
        assert sorted(i for i in interactions if auto[i] != 1) == [], "interactions not on-chain exactly once"
        assert set(auto) == interactions, "on-chain interactions the site never had"
        assert sorted(i for i in set(chats.ratings) | rated if human[i] != 1) == [], \
            "accepted ratings not on-chain exactly once"
        # Every process but the killed ones still runs: nothing crashed under the load.
        for name, service in topology.services.items():
            assert service.running == (name not in summary["killed"]), f"{name}:\n{service.tail()}"
    finally:
        topology.shutdown()
        database.drop()
        for db in (13, 14):
            redis.Redis.from_url(urlunparse(urlparse(redis_url)._replace(path=f"/{db}")), socket_timeout=5).flushdb()
