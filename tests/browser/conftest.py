"""The whole site, running for real, driven by a real browser (Debian's Chromium through Playwright).

Started here: an anvil node with the contracts deployed (block time 1 s, free gas), the ledger
worker (`manage.py chain work`) and the site (`manage.py runserver`: daphne, so websockets work),
both as subprocesses on the pytest test database; the starting contexts, indexed by that worker; the
built-in model server (tests/conftest.py); and a Chromium page per test.

The tests are transactional (`django_db(transaction=True)`): their rows are committed, so the
subprocesses see them, and the database is flushed after each test. The worker is therefore
started per test and stopped before the flush; each test re-seeds the starting contexts, which the new worker
re-indexes from the chain (the chain itself lives for the whole session).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from apps.chain.node import DEV_KEYS, AnvilNode, anvil_available, free_port
from tests.chain.conftest import database_url
from tests.conftest import uses_the_model
from tests.support import deploy_on_interval_node

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
# Screenshots go to test-artifacts/screenshots, or to LLMCHAIN_SCREENSHOTS (a folder to look at them in).
ARTIFACTS = Path(os.environ.get("LLMCHAIN_SCREENSHOTS") or REPO / "test-artifacts" / "screenshots")
# Without the background-networking flags Chromium keeps calling Google, and the closed network
# refuses those connections; --headless --no-sandbox because tests run as root without a display.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DEMO_CONTEXT_COUNT = 8
TIMEOUT_MS = 15_000


def _missing() -> str:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: run `make install` (apt-get install chromium)"
    if not anvil_available():
        return "anvil is not installed (run `npm ci`)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is missing: run `make install`"
    return ""


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups (tests/conftest.py says why)
def pytest_collection_modifyitems(config, items):
    """Without what they need, the browser tests are skipped, saying what is missing. Under
    pytest-xdist (`make test`, `--dist loadgroup`) those on the shared site run one after the other in
    one worker, which starts the site, its ledger worker and Chromium for them; those that wait on the
    built-in model or the oracle's scoring go with the other such tests instead (tests/conftest.py,
    group "model"); one that starts a stack of its own (`make run`'s demo) runs in whichever worker is
    free, beside the group rather than after it."""
    reason = _missing()
    here = Path(__file__).parent
    for item in items:
        if here not in Path(item.path).parents:
            continue
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif "site" in item.fixturenames and not uses_the_model(item):
            item.add_marker(pytest.mark.xdist_group("browser"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item (for the failure screenshot), and add the logs of the
    site's processes to a failed test's report."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    if report.failed:
        for name, path in getattr(item, "_browser_logs", {}).items():
            report.sections.append((f"{name} log (last lines)", tail(path, 60)))
    return report


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


# --- subprocesses ------------------------------------------------------------------------------

class Proc:
    """A child process in its own session, logging to a file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, args: list[str], env: dict, log_file: Path):
        self.name, self.args, self.log_file = name, args, log_file
        with log_file.open("ab") as out:
            self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check(self) -> None:
        if not self.alive():
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{tail(self.log_file)}")

    def stop(self, timeout: float = 15) -> None:
        if not self.alive():
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass


def wait_for(what: str, condition, timeout: float, *, procs: tuple[Proc, ...] = (), interval: float = 0.2):
    """Poll `condition` until it returns something truthy; fail with the processes' logs."""
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            p.check()
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name} ({p.log_file}):\n{tail(p.log_file)}" for p in procs)
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs}")
        time.sleep(interval)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.HTTPError):
        return False


# --- the chain, the site, the worker -----------------------------------------------------------

