"""python manage.py leaderboard {verify, rebuild}

`verify` rebuilds every board from the chain alone (events and state over JSON-RPC, names and the
arena's voted and the rated answers from IPFS) and compares the served boards with it cell by cell, the
arena columns, the weighted score and how far the automatic score agrees with people's votes and ratings
here included: exit 0 when all match, 1 when any cell differs or the contract's state disagrees
with its events, 2 when something cannot be read. `rebuild` recomputes the board table and the arena.
"""

from __future__ import annotations

import json
import sys
from urllib.parse import urlparse

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from eth_utils import is_address

from apps.chain.client import ChainClient, ChainError
from apps.chain.indexer import cursor_name
from apps.chain.ipfs import KuboClient
from apps.chain.ledger import Deployment, Ledger, default_ledger
from apps.chain.models import IndexerCursor
from apps.chain.work import run_worker
from apps.leaderboard import arena_entries, boards, entries
from apps.leaderboard.verify import (CidReader, RemoteSite, SiteBoards, VerifyError, default_reader,
                                     rebuild_from_chain, verify_boards, visitor_ledger)
from lib import outbound
from lib.reputation import GLOBAL_CONTEXT_ID

USAGE = 2


def usage(message: str) -> CommandError:
    return CommandError(message, returncode=USAGE)


