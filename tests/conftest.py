import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings as django_settings

# Every block is final in the tests (as on QBFT), unless a test sets a depth: the ledger tests
# then see a call confirmed in the block that mines it. In the environment for the worker processes
# tests start, and in this process's settings (read before this file).
os.environ.setdefault("LLMCHAIN_FINALITY", "0")
django_settings.LLMCHAIN_FINALITY = os.environ["LLMCHAIN_FINALITY"]
# pytest-django turns DEBUG off in this process, which is no deployment: the deployment check
# (ops/checks.py, which the ASGI application runs on import) would refuse settings.py's laptop key.
django_settings.SECRET_KEY = "tests-only-" + "k" * 60
# A board is served as of its version in the tests: a change the indexer folds shows on the next request
# (a live site may serve a board up to LLMCHAIN_BOARD_MAX_STALE_S old while it is rendered again). The
# tests of that set a bound of their own.
os.environ.setdefault("LLMCHAIN_BOARD_MAX_STALE_S", "0")
django_settings.LLMCHAIN_BOARD_MAX_STALE_S = float(os.environ["LLMCHAIN_BOARD_MAX_STALE_S"])
# Tests reach their own servers (anvil, js-ipfs, the model server, another site) on loopback ports the
# OS picks, so the outbound guard admits loopback here, as a laptop's settings do; tests/security
# narrows it again to show what it refuses.
os.environ.setdefault("LLMCHAIN_OUTBOUND_ALLOW", "localhost,127.0.0.0/8,[::1]")
django_settings.LLMCHAIN_OUTBOUND_ALLOW = os.environ["LLMCHAIN_OUTBOUND_ALLOW"]
# Torch runs one thread in the test processes and in the processes they start (the oracle's BERTScore,
# the scoring bench): five workers share 2 cores, and torch's default of a thread per core spin-waited
# on itself there (the BERTScore tests with a busy process beside: 69 CPU-s on two threads, 25 on one).
# The built-in model's server sets its own threads (modelserver/loading.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def _own_redis_databases(worker: str) -> None:
    """`make test` runs the tests in pytest-xdist workers (gw0, gw1, ...). pytest-django gives each its
    own test database; here each gets its own pair of Redis databases, the channel layer's and the
    cache's (the next number, as settings.py derives it): REDIS_URL's number + 2 x the worker's, in this
    process's settings and in the environment of the processes its tests start. A worker's cache clear
    (every test starts with one) then never empties another's cache, and two workers' chat sockets,
    whose group names come from their own databases' ids, never hear each other."""
    from urllib.parse import urlparse

    from llmchain_site.settings import redis_db_url

    layer_url = redis_db_url(os.environ["REDIS_URL"], 2 * int(worker.removeprefix("gw")))
    cache_url = redis_db_url(layer_url, 1)
    if {urlparse(url).path for url in (layer_url, cache_url)} & {"/13", "/14"}:  # tests/ops/test_topology.py's
        raise RuntimeError(f"too many test workers for Redis's 16 databases ({worker} would use {layer_url})")
    os.environ["REDIS_URL"] = django_settings.REDIS_URL = layer_url
    django_settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"] = layer_url
    if "LLMCHAIN_CACHE_URL" not in os.environ:
        django_settings.LLMCHAIN_CACHE_URL = cache_url
        django_settings.CACHES["default"]["LOCATION"] = cache_url


if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("REDIS_URL"):
    _own_redis_databases(os.environ["PYTEST_XDIST_WORKER"])


