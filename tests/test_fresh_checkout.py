"""A fresh checkout: the project's commands migrate the local SQLite database they find empty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from llmchain_site.firstrun import migrate_local_database, needs_tables
from tests.openai_endpoint import dead_url

REPO = Path(__file__).resolve().parents[1]


def manage(*args: str, var_dir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "LLMCHAIN_DEPLOYMENT")}
    env.update(LLMCHAIN_VAR_DIR=str(var_dir), LLMCHAIN_RPC_URL=dead_url().removesuffix("/v1"))
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_chain_status_on_a_fresh_checkout_migrates_its_database_first_and_only_once(tmp_path):
    first = manage("chain", "status", var_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"migrating {tmp_path / 'llmchain.sqlite3'} first (" in first.stderr
    status = json.loads(first.stdout.strip().splitlines()[-1])
    assert status["reachable"] is False and status["outbox"] == {}  # counted from the new tables
    again = manage("chain", "status", var_dir=tmp_path)
    assert again.returncode == 0 and "migrating" not in again.stderr


def test_only_the_project_s_commands_that_read_tables_migrate():
    assert needs_tables("chain") and needs_tables("import_scaleeval") and needs_tables("bench") and needs_tables("up")
    assert not needs_tables("serve_model")  # the model server reads no table
    assert not needs_tables("check") and not needs_tables("migrate") and not needs_tables("no-such-command")


@pytest.mark.django_db
def test_a_server_database_is_never_migrated_behind_its_owner_s_back(monkeypatch):
    def refuse(*args):
        raise AssertionError("looked for migrations to apply")

    monkeypatch.setattr("llmchain_site.firstrun.MigrationExecutor", refuse)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setattr(connection, "vendor", "postgresql")
    assert migrate_local_database(["manage.py", "chain", "status"]) == 0
    monkeypatch.setattr(connection, "vendor", "sqlite")
    monkeypatch.setenv("DATABASE_URL", "sqlite:////nonexistent/never-opened.sqlite3")  # configured: left alone
    assert migrate_local_database(["manage.py", "chain", "status"]) == 0
    monkeypatch.delenv("DATABASE_URL")  # the laptop's default database: looked at
    with pytest.raises(AssertionError, match="looked for migrations"):
        migrate_local_database(["manage.py", "chain", "status"])
