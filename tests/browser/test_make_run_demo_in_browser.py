"""`make run` on a fresh machine fills itself: from an empty database, through the very
path `make run` takes (`manage.py migrate`, then `manage.py up`, which starts anvil, deploys, creates
the demo accounts and starts the workers and the demo in the background), the global board lists at
least five models with their automatic scores within ten minutes (not ranked: nobody has rated their
answers yet, and the board says so rather than rank them by name), the expert queue has items, and the demo developer and the demo
expert sign in with the passwords `up` printed and reach their pages. Screenshots go to
test-artifacts/screenshots/.

The stack is `up`'s own, not the package's fixtures: its database is the SQLite file `make run` uses,
in a scratch LLMCHAIN_VAR_DIR (in CI too, where the other tests use PostgreSQL and Redis), and its
chain an anvil that `up` starts on a free port. `--no-model`: the demo does not need the built-in
model (the replay's references are replay models, the example meta-evaluation uses the encoder,
the debates are recorded), and on CPU the model would only slow the rest down.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import expect

from apps.chain.node import free_port
from lib.reputation import GLOBAL_CONTEXT_ID

from .conftest import REPO, TIMEOUT_MS, Proc, http_ok, tail, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow]

BUDGET_S = 600  # the ten minutes, from the first command to five ranked models
ACCOUNT_LINE = re.compile(r"^\s+(user|developer|expert|admin)\s+(demo-\S+)\s+(\S+)\s+then\s", re.M)


def _missing_data() -> str:
    mtbench, scaleeval = Path(settings.LLMCHAIN_MTBENCH_DIR), Path(settings.LLMCHAIN_DATA_DIR) / "scaleeval"
    for path in (mtbench / "question.jsonl", mtbench / "model_answer", scaleeval):
        if not path.exists():
            return f"{path} is missing: the demo needs the shared data (../shared/data)"
    return ""


def make_run_env(var_dir: Path, rpc_port: int) -> dict:
    """A fresh machine's environment: nothing of the test session's own configuration (its database,
    Redis, finality), a var dir of its own, the data where the settings find it."""
    inherited = {k: v for k, v in os.environ.items()
                 if not k.startswith("LLMCHAIN_") and k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    return {**inherited, "LLMCHAIN_VAR_DIR": str(var_dir), "LLMCHAIN_RPC_URL": f"http://127.0.0.1:{rpc_port}",
            "LLMCHAIN_DATA_DIR": str(settings.LLMCHAIN_DATA_DIR),
            "LLMCHAIN_MTBENCH_DIR": str(settings.LLMCHAIN_MTBENCH_DIR), "PYTHONUNBUFFERED": "1"}


def board_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/api/boards/{GLOBAL_CONTEXT_ID}", timeout=5) as resp:
            return json.loads(resp.read())
    except OSError:
        return None


def printed_accounts(log: Path) -> dict[str, tuple[str, str]] | None:
    """{role: (user name, password)} from `up`'s closing text, once it is printed."""
    text = log.read_text(errors="replace")
    if "LLMChain is up" not in text:
        return None
    return {role: (name, password) for role, name, password in ACCOUNT_LINE.findall(text)}


def stop_node(state_file: Path) -> None:
    """anvil runs in a session of its own: `up` stops it on the way out, but should `up` have been
    killed first, stop the one process started with this test's own state file."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(state_file) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def sign_in(context, url: str, username: str, password: str):
    page = context.new_page()
    page.goto(f"{url}/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("button", name="Log in")).to_have_count(0)
    return page


def test_make_run_on_an_empty_database_fills_a_live_demo(chromium, tmp_path, shot, request):
    if reason := _missing_data():
        pytest.skip(reason)
    started = time.monotonic()
    var_dir = tmp_path / "var"
    env = make_run_env(var_dir, free_port())
    log = tmp_path / "make-run.log"
    request.node._browser_logs = {"make run": log}
    migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    up = Proc("make run (manage.py up)", [sys.executable, "manage.py", "up", "--addr", f"127.0.0.1:{port}",
                                          "--no-model"], env, log)
    try:
        accounts = wait_for("`up` to print the demo accounts", lambda: printed_accounts(log), 180, procs=(up,))
        assert set(accounts) == {"user", "developer", "expert", "admin"}, tail(log)
        assert f"open {url}/" in log.read_text()
        wait_for(f"the site on {url}", lambda: http_ok(f"{url}/login/"), 60, procs=(up,))

        def listed():
            board = board_json(url)
            scored = [row for row in (board or {}).get("ranked", []) + (board or {}).get("provisional", [])
                      if row["evaluations"] >= board["min_evaluations"]]
            return board if len(scored) >= 5 else None

        board = wait_for("the global board to list five scored models", listed,
                         BUDGET_S - (time.monotonic() - started), procs=(up,), interval=2)
        took = time.monotonic() - started
        print(f"five scored models on the global board {took:.0f} s after the first command")
        # Only people's ratings move R: the demo rates nothing, so nothing is ranked, and the board says why.
        assert all(row["n_human"] >= board["min_rated"] for row in board["ranked"])
        # The demo has no human signal of its own: no vote, no figure made up for one, no weighted score.
        ra = board["validity"]["columns"]["ra"]
        assert (ra["status"], ra["votes"], ra["accuracy_non_tie"], ra["weight"]) == (
            "not_enough_human_signal", 0, None, 0.0), ra
        assert all(row["weighted"] is None and not row["battles"] for row in board["ranked"] + board["provisional"])

        context = chromium.new_context(base_url=url, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        try:
            page = context.new_page()
            page.goto("/")
            expect(page.locator("table.board tbody tr").nth(4)).to_be_visible()
            expect(page.locator("#board-order")).to_contain_text(re.compile(r"No model is ranked here yet|Ranked by R"))
            expect(page.locator("#replay-line .demo-label")).to_have_text("Demo data.")
            expect(page.locator("#board-validity")).to_contain_text("Not enough human signal yet to check the "
                                                                    "automatic score against people here: 0 arena votes")
            shot(page, "board")

            name, password = accounts["expert"]
            expert = sign_in(context, url, name, password)
            expert.goto("/annotate/")
            expect(expert.get_by_role("heading", name="Expert queue")).to_be_visible()
            expect(expert.locator("pre.question")).not_to_be_empty()
            expect(expert.locator("#item p.note")).to_contain_text("demo data")
            shot(expert, "expert-queue")
            expert.close()
            context.clear_cookies()

            name, password = accounts["developer"]
            developer = sign_in(context, url, name, password)
            developer.goto("/models/new")
            expect(developer.get_by_role("heading", name="Register a model")).to_be_visible()
            shot(developer, "developer")
        finally:
            context.close()
    finally:
        # Nothing here checks how `up` stops, and on SIGTERM the oracle worker first finishes the batch it
        # is scoring (about 9 s of the run, its CPU spent on answers nobody looks at): a few seconds, then
        # SIGKILL to its process group; the node, in a session of its own, is stopped below either way.
        up.stop(timeout=3)
        stop_node(var_dir / "chain" / "state.json")
