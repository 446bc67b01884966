"""The project's commands migrate a local SQLite database before they run.

On a fresh checkout `manage.py chain status`, `bench chain` or an importer would otherwise stop at
"no such table"; `make run` migrates first, and so does every command of the project's own apps
(`apps.*`, `ops`) when the database is the laptop default (no DATABASE_URL: SQLite in
`var/llmchain.sqlite3`). A configured database (PostgreSQL in production, or any DATABASE_URL, such
as a verifier's deliberately absent one) is migrated by whoever configured it, never behind their
back: there the command runs as it is.
"""

from __future__ import annotations

import os
import sys

from django.core.management import call_command, get_commands
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

NO_DATABASE = {"serve_model"}  # the built-in model's server reads no table


def needs_tables(command: str) -> bool:
    app = get_commands().get(command, "")
    return (app.startswith("apps.") or app == "ops") and command not in NO_DATABASE


def migrate_local_database(argv: list[str]) -> int:
    """Apply what is missing before the project command `argv[1]` runs; returns how many migrations."""
    if len(argv) < 2 or not needs_tables(argv[1]) or os.environ.get("DATABASE_URL") or connection.vendor != "sqlite":
        return 0
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        sys.stderr.write(f"migrating {connection.settings_dict['NAME']} first ({len(plan)} migrations to apply)\n")
        call_command("migrate", interactive=False, verbosity=0)
    return len(plan)
