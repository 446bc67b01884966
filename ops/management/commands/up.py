"""python manage.py up: the local node, the contracts, the workers, the demo and the site."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from apps.chain import indexer
from apps.chain.client import ChainError, account_from_key
from apps.chain.demo import DEMO_CONTEXTS, seed_contexts
from apps.chain.deploy import deploy, grant_oracle_roles
from apps.chain.keys import oracle_addresses
from apps.chain.ledger import Deployment, default_client
from apps.chain.models import Reputation
from apps.chain.node import AnvilNode
from apps.chat.builtin import ensure_builtin_model
from apps.chat.health import run_checks
from apps.chat.models import RegisteredModel
from apps.leaderboard import entries
from apps.leaderboard.models import BoardEntry
from bench.common import manage_py
from modelserver.progress import StartupStatus, read_status

from ...demo import ROLE_PAGES, DemoAccount, ensure_accounts

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


class Command(BaseCommand):
    help = "Start the embedded local services and the site (what `make run` runs)."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="where the site listens")
        parser.add_argument("--no-demo", action="store_true",
                            help="no demo data: no replay, debates, meta-evaluation run nor demo accounts")
        parser.add_argument("--no-model", action="store_true", help="do not start the built-in model server")

    def handle(self, *args, addr, no_demo, no_model=False, **opts):
        def interrupt(*_):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, interrupt)  # stop the children on `kill` too, not only Ctrl-C
        children: list = []
        accounts: list[DemoAccount] = []
        announced = threading.Event()
        node = self._ensure_node()
        try:
            self._ensure_deployment()
            self.stdout.write(f"contexts: {', '.join(DEMO_CONTEXTS)} ({seed_contexts()} calls queued)")
            accounts = [] if no_demo else ensure_accounts()
            children.append(self._child("chain", "work"))
            if not no_model:
                model_url = urlparse(settings.LLMCHAIN_BUILTIN_MODEL_URL)
                builtin = ensure_builtin_model()  # with the key serve_model requires, if one is set
                # Not offered until its server answers (_offer_when_up), even if it did on the last run.
                RegisteredModel.objects.filter(pk=builtin.pk).update(healthy=False, health_error="starting")
                status = StartupStatus(Path(settings.LLMCHAIN_BUILTIN_STATUS_FILE))
                status.step("launching")  # the server takes over the file once it has imported torch
                server = self._child("serve_model", "--host", model_url.hostname or "127.0.0.1",
                                     "--port", str(model_url.port or 8100), "--status-file", str(status.path))
                children.append(server)
                threading.Thread(target=self._offer_when_up, args=(builtin.name, status.path, server),
                                 daemon=True).start()
                self.stdout.write(f"model: built-in {builtin.name} at {settings.LLMCHAIN_BUILTIN_MODEL_URL} "
                                  "(shown as starting until it answers)")
            children.append(self._child("oracle", "work"))  # scores answers; also runs the health checks
            children.append(self._child("debate", "work"))  # holds the debates asked for with `debate`
            if not no_demo:
                self.stdout.write("demo: filling in the background (debates, MT-Bench replay, meta-evaluation)")
                children.append(self._child("demo"))
            threading.Thread(target=self._announce, args=(addr, no_demo, accounts, announced), daemon=True).start()
            call_command("runserver", addr, use_reloader=False)
        finally:
            if not announced.is_set() and any(a.password for a in accounts):  # never lose them unprinted
                self.stdout.write(sign_in_text(site_url(addr), no_demo, accounts))
            for child in children:
                if child.poll() is None:
                    child.terminate()
            for child in children:
                try:
                    child.wait(15)
                except subprocess.TimeoutExpired:
                    child.kill()
            if node:
                node.stop()

    def _announce(self, addr: str, no_demo: bool, accounts: list[DemoAccount], announced: threading.Event) -> None:
        """Once the site answers (or after a minute), end the start-up output with what to open and how
        to sign in; the demo's passwords are in it only on the start that created the accounts."""
        host, _, port = addr.rpartition(":")  # runserver's addr: "host:port" or a bare port
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host or "127.0.0.1", int(port)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        self.stdout.write(sign_in_text(site_url(addr), no_demo, accounts))
        announced.set()

    @staticmethod
    def _offer_when_up(name: str, status_file: Path, server: subprocess.Popen | None = None,
                       poll_s: float = 1.0) -> None:
        """Check the built-in model as soon as its server says it serves, so that chat offers it then
        rather than at the oracle worker's next health check. A server that exits before it serves
        (killed, out of memory, a broken model file) is recorded as failed at once, so the site stops
        showing the model as starting instead of waiting for its status to go stale."""
        while True:
            status = read_status(status_file)
            if status is not None and status.get("state") == "serving":
                break
            if status is not None and status.get("state") == "failed":
                return
            code = server.poll() if server is not None else None
            if code is not None:
                error = f"its server stopped while starting (exit code {code})"
                StartupStatus(status_file).failed(error)
                RegisteredModel.objects.filter(name=name).update(healthy=False, health_error=error)
                return
            time.sleep(poll_s)
        for _ in range(10):  # it serves: a refused check is the machine's load, try again shortly
            if not run_checks(names=[name]).get(name):
                return
            time.sleep(3)

    @staticmethod
    def _child(*args: str) -> subprocess.Popen:
        return subprocess.Popen([*manage_py(), *args], cwd=settings.BASE_DIR)

    def _ensure_node(self) -> AnvilNode | None:
        client = default_client()
        try:
            client.block_number()
            self.stdout.write(f"chain: using the node at {client.url}")
            return None
        except ChainError:
            pass
        url = urlparse(settings.LLMCHAIN_RPC_URL)
        if url.hostname not in LOCAL_HOSTS:
            raise CommandError(f"the chain node at {settings.LLMCHAIN_RPC_URL} does not answer")
        chain_dir = Path(settings.LLMCHAIN_CHAIN_DIR)
        node = AnvilNode(port=url.port or 8545, block_time=1, base_fee=0, state_file=chain_dir / "state.json",
                         state_interval=settings.LLMCHAIN_NODE_STATE_INTERVAL_S,
                         log_file=chain_dir / "anvil.log").start()
        self.stdout.write(f"chain: started anvil on {node.url} (state in {node.state_file})")
        return node

    def _ensure_deployment(self) -> None:
        client = default_client()
        path = Path(settings.LLMCHAIN_DEPLOYMENT)
        if path.exists():
            current = Deployment.load(path)
            code = client.request("eth_getCode", [current.reputation, "latest"])
            if current.chainId == client.chain_id and code not in (None, "0x"):
                self.stdout.write(f"chain: contracts at {current.reputation} (deployment {path})")
                self._grant_new_oracles(client, current)
                self._derive_boards()
                return
        admin = account_from_key(settings.LLMCHAIN_ADMIN_KEY)
        deployment = deploy(client, admin)
        grant_oracle_roles(client, deployment, admin, oracle_addresses())
        deployment.save(path)
        indexer.reset()  # tables of an older deployment describe another chain
        self.stdout.write(f"chain: deployed the contracts, deployment file {path}")

    def _grant_new_oracles(self, client, deployment: Deployment) -> None:
        """An oracle key added to LLMCHAIN_ORACLE_KEY since the deployment: ORACLE_ROLE from the admin."""
        try:
            granted = grant_oracle_roles(client, deployment, account_from_key(settings.LLMCHAIN_ADMIN_KEY),
                                         oracle_addresses())
        except ChainError as exc:
            raise CommandError(f"an oracle key lacks ORACLE_ROLE on the deployment and LLMCHAIN_ADMIN_KEY cannot "
                               f"grant it: {exc}") from exc
        if granted:
            self.stdout.write(f"chain: ORACLE_ROLE granted to {', '.join(granted)}")

    def _derive_boards(self) -> None:
        """Indexed rows from before the boards' table existed: derive their entries once."""
        if Reputation.objects.exists() and not BoardEntry.objects.exists():
            self.stdout.write(f"boards: derived {entries.rebuild()} entries from the indexed tables")


