"""python manage.py evidence {put FILE, get CID, pin, status}"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from lib.cid import CidError, TooLarge

from ...evidence import EvidenceCorrupt, EvidenceMissing, default_store
from ...ipfs import IpfsError
from ...ipfs_node import IpfsNode, ipfs_available
from ...models import EvidencePin
from ...work import run_worker


class Command(BaseCommand):
    help = "Put and get content-addressed evidence; copy queued blobs to the IPFS node."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("put", help="store FILE (or - for stdin); prints its CID")
        p.add_argument("file")
        p = sub.add_parser("get", help="write the verified bytes of CID to stdout")
        p.add_argument("cid")
        p.add_argument("--timeout", type=float, default=None, help="seconds to wait for the IPFS node")
        p = sub.add_parser("pin", help="copy queued blobs to the IPFS node and pin them")
        p.add_argument("--follow", action="store_true", help="keep running (Ctrl-C or SIGTERM stops)")
        sub.add_parser("status", help="pin outbox counts by status")
        p = sub.add_parser("node", help="run a local js-ipfs node (Kubo RPC API) until Ctrl-C")
        p.add_argument("--port", type=int, default=5001)
        p.add_argument("--repo", type=Path, default=None, help="repo folder (default: var/ipfs-node)")

    def handle(self, *args, action, **opts):
        return getattr(self, f"do_{action}")(**opts)

    def do_put(self, file, **_):
        try:
            data = sys.stdin.buffer.read() if file == "-" else open(file, "rb").read()
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror}") from exc
        try:
            cid = default_store().put(data)
        except TooLarge as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(cid)

    def do_get(self, cid, timeout=None, **_):
        try:
            data = default_store().get(cid, timeout=timeout)
        except CidError as exc:
            raise CommandError(str(exc)) from exc
        except EvidenceMissing as exc:
            raise CommandError(f"missing: {exc}") from exc
        except EvidenceCorrupt as exc:
            raise CommandError(f"corrupt: {exc}") from exc
        except IpfsError as exc:
            raise CommandError(f"IPFS node error: {exc}") from exc
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    def do_pin(self, follow=False, **_):
        store = default_store()
        if store.kubo is None:
            raise CommandError("LLMCHAIN_IPFS_BACKEND is 'local': there is no IPFS node to pin to")
        totals = {"pinned": 0, "deferred": 0, "failed": 0}
        last: dict = {}

        def pin() -> bool:
            last.update(store.pin_pending())
            for k, v in last.items():
                totals[k] += v
            return any(last.values())

        # Without --follow: until nothing is left, or the node defers a pin (it is down: try later).
        run_worker(pin, idle_sleep=0.5, until=lambda: not follow and (not any(last.values()) or last["deferred"]),
                   name="IPFS node")
        totals["waiting"] = store.pins_waiting()
        self.stdout.write(json.dumps(totals))

    def do_node(self, port=5001, repo=None, **_):
        if not ipfs_available():
            raise CommandError("js-ipfs is not installed: run `npm install` in the project folder")
        node = IpfsNode(repo=repo or settings.VAR_DIR / "ipfs-node", api_port=port,
                        log_file=settings.VAR_DIR / "ipfs-node.log")
        node.start()
        self.stdout.write(f"IPFS node (Kubo RPC API) at {node.url}; set LLMCHAIN_IPFS_BACKEND=kubo "
                          f"LLMCHAIN_IPFS_API_URL={node.url} to use it")
        try:
            run_worker(lambda: None, idle_sleep=0.5, until=lambda: not node.is_up(), name="IPFS node")
        finally:
            node.stop()

    def do_status(self, **_):
        counts = {s: EvidencePin.objects.filter(status=s).count() for s in EvidencePin.Status.values}
        self.stdout.write(json.dumps(counts))
