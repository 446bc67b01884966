"""The database side of the production-topology test (tests/ops/test_topology.py), run as
`python -m tests.ops.topology_world COMMAND ...` with the stack's environment: the test's own process
is bound to pytest's test database, while the stack runs on a PostgreSQL database of its own.

Commands print one JSON object as their last line:
- `setup MTBENCH_ROOT USERS`: the writing context queued on-chain, USERS accounts signed up, the
  context waited for (the chain workers index it) and the replay models of MTBENCH_ROOT registered in it;
- `report`: what is left to drain, and the interactions and ratings the database holds;
- `serve`: the commands above, one a line on stdin (a JSON list: the command and its arguments), each
  answered on stdout by a line of REPLY and its JSON object, until stdin closes. The test asks for a report every second while the stack drains: a
  process of its own for each cost a Django start-up (about 1.3 CPU-s, 15 to 40 times a run).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

REPLY = "TOPOLOGY_WORLD "


def setup(root: str, users: int) -> dict:
    from apps.chain import outbox
    from apps.chain.demo import context_id
    from apps.chain.keys import admin_address
    from apps.chain.models import Context
    from apps.chat.models import RegisteredModel
    from apps.chat.replay import import_mtbench
    from tests.personas import user

    writing = context_id("writing")
    outbox.enqueue("addContext", admin_address(), {"contextId": writing, "name": "writing"})
    # The accounts while the chain workers start and put the context on-chain (its block, then the
    # finality depth): signing up needs no context, and each sign-up hashes a password (about 0.3 s).
    names = [f"user{n:02d}" for n in range(users)]
    for name in names:
        user(name)
    deadline = time.monotonic() + 120
    while not Context.objects.filter(context_id=writing).exists():
        if time.monotonic() > deadline:
            raise SystemExit("the writing context was not indexed within 120 s")
        time.sleep(0.3)
    import_mtbench(Path(root), contexts=[Context.objects.get(context_id=writing)], progress=lambda _: None)
    return {"context": writing, "users": names,
            "models": dict(RegisteredModel.objects.filter(kind=RegisteredModel.Kind.REPLAY).values_list("name", "pk"))}


def report() -> dict:
    from apps.chain.models import ChainTransaction, IndexerCursor, OutboxItem
    from apps.chain.models import LedgerInteraction
    from apps.chat.models import Interaction, Rating
    from apps.oracle.models import EvaluationJob

    pending = [ChainTransaction.Status.SIGNED, ChainTransaction.Status.SENT, ChainTransaction.Status.MINED]
    done = sorted(Interaction.objects.filter(status=Interaction.Status.DONE).values_list("interaction_id", flat=True))
    indexed = dict(LedgerInteraction.objects.values_list("interaction_id", "reputation_tx"))
    rated = sorted(Rating.objects.values_list("interaction__interaction_id", flat=True))
    last_block = (ChainTransaction.objects.exclude(status="dropped").exclude(block_number=None)
                  .order_by("-block_number").values_list("block_number", flat=True).first()) or 0
    cursor = IndexerCursor.objects.filter(name__startswith="ledger:").values_list("last_block", flat=True).first()
    left = {
        "jobs_not_onchain": EvaluationJob.objects.exclude(status="onchain").count(),
        "outbox_not_confirmed": OutboxItem.objects.exclude(status="confirmed").count(),
        "transactions_pending": ChainTransaction.objects.filter(status__in=pending).count(),
        "interactions_not_indexed": len(set(done) - set(indexed)),
        "ratings_not_indexed": sum(1 for i in rated if not indexed.get(i)),
        "blocks_not_indexed": max(0, last_block - (cursor if cursor is not None else -1)),
    }
    unconfirmed = list(OutboxItem.objects.exclude(status="confirmed").values_list("key", "status", "last_error")[:5])
    return {"left": {k: v for k, v in left.items() if v}, "interactions": done, "rated": rated,
            "unconfirmed": unconfirmed}


def run(command: str, args: list[str]) -> dict:
    if command == "setup":
        return setup(args[0], int(args[1]))
    if command == "report":
        return report()
    raise SystemExit(f"unknown command {command!r}: setup, report or serve")


def serve() -> None:
    """Answer each command line on stdin; a command that fails is answered with its traceback
    ({"error": ...}) and the next one still runs."""
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            command, *args = json.loads(line)
            out = run(command, args)
        except (Exception, SystemExit):  # said to the test, which fails with it
            out = {"error": traceback.format_exc()}
        print(REPLY + json.dumps(out), flush=True)


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmchain_site.settings")
    import django

    django.setup()
    command, *args = argv
    if command == "serve":
        serve()
        return
    print(json.dumps(run(command, args)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