def site_url(addr: str) -> str:
    return f"http://{addr}" if ":" in addr else f"http://127.0.0.1:{addr}"


def sign_in_text(url: str, no_demo: bool, accounts: list[DemoAccount]) -> str:
    lines = ["", f"LLMChain is up: open {url}/  (Ctrl-C stops the site, the workers and the node)"]
    if no_demo:
        return "\n".join([*lines, f"Sign up at {url}/signup/ (no demo: started with --no-demo)."])
    lines.append("Demo data fills in the background (the `demo:` lines say what it added or skipped): on a first "
                 "start the boards rank the MT-Bench replay models within minutes (a progress line on the boards), "
                 "the expert queue holds ScaleEval's recorded debates, /metaeval/ an example run.")
    new = [a for a in accounts if a.password]
    if new:
        lines.append(f"Sign in at {url}/login/ with a demo account (passwords shown this once, stored hashed):")
        width = max(len(a.username) for a in new)
        lines += [f"  {a.role:<10} {a.username:<{width}}  {a.password}   then {url}{ROLE_PAGES[a.role]}" for a in new]
    old = [a.username for a in accounts if not a.password]
    if old:
        lines.append(f"Demo accounts from an earlier start: {', '.join(old)} (their passwords were printed then; "
                     f"`python manage.py changepassword NAME` sets a new one). Or sign up at {url}/signup/.")
    return "\n".join(lines)