@pytest.fixture(scope="package")
def browser_chain(tmp_path_factory, admin, oracle):
    """An interval-mining anvil (1 s blocks, free gas) with the contracts deployed, as `make run`."""
    path = tmp_path_factory.mktemp("browser-chain")
    node = AnvilNode(block_time=1, base_fee=0, state_file=path / "state.json", log_file=path / "anvil.log")
    node.start()
    try:
        node.deployment_file = path / "deployment.json"
        node.deployment = deploy_on_interval_node(node, node.deployment_file).deployment
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="package")
def site_env(browser_chain, django_db_setup, tmp_path_factory) -> dict:
    """The environment of the site's processes: the test database, this chain, a scratch IPFS dir."""
    ipfs = tmp_path_factory.mktemp("browser-ipfs")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return {
        **env,
        "DATABASE_URL": database_url(),
        "LLMCHAIN_RPC_URL": browser_chain.url,
        "LLMCHAIN_DEPLOYMENT": str(browser_chain.deployment_file),
        "LLMCHAIN_IPFS_DIR": str(ipfs),
        "LLMCHAIN_IPFS_BACKEND": "local",
        "LLMCHAIN_ORACLE_KEY": DEV_KEYS[1],
        "LLMCHAIN_RESEND_AFTER_S": "5",
        "LLMCHAIN_ANSWER_MAX_TOKENS": "48",  # a short answer: the built-in model runs on CPU
        "DEBUG": "1",  # runserver serves the static files (htmx) only in debug
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture(scope="package")
def web(site_env, tmp_path_factory):
    """`manage.py runserver` (daphne's ASGI server: http and websockets) on a free port."""
    port = free_port()
    log_file = tmp_path_factory.mktemp("browser-web") / "runserver.log"
    proc = Proc("site (runserver)", [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                site_env, log_file)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"the site on {url}", lambda: http_ok(f"{url}/login/"), 60, procs=(proc,))
        wait_for("htmx from static/vendor", lambda: http_ok(f"{url}/static/vendor/htmx/htmx.min.js"), 10,
                 procs=(proc,))
        proc.url = url
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def worker(transactional_db, site_env, tmp_path_factory):
    """`manage.py chain work`, per test: stopped before the test database is flushed."""
    log_file = tmp_path_factory.mktemp("browser-worker") / "chain-work.log"
    proc = Proc("ledger worker (chain work)", [sys.executable, "manage.py", "chain", "work"], site_env, log_file)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def oracle_worker(site, tmp_path_factory):
    """`manage.py oracle work`, for the tests that follow an answer's automatic evaluation."""
    log_file = tmp_path_factory.mktemp("browser-oracle") / "oracle-work.log"
    proc = Proc("oracle worker (oracle work)", [sys.executable, "manage.py", "oracle", "work", "--no-health"],
                site.env, log_file)
    try:
        yield proc
    finally:
        proc.stop()


@dataclass
class Site:
    url: str
    chain: AnvilNode
    web: Proc
    worker: Proc
    ipfs_dir: Path
    env: dict

    def wait(self, what: str, condition, timeout: float = 30):
        return wait_for(what, condition, timeout, procs=(self.web, self.worker))


@pytest.fixture
def site(transactional_db, settings, browser_chain, site_env, web, worker, request) -> Site:
    """The running site with the starting contexts on-chain and indexed. This test process shares the
    database, the chain and the IPFS directory with the site's processes."""
    settings.LLMCHAIN_RPC_URL = browser_chain.url
    settings.LLMCHAIN_DEPLOYMENT = browser_chain.deployment_file
    settings.LLMCHAIN_IPFS_DIR = Path(site_env["LLMCHAIN_IPFS_DIR"])
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_ORACLE_KEY = DEV_KEYS[1]
    request.node._browser_logs = {web.name: web.log_file, worker.name: worker.log_file}

    from apps.chain.demo import seed_contexts
    from apps.chain.models import Context

    seed_contexts()
    site = Site(web.url, browser_chain, web, worker, settings.LLMCHAIN_IPFS_DIR, site_env)
    site.wait(f"the worker to index the {DEMO_CONTEXT_COUNT} starting contexts",
              lambda: Context.objects.count() >= DEMO_CONTEXT_COUNT, 60)
    return site


# --- the browser -------------------------------------------------------------------------------

# Package scope: Playwright's sync API keeps an event loop running in this thread while it is
# open, which later tests (asyncio.run, pytest-asyncio) must not inherit.
@pytest.fixture(scope="package")
def chromium():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an asyncio loop in this thread (in another greenlet): Django then
    # takes the tests' own database calls for calls from async code and refuses them. They are
    # plain synchronous calls, so lift that check while the browser runs.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


# Records the page's websockets, so a test can wait until the chat socket is open.
TRACK_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = function (...args) { const s = new Native(...args); window.__sockets.push(s); return s; };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();
"""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:120]


class Shots:
    """Full-page screenshots under test-artifacts/screenshots/<test>-<step>.png."""

    def __init__(self, test_name: str):
        self.prefix = _slug(test_name)
        self.taken: list[Path] = []

    def __call__(self, page, step: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.prefix}-{_slug(step)}.png"
        page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)
        return path


@pytest.fixture
def shot(request) -> Shots:
    return Shots(request.node.name)


@pytest.fixture
def page(chromium, site, shot, request):
    """A fresh browser context (no cookies) and page on the running site; a screenshot on failure."""
    context = chromium.new_context(base_url=site.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(TRACK_SOCKETS)
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda msg: msg.type == "error"  # a favicon 404 too: the site serves one
            and page.console_errors.append(f"{msg.text} ({msg.location.get('url')})"))
    page.on("pageerror", lambda exc: page.console_errors.append(str(exc)))
    try:
        yield page
    finally:
        call = getattr(request.node, "rep_call", None)
        if call is not None and call.failed:
            try:
                shot(page, "failure")
            except Exception as exc:  # a crashed page must not hide the test's own failure
                print(f"no failure screenshot: {exc}")
        context.close()


def wait_for_js(page, expression: str, timeout: float = 15_000, interval: int = 50) -> None:
    """`page.wait_for_function` without its in-page polling: after a first check Playwright builds the
    predicate with eval, which the site's Content-Security-Policy (no 'unsafe-eval') refuses, so this
    asks again from the test, every `interval` ms, until `expression` is true or `timeout` ms pass."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise PlaywrightTimeoutError(f"not true within {timeout:.0f} ms: {expression}")
        page.wait_for_timeout(interval)
