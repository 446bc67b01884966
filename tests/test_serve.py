"""The web process's launcher (`python -m llmchain_site.serve`) and what the site's ASGI module sets up for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from daphne import http_protocol
from twisted.internet import tcp

from apps.chain.node import free_port
from llmchain_site import serve

ROOT = Path(__file__).resolve().parent.parent


def test_the_site_is_the_application_unless_one_is_named():
    assert serve.arguments([]) == [serve.APPLICATION]
    assert serve.arguments(["-b", "127.0.0.1", "-p", "8001"]) == ["-b", "127.0.0.1", "-p", "8001", serve.APPLICATION]
    # An endpoint has a colon too, and is not an application.
    assert serve.arguments(["--fd", "6", "-e", "fd:fileno=7"])[-1] == serve.APPLICATION
    assert serve.arguments(["-e", "tcp:8000"])[-1] == serve.APPLICATION
    assert serve.arguments(["-p", "1", "other.asgi:app"]) == ["-p", "1", "other.asgi:app"]


def test_configured_it_drops_the_request_lines_and_sends_an_answer_in_one_piece(monkeypatch):
    original_log = http_protocol.HTTPFactory.log
    monkeypatch.setattr(http_protocol.HTTPFactory, "log", original_log)  # put back after the test
    monkeypatch.setattr(tcp.Connection, "SEND_LIMIT", tcp.Connection.SEND_LIMIT)
    monkeypatch.setattr(serve.QuietServer, "access_log_asked", False)
    assert tcp.Connection.SEND_LIMIT < 300_000  # Twisted's: a board page would take several sends

    serve.configure(["-p", "8001"])
    assert http_protocol.HTTPFactory.log is serve._no_request_line
    assert tcp.Connection.SEND_LIMIT == serve.SEND_LIMIT >= 1 << 20
    assert serve.QuietServer.access_log_asked is False
    serve.configure(["-p", "8001", "--access-log", "-"])
    assert serve.QuietServer.access_log_asked is True


def _serve(args: list[str], log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llmchain_site.serve", "-b", "127.0.0.1", "-p", str(port), *args],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            # A malformed context id: answered (400) without the database.
            httpx.get(f"http://127.0.0.1:{port}/api/boards/0x", timeout=2)
            return proc, port
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the launcher did not answer within 60 s:\n{log.read_text()}")


@pytest.mark.parametrize("asked", [False, True], ids=["by default", "with --access-log -"])
def test_it_serves_the_site_and_logs_requests_only_when_asked(tmp_path, asked):
    log = tmp_path / "site.log"
    proc, port = _serve(["--access-log", "-"] if asked else [], log)
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/api/boards/0x?seen=marker", timeout=10)
        assert answer.status_code == 400
    finally:
        proc.terminate()
        proc.wait(15)
    text = log.read_text()
    assert "Listening on TCP address" in text  # daphne's own messages are kept
    assert ("seen=marker" in text) is asked, text


def test_the_asgi_module_freezes_what_it_built_and_collects_less_often():
    code = ("import gc, json, sys; import llmchain_site.asgi as a; "
            "print(json.dumps({'frozen': gc.get_freeze_count(), 'threshold': gc.get_threshold(), "
            "'views': 'apps.leaderboard.views.board' in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "llmchain_site.settings"})
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["frozen"] > 50_000, figures  # the apps and their modules, out of every pass
    assert figures["views"], "the URL patterns' views are imported before the freeze"
    assert figures["threshold"][0] == 50_000
