"""python manage.py chain {deploy,node,submit,index,work,audit,status}"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.chain import indexer
from apps.chain.answers import AnswerFill
from apps.chain.audit import run_audit
from apps.chain.client import ChainError, account_from_key
from apps.chain.deploy import deploy, grant_oracle_roles
from apps.chain.evidence import default_store
from apps.chain.keys import oracle_addresses
from apps.chain.ledger import default_client, default_ledger
from apps.chain.node import AnvilNode, NodeError
from apps.chain.submitter import Submitter, parse_shard
from apps.chain.work import run_worker


def shard(text: str) -> tuple[int, int]:
    """--shard I/N, said in argparse's words when it is wrong."""
    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = "Deploy, run and audit the LLMChain ledger."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("deploy", help="deploy and wire the three contracts; prints the deployment file path")
        p.add_argument("--out", type=Path, default=None, help="where to write the deployment JSON")
        p = sub.add_parser("node", help="run the local anvil node (--block-time 1, state on disk)")
        p.add_argument("--state-dir", type=Path, default=None)
        p.add_argument("--port", type=int, default=None)
        p.add_argument("--block-time", type=float, default=1)
        p = sub.add_parser("submit", help="sign and send queued transactions, confirm them from receipts")
        p.add_argument("--once", action="store_true")
        p.add_argument("--until-idle", action="store_true", help="stop when nothing is left to send or confirm")
        p.add_argument("--shard", type=shard, default=(0, 1), metavar="I/N",
                       help="take only the sender lanes whose address is I modulo N, so that N submitters work side "
                            "by side (with several relayer keys, LLMCHAIN_RELAYER_KEY, their lanes spread over them)")
        p = sub.add_parser("index", help="fold contract events into the site's tables")
        p.add_argument("--rebuild", action="store_true", help="forget the indexed tables and rebuild from the chain")
        p.add_argument("--follow", action="store_true", help="keep following new blocks")
        p = sub.add_parser("work", help="submitter and indexer in one loop (what `make run` starts)")
        p.add_argument("--shard", type=shard, default=(0, 1), metavar="I/N",
                       help="its submitter takes only the lanes whose address is I modulo N (see `chain submit`)")
        sub.add_parser("audit", help="recompute every score from the chain; exit 0 only if the database agrees")
        sub.add_parser("status", help="counts of the outbox and transactions by status")

    def handle(self, *args, action, **opts):
        try:
            getattr(self, f"do_{action}")(**opts)
        except (ChainError, NodeError, FileNotFoundError) as exc:
            raise CommandError(str(exc)) from exc

    def do_deploy(self, out=None, **_):
        client = default_client()
        admin = account_from_key(settings.LLMCHAIN_ADMIN_KEY)
        deployment = deploy(client, admin)
        grant_oracle_roles(client, deployment, admin, oracle_addresses())
        path = out or settings.LLMCHAIN_DEPLOYMENT
        deployment.save(path)
        self.stdout.write(f"Identity {deployment.identity}\nLLMChainAccess {deployment.access}\n"
                          f"Reputation {deployment.reputation}\nchain {deployment.chainId}, block {deployment.deployBlock}")
        self.stdout.write(str(Path(path).resolve()))

    def do_node(self, state_dir=None, port=None, block_time=1, **_):
        state_dir = state_dir or settings.LLMCHAIN_CHAIN_DIR
        port = port or urlparse(settings.LLMCHAIN_RPC_URL).port or 8545
        # Free gas, like the paper's Besu network (min-gas-price 0): accounts need no funding.
        node = AnvilNode(port=port, block_time=block_time, base_fee=0, state_file=Path(state_dir) / "state.json",
                         state_interval=settings.LLMCHAIN_NODE_STATE_INTERVAL_S,
                         log_file=Path(state_dir) / "anvil.log")
        node.start()
        self.stdout.write(f"anvil on {node.url}, state in {node.state_file} (Ctrl-C stops it)")
        try:
            run_worker(lambda: None, idle_sleep=0.5, until=lambda: node.proc.poll() is not None, name="anvil")
        finally:
            node.stop()

    def do_submit(self, once=False, until_idle=False, shard=(0, 1), **_):
        submitter = Submitter(default_ledger(), shard=shard)
        try:
            if once:
                self.stdout.write(json.dumps(dict(submitter.run_once())))
            else:
                submitter.run_forever(until_idle=until_idle)
        finally:
            submitter.release()

    def do_index(self, rebuild=False, follow=False, **_):
        ledger = default_ledger()
        if rebuild:
            indexer.reset()
        total = indexer.index_until_head(ledger)
        fill = AnswerFill()
        fill.run()

        def index() -> int:
            nonlocal total
            folded = indexer.index_until_head(ledger)
            total += folded
            return folded + fill.run()

        if follow:
            run_worker(index, idle_sleep=0.5, name="chain")
        self.stdout.write(json.dumps({"blocks": total}))

    def do_work(self, shard=(0, 1), **_):
        ledger = default_ledger()
        submitter = Submitter(ledger, shard=shard)
        store = default_store()
        fill = AnswerFill(store)
        self.stdout.write("ledger worker: submitting, indexing and pinning evidence (Ctrl-C stops it)")

        def step():
            # Pins first: an IPFS outage only defers them (backoff per row), and a chain outage,
            # which ends the pass, does not hold them up. Last, the answers' lengths the indexer could
            # not take from the local records (a pass bounded in time, rarer while it finds nothing).
            pinned = store.pin_pending()["pinned"]
            did = submitter.run_once()
            indexer.index_until_head(ledger)
            filled = fill.run()
            return did or pinned or filled

        try:
            # Any chain error is said once (and once when the node is back), then retried every 2 s.
            run_worker(step, idle_sleep=0.3, survive=lambda exc: isinstance(exc, ChainError), pause=2, pause_max=2,
                       name="chain", say=self.stderr.write)
        finally:
            submitter.release()

    def do_audit(self, **_):
        ledger = default_ledger()
        report = run_audit(ledger)
        for m in report.contract_mismatches[:20]:
            self.stdout.write(f"CHAIN != RECOMPUTED {m}")
        for m in report.db_mismatches[:20]:
            self.stdout.write(f"DATABASE != CHAIN {m}")
        for m in report.weights.issues[:20]:
            self.stdout.write(f"WEIGHT != EVIDENCE {m}")
        w = report.weights
        self.stdout.write(f"{report.events} events, {report.interactions} interactions, {report.pairs} "
                          f"(model, context) scores, {w.checked} wA rebuilt from their evidence ({w.unreadable} "
                          f"unreadable, {w.unweighted} from before weightings): "
                          + ("all agree" if report.ok else "MISMATCH"))
        self.stdout.write(json.dumps(report.summary()))
        if not report.ok:
            sys.exit(1)

    def do_status(self, **_):
        from apps.chain.health import status

        report = status()
        if not report["reachable"]:
            self.stdout.write(f"chain: UNREACHABLE ({report['error']})")
        else:
            self.stdout.write(f"chain: head {report['head']}, final {report['final']}, indexed {report['indexed']}")
        for lane in report["stuck_lanes"]:
            self.stdout.write(f"lane {lane['address']} STUCK since {lane['since']}: {lane['reason']}")
        self.stdout.write(json.dumps(report))
