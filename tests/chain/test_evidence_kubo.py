"""The evidence store against a real IPFS node (js-ipfs speaking the Kubo RPC API), started here."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from apps.chain.evidence import EvidenceCorrupt, EvidenceMissing, EvidenceStore, LocalBlobStore
from apps.chain.ipfs import IpfsCorrupt, IpfsUnavailable, KuboClient
from apps.chain.ipfs_node import IpfsNode, ipfs_available
from apps.chain.models import EvidencePin
from lib.cid import CHUNK_SIZE, cid_for

from .conftest import database_url

pytestmark = [pytest.mark.skipif(not ipfs_available(), reason="js-ipfs is not installed (run `npm install`)"),
              pytest.mark.django_db]

REPO = Path(__file__).resolve().parents[2]


def blob(size: int, seed: int = 0) -> bytes:
    return random.Random(size * 7919 + seed).randbytes(size)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    path = tmp_path_factory.mktemp("ipfs")
    ipfs = IpfsNode(repo=path / "repo", log_file=path / "ipfs.log")
    ipfs.start()
    yield ipfs
    ipfs.stop()


@pytest.fixture
def kubo(node):
    client = KuboClient(node.url, timeout=5, retries=1, backoff=0.1)
    yield client
    client.close()


@pytest.fixture
def store(kubo, tmp_path):
    return EvidenceStore(LocalBlobStore(tmp_path / "blobs"), kubo)


@pytest.mark.parametrize("size", [0, 1, 1000, 65536, CHUNK_SIZE - 1, CHUNK_SIZE])
def test_the_local_store_and_the_node_give_the_same_cid(kubo, tmp_path, size):
    data = blob(size)
    local = LocalBlobStore(tmp_path / "blobs").put(data)
    assert kubo.add(data) == local == cid_for(data)
    assert kubo.cat(local) == data


def test_a_put_is_pinned_on_the_node_through_the_outbox(store, kubo):
    data = blob(5000)
    cid = store.put(data)
    pin = EvidencePin.objects.get(cid=cid)
    assert pin.status == "pending" and bytes(pin.data) == data
    assert store.pin_pending() == {"pinned": 1, "deferred": 0, "failed": 0}
    pin.refresh_from_db()
    assert pin.status == "pinned" and pin.data is None and pin.pinned_at
    store.local.path(cid).unlink()  # the node alone holds it now
    assert store.get(cid) == data
    assert store.local.has(cid)  # a verified copy is kept for later reads


def test_a_cid_no_store_holds_is_missing_after_the_timeout(store):
    started = time.monotonic()
    with pytest.raises(EvidenceMissing, match="not found on the IPFS node"):
        store.get(cid_for(os.urandom(40)), timeout=1.5)
    assert time.monotonic() - started < 6


def test_an_outage_mid_run_delays_pins_and_loses_nothing(node, store):
    blobs = [blob(3000, seed) for seed in range(12)]
    cids = []
    for i, data in enumerate(blobs):
        if i == 4:
            node.stop()  # the node goes down in the middle of the run
        cids.append(store.put(data))  # the CID is known at once, whatever the node does
        counts = store.pin_pending()
        if i >= 4:
            assert counts["pinned"] == 0
    waiting = EvidencePin.objects.filter(status="pending")
    assert waiting.count() == 8
    assert all(p.attempts >= 1 and "unreachable" in p.last_error for p in waiting.filter(attempts__gte=1))
    # Reads keep working during the outage: from disk, or from the pin row when the disk lost it.
    store.local.path(cids[10]).unlink()
    assert store.get(cids[10]) == blobs[10]
    node.start()
    EvidencePin.objects.update(next_attempt_at=EvidencePin.objects.first().created_at)  # backoff elapsed
    deadline = time.monotonic() + 30
    while EvidencePin.objects.filter(status="pending").exists() and time.monotonic() < deadline:
        store.pin_pending()
    assert EvidencePin.objects.filter(status="pinned").count() == 12
    for cid, data in zip(cids, blobs):
        assert store.kubo.cat(cid) == data  # every blob is on the node, exactly once each
    assert EvidencePin.objects.count() == len(set(cids))


def test_putting_the_same_evidence_twice_queues_one_pin(store):
    assert store.put(b"same bytes") == store.put(b"same bytes")
    assert EvidencePin.objects.filter(cid=cid_for(b"same bytes")).count() == 1


class _LyingNode(BaseHTTPRequestHandler):
    """A Kubo RPC endpoint that hands back other bytes than asked for, and stores under wrong CIDs."""

    def do_POST(self):  # noqa: N802
        if self.path.startswith("/api/v0/cat"):
            body = b"forged evidence"
        elif self.path.startswith("/api/v0/add"):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = ('{"Name":"blob","Hash":"%s","Size":3}' % cid_for(b"something else")).encode()
        else:
            body = b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def liar():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LyingNode)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_node_that_hands_back_other_bytes_is_refused(liar, tmp_path):
    client = KuboClient(liar, timeout=3)
    with pytest.raises(IpfsCorrupt, match="not .*bafk"):
        client.cat(cid_for(b"the genuine record"))
    with pytest.raises(IpfsCorrupt, match="stored the bytes as"):
        client.add(b"the genuine record")
    store = EvidenceStore(LocalBlobStore(tmp_path / "blobs"), client)
    with pytest.raises(EvidenceCorrupt):
        store.get(cid_for(b"the genuine record"))
    cid = store.put(b"the genuine record")
    assert store.pin_pending()["failed"] == 1
    assert "stored the bytes as" in EvidencePin.objects.get(cid=cid).last_error


def test_a_node_that_is_down_is_a_typed_retryable_error():
    client = KuboClient("http://127.0.0.1:9", timeout=1, retries=1, backoff=0.05)
    with pytest.raises(IpfsUnavailable) as err:
        client.add(b"x")
    assert not err.value.permanent


@pytest.mark.django_db(transaction=True)
def test_the_evidence_command_reads_through_the_node(node, kubo, tmp_path):
    data = blob(777)
    cid = kubo.add(data)
    env = {**os.environ, "DATABASE_URL": database_url(), "LLMCHAIN_IPFS_BACKEND": "kubo", "LLMCHAIN_IPFS_API_URL": node.url,
           "LLMCHAIN_IPFS_DIR": str(tmp_path / "empty")}
    got = subprocess.run([sys.executable, "manage.py", "evidence", "get", cid, "--timeout", "5"], cwd=REPO,
                         env=env, capture_output=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout == data