def printable(text: str) -> str:
    """Names come from anyone's metadata record: never let one send control sequences to the terminal."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


class Command(BaseCommand):
    help = "Verify the boards against the chain, or recompute the board table."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("verify", help="rebuild the boards from the chain alone and compare the served ones")
        p.add_argument("--context", default="all",
                       help="a context id (0x + 64 hex), 'global', or 'all' (default: every context and global)")
        p.add_argument("--served", metavar="URL", default=None,
                       help="verify another site's boards through its JSON API (default: this site's board table)")
        p.add_argument("--rpc", metavar="URL", default=None, help="the node to read (default: LLMCHAIN_RPC_URL)")
        p.add_argument("--reputation", metavar="ADDR", default=None,
                       help="the Reputation contract (default: the deployment file's)")
        p.add_argument("--identity", metavar="ADDR", default=None,
                       help="the Identity contract (optional: boards need only the Reputation contract's events)")
        p.add_argument("--from-block", type=int, default=None,
                       help="the block the contracts were deployed in (default: the deployment file's, or 0)")
        p.add_argument("--poa", action="store_true", help="the node is a QBFT/IBFT2 network (Besu)")
        p.add_argument("--ipfs", metavar="URL", default=None,
                       help="a Kubo RPC API to read model names from (default: this site's IPFS settings)")
        p.add_argument("--skip-style", action="store_true",
                       help="do not read the voted answers' evidence from IPFS: the style-controlled arena columns "
                            "are then not checked (the plain arena columns always are, from the events alone)")
        p.add_argument("--json", dest="as_json", action="store_true", help="print the whole report as JSON")
        sub.add_parser("rebuild", help="recompute every board entry and every board's arena from the indexed tables")
        a = sub.add_parser("arena", help="refit the arena of every board whose votes changed (what the indexer's "
                                         "process does after its commit unless LLMCHAIN_ARENA_REFIT=worker)")
        a.add_argument("--follow", action="store_true", help="keep refitting as votes are indexed (a worker)")

    def handle(self, *args, action, **opts):
        return getattr(self, f"do_{action}")(**opts)

    def do_arena(self, follow=False, **_):
        if not follow:
            refitted = arena_entries.refresh_stale()
            self.stdout.write(f"refitted the arena of {len(refitted)} board{'' if len(refitted) == 1 else 's'}")
            return
        self.stdout.write("arena worker: refitting the boards whose votes changed (Ctrl-C stops it)")
        run_worker(arena_entries.refresh_stale, idle_sleep=1.0, name="arena", say=self.stderr.write)

    def do_rebuild(self, **_):
        self.stdout.write(f"rebuilt {entries.rebuild()} board entries")
        self.stdout.write(f"refitted the arena of {arena_entries.rebuild()} boards")

    # -- verify -----------------------------------------------------------------------------------
    def do_verify(self, context="all", served=None, rpc=None, reputation=None, identity=None, from_block=None,
                  poa=False, ipfs=None, as_json=False, skip_style=False, **_):
        context_ids = self._contexts(context)
        for name, url in (("--served", served), ("--rpc", rpc), ("--ipfs", ipfs)):
            if url is not None and urlparse(url).scheme not in ("http", "https"):
                raise usage(f"{name} must be an http(s) URL, not {url!r}")
        for name, url in (("--served", served), ("--ipfs", ipfs)):  # hosts named by whoever runs this
            try:
                if url is not None:
                    outbound.check_url(url, settings.LLMCHAIN_OUTBOUND_ALLOW, endpoint=True)
            except outbound.OutboundError as exc:
                raise usage(f"{name}: {exc}") from exc
        for name, address in (("--reputation", reputation), ("--identity", identity)):
            if address is not None and not is_address(address):
                raise usage(f"{name} must be a 0x-prefixed 20-byte address, not {address!r}")
        if identity and not reputation:
            raise usage("--identity needs --reputation too")
        if from_block is not None and from_block < 0:
            raise usage("--from-block must be 0 or more")
        source = RemoteSite(served) if served else SiteBoards()
        reader = CidReader(None, KuboClient(ipfs, timeout=10, retries=1)) if ipfs else default_reader()
        try:
            ledger = self._ledger(rpc, reputation, identity, from_block, poa)
            # This site's table is built from the chain's final blocks up to the indexer's cursor: it is
            # compared with the chain at that block, and checked again if the indexer folded meanwhile.
            cursor = cursor_name(ledger) if isinstance(source, SiteBoards) else None
            for _ in range(3):
                at = self._indexed(cursor)
                chain = rebuild_from_chain(ledger, reader, to_block=at, style=not skip_style)
                if context_ids is not None:
                    for c in context_ids:
                        if c not in chain.contexts and source.board(c).context_name is None:
                            raise usage(f"no context {c} on the chain nor on the served site")
                reports = verify_boards(chain, source, context_ids)
                if self._indexed(cursor) == at:
                    break
        except (ChainError, VerifyError, FileNotFoundError) as exc:
            raise CommandError(str(exc), returncode=USAGE) from exc
        ok = all(r.ok for r in reports)
        if as_json:
            self.stdout.write(self._json(chain, source, reports, ok, ledger))
        else:
            for report in reports:
                self._table(report, chain.columns)
            self._summary(chain, source, reports, ok, ledger)
        if not ok:
            sys.exit(1)

    @staticmethod
    def _indexed(cursor: str | None) -> int | None:
        """The block the site's board table is at (None: the chain's head, for another site's boards)."""
        if cursor is None:
            return None
        return IndexerCursor.objects.filter(name=cursor).values_list("last_block", flat=True).first()

    @staticmethod
    def _contexts(context: str) -> list[str] | None:
        if context == "all":
            return None
        if context == "global":
            return [GLOBAL_CONTEXT_ID]
        try:
            return [boards.parse_context_id(context)]
        except boards.BoardError as exc:
            raise usage(f"--context: {exc} (or 'global', or 'all')") from exc

    @staticmethod
    def _ledger(rpc, reputation, identity, from_block, poa) -> Ledger:
        if reputation:
            return visitor_ledger(rpc or settings.LLMCHAIN_RPC_URL, reputation, identity, from_block or 0,
                                  poa=poa or settings.LLMCHAIN_POA)
        if rpc is None and from_block is None and not poa:
            return default_ledger()
        deployment = Deployment.load(settings.LLMCHAIN_DEPLOYMENT)
        if from_block is not None:
            deployment = Deployment(deployment.chainId, deployment.identity, deployment.access,
                                    deployment.reputation, from_block)
        return Ledger(ChainClient(rpc or settings.LLMCHAIN_RPC_URL, poa=poa or settings.LLMCHAIN_POA), deployment)

    def _table(self, report, columns) -> None:
        w = self.stdout.write
        w(f"== {printable(report.title)}  {report.context_id}")
        if report.served_name is None:
            w("   the served site has no board for this context")
        if report.chain_name is None:
            w("   the chain has no such context")
        elif not report.name_equal and report.served_name is not None:
            w(f" * context name: served {printable(report.served_name)!r}, chain {printable(report.chain_name)!r}")
        if report.rows:
            header = ["model", "side"] + [label for _, label in columns]
            lines = []
            for row in report.rows:
                for side in ("served", "chain"):
                    texts = [printable(c.served_text if side == "served" else c.chain_text) for c in row.cells]
                    marks = ["*" if not c.equal else " " for c in row.cells]
                    lines.append([row.short_id if side == "served" else "", side]
                                 + [m + t for m, t in zip(marks, texts)])
            widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
            w("  ".join(h.ljust(n) for h, n in zip(header, widths)).rstrip())
            for line in lines:
                w("  ".join(str(x).ljust(n) for x, n in zip(line, widths)).rstrip())
        if report.figures:
            w("   how far the automatic score agrees with people here (served / rebuilt from the chain):")
            for f in report.figures:
                w(f" {' ' if f.equal else '*'}   {f.label}: {printable(f.served_text)} / {printable(f.chain_text)}")
        for sentence in report.named:
            w(f" * {printable(sentence)}")
        for issue in report.issues:
            w(f" * state: {issue.text}")
        for note in report.notes:
            w(f"   {note}")
        w(("   " if report.ok else " * ") + printable(report.verdict))
        w("")

    def _summary(self, chain, source, reports, ok, ledger) -> None:
        cells = sum(r.cells_checked for r in reports)
        differing = sum(r.cells_differing for r in reports)
        models = sum(r.models for r in reports)
        where = (f"{source.label} against chain {chain.chain_id} ({ledger.client.url}), Reputation {chain.reputation}, "
                 f"blocks {chain.from_block}..{chain.head}, {chain.events} events"
                 + (f", lambda {chain.lambda_wad / 10**18:g} per minute" if chain.lambda_wad else ""))
        self.stdout.write(where)
        if chain.style_checked:
            arena = (f"arena: {chain.counted_votes} counted votes from BattleOpened/Voted; style-controlled columns "
                     f"checked from {len(chain.answers)} answers read from IPFS")
            if chain.answers_unreadable:
                arena += f" ({chain.answers_unreadable} answers' evidence could not be read: their votes are left out)"
        else:
            arena = (f"arena: {chain.counted_votes} counted votes from BattleOpened/Voted; style-controlled columns "
                     f"NOT checked (--skip-style)")
        self.stdout.write(arena)
        if ok:
            self.stdout.write(f"OK: {len(reports)} boards match the chain: {models} rows, {cells} cells checked.")
        else:
            bad = sum(not r.ok for r in reports)
            text = f"MISMATCH: {differing} of {cells} cells differ in {bad} of {len(reports)} boards"
            issues = sum(len(r.issues) for r in reports)
            if issues:
                text += f"; the contract's state disagrees with its events in {issues} places"
            self.stdout.write(text + " (* marks them).")

    @staticmethod
    def _json(chain, source, reports, ok, ledger) -> str:
        return json.dumps({
            "ok": ok, "served": source.label,
            "chain": {"chain_id": chain.chain_id, "rpc": ledger.client.url, "reputation": chain.reputation,
                      "from_block": chain.from_block, "head": chain.head, "events": chain.events,
                      "lambda_wad": chain.lambda_wad, "arena_votes": chain.counted_votes,
                      "style_checked": chain.style_checked, "answers_read": len(chain.answers),
                      "answers_unreadable": chain.answers_unreadable,
                      "state_issues": [{"context_id": i.context_id, "model_id": i.model_id, "text": i.text}
                                       for i in chain.issues]},
            "boards": [r.to_dict() for r in reports]}, indent=2)