def _flush_by_delete() -> None:
    """A transactional test (`django_db(transaction=True)`) ends with Django's `flush`, on PostgreSQL one
    TRUNCATE of every table: about 2 s on this machine's server (55 tables, each given a new file on
    disk), at the end of every such test. DELETE of their rows, as Django flushes SQLite, takes 15 ms
    here. It runs in one transaction, and every foreign key Django makes is checked at the commit, so
    the order of the tables does not matter; `flush` resets no sequence either way (the test cases
    call it with reset_sequences=False), and a flush that asks for it, or for CASCADE, still truncates."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        if not tables:
            return []
        # TRUNCATE waits for the writers under way and keeps new ones out until it commits; a plain DELETE
        # would leave the rows a site's background worker commits meanwhile for the next test. The lock
        # (it blocks writes, not reads) gives the DELETE the same: every row committed before it is deleted.
        names = ", ".join(self.quote_name(table) for table in tables)
        return [f"{style.SQL_KEYWORD('LOCK TABLE')} {names} {style.SQL_KEYWORD('IN EXCLUSIVE MODE')};",
                *(f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in tables)]

    DatabaseOperations.sql_flush = sql_flush


if django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
    _flush_by_delete()

# The apps are imported once the settings above are final.
from apps.chain.client import ChainClient, account_from_key  # noqa: E402
from apps.chain.deploy import deploy, grant_role  # noqa: E402
from apps.chain.node import DEV_KEYS, AnvilNode, anvil_available  # noqa: E402
from tests.support import Driver  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL_API_KEY = "sk-local-test"


# The fixtures of the tests that keep the CPU busy for long: the built-in model answering (model_server,
# local_model) and the oracle worker scoring with BERTScore (oracle_worker, tests/browser).
CPU_BOUND_FIXTURES = {"model_server", "local_model", "oracle_worker"}


def uses_the_model(item) -> bool:
    return bool(CPU_BOUND_FIXTURES & set(getattr(item, "fixturenames", ())))


def shares_a_module_fixture(item) -> bool:
    """Whether the test takes a fixture set up once per module (a chain, a filled bench database, an
    encoder): its module's tests then run in one worker, which sets it up once, where spread over the
    workers each paid for it (the boards bench's scratch database, about 100 s, three times)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope in ("module", "package") for defs in info.name2fixturedefs.values())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`, `--dist loadgroup`) the tests that run the built-in model or
    the oracle's scoring go one after the other in one worker: two at once on this 2-core machine
    would race their waits against each other's answers, and each worker would load a model server
    of its own. Without anvil, the chain tests are skipped.

    tryfirst: xdist's worker turns the groups into its scheduling units in this same hook, and it
    is registered after this file (an initial conftest), so pluggy would call it first and the group
    marked here would come too late to count: every worker then ran model tests with a server each."""
    for item in items:
        if uses_the_model(item):
            item.add_marker(pytest.mark.xdist_group("model"))
        elif item.get_closest_marker("xdist_group") is None and shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    # The slow tests first (a stable sort, before pytest-django's, which then orders the tests by their
    # database use and keeps this order within each kind): xdist hands out tests and groups in collection
    # order, and the topology test (about 2 min) came 1,885th of 2,030, the model group (about 8 min in one
    # worker) 433rd, so that the run could end on them with the other workers idle.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if anvil_available():
        return
    skip = pytest.mark.skip(reason="anvil is not installed (run `npm ci`)")
    for item in items:
        if "chain" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The boards cache rendered pages in the process's cache, and their standings in the process: no
    test sees another's."""
    from django.core.cache import cache

    from apps.leaderboard import boards
    cache.clear()
    boards.forget_standings()
    yield


@pytest.fixture(scope="session")
def admin():
    return account_from_key(DEV_KEYS[0])


@pytest.fixture(scope="session")
def oracle():
    return account_from_key(DEV_KEYS[1])


@pytest.fixture(scope="session")
def automine_node(tmp_path_factory):
    """A free-gas anvil that mines each transaction at once: for direct contract tests."""
    node = AnvilNode(block_time=None, base_fee=0, log_file=tmp_path_factory.mktemp("anvil") / "anvil.log")
    node.start()
    yield node
    node.stop()


@pytest.fixture(scope="session")
def driver(automine_node, admin, oracle) -> Driver:
    client = ChainClient(automine_node.url)
    deployment = deploy(client, admin)
    grant_role(client, deployment, admin, "ORACLE_ROLE", oracle.address)
    return Driver(client, deployment)


@pytest.fixture
def fresh_chain(driver):
    """Each test sees the chain as deployed, whatever the previous test did."""
    snap = driver.snapshot()
    yield driver
    driver.revert_to(snap)


@dataclass
class RunningModelServer:
    url: str
    model: str
    api_key: str
    log_file: Path


@pytest.fixture(scope="session")
def model_server(tmp_path_factory) -> RunningModelServer:
    """`manage.py serve_model` on a free port, with an API key; the first run converts the GGUF (~30 s)."""
    log_file = tmp_path_factory.mktemp("model-server") / "serve_model.log"
    with log_file.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "manage.py", "serve_model", "--port", "0", "--api-key", MODEL_API_KEY],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = _wait_for_url(proc, log_file, timeout=300)
        yield RunningModelServer(url=url, model="smollm2-135m-instruct", api_key=MODEL_API_KEY, log_file=log_file)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_url(proc: subprocess.Popen, log_file: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"on (http://\S+/v1)", log_file.read_text(errors="replace"))
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"serve_model exited with {proc.returncode}:\n{log_file.read_text()[-3000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"serve_model was not ready within {timeout} s:\n{log_file.read_text()[-3000:]}")
