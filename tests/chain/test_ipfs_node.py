"""The offline js-ipfs node (apps/chain/ipfs_node.py) and the Kubo RPC behaviours the IPFS adapter
relies on: CIDs that match a local computation, cat/pin, and bounded answers for unknown CIDs."""

from __future__ import annotations

import os
import random
import time

import httpx
import pytest
from multiformats import CID, multihash

from apps.chain.ipfs_node import IpfsNode, free_port, ipfs_available

pytestmark = pytest.mark.skipif(
    not ipfs_available(), reason="js-ipfs is not installed (node_modules/ipfs-daemon missing: run `npm ci`)")

CHUNK = 262144  # js-ipfs's default chunker (size-262144): one raw block up to this size
ADD = {"cid-version": 1, "raw-leaves": "true", "pin": "true", "cid-base": "base32"}


def raw_cid(data: bytes) -> str:
    return str(CID("base32", 1, "raw", multihash.digest(data, "sha2-256")))


def blob(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def unknown_cid() -> str:
    return raw_cid(os.urandom(32))


def add(client: httpx.Client, data: bytes, **params) -> dict:
    query = {k: v for k, v in {**ADD, **params}.items() if v is not None}
    resp = client.post("/api/v0/add", params=query, files={"file": ("evidence.json", data)})
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.fixture(scope="module")
def ipfs(tmp_path_factory):
    path = tmp_path_factory.mktemp("ipfs")
    node = IpfsNode(repo=path / "repo", gateway_port=0, log_file=path / "ipfs.log")
    node.start()
    yield node
    node.stop()


@pytest.fixture
def api(ipfs):
    with httpx.Client(base_url=ipfs.url, timeout=30) as client:
        yield client


def test_node_starts_fast_and_answers_id_and_version(ipfs, api):
    assert ipfs.start_seconds is not None and ipfs.start_seconds < 30
    ident = api.post("/api/v0/id").json()
    assert ident["ID"].startswith("12D3KooW") and ident["Addresses"] == []  # no swarm listener
    assert ident["AgentVersion"] == "js-ipfs/0.18.1"  # ipfs-core's version, not the npm `ipfs` 0.66.1
    assert api.post("/api/v0/version").json()["Version"] == "0.18.1"
    assert api.post("/api/v0/swarm/peers").json() == {"Peers": []}


def test_rpc_is_post_only(api):
    resp = api.get("/api/v0/version")
    assert resp.status_code == 405
    assert resp.json() == {"Message": "Method Not Allowed", "Code": 1, "Type": "error"}


@pytest.mark.parametrize("size", [0, 1, 1000, 65536, CHUNK - 1, CHUNK])
def test_add_gives_the_locally_computed_raw_cid(api, size):
    data = blob(size)
    out = add(api, data)
    assert out == {"Name": "evidence.json", "Hash": raw_cid(data), "Size": size}  # Size: a number, not a string
    assert CID.decode(out["Hash"]).codec.name == "raw"


def test_add_above_the_chunk_limit_gives_a_dag_pb_root(api):
    data = blob(CHUNK + 1)
    out = add(api, data)
    cid = CID.decode(out["Hash"])
    assert out["Hash"] != raw_cid(data)
    assert (cid.version, cid.codec.name, cid.hashfun.name) == (1, "dag-pb", "sha2-256")
    assert out["Hash"].startswith("bafybei")
    assert out["Size"] > CHUNK + 1 and out["Mode"] == "0644"  # cumulative DAG size; Mode only on dag-pb roots
    assert api.post("/api/v0/cat", params={"arg": out["Hash"], "timeout": "10s"}).content == data


def test_add_without_cid_base_answers_base58btc(api):
    """js-ipfs quirk: a CIDv1 comes back as base58btc (zb2...) unless cid-base=base32 is passed."""
    data = b"quirk"
    out = add(api, data, **{"cid-base": None})
    assert out["Hash"].startswith("zb2")
    assert CID.decode(out["Hash"]).set(base="base32") == CID.decode(raw_cid(data))


def test_add_only_hash_stores_nothing(api):
    data = os.urandom(64)
    assert add(api, data, **{"only-hash": "true", "pin": "false"})["Hash"] == raw_cid(data)
    resp = api.post("/api/v0/cat", params={"arg": raw_cid(data), "timeout": "300ms"})
    assert resp.status_code == 500


def test_cat_returns_the_bytes(api):
    data = blob(1000)
    cid = add(api, data)["Hash"]
    resp = api.post("/api/v0/cat", params={"arg": cid, "timeout": "5s"})
    assert resp.status_code == 200 and resp.content == data


def test_cat_of_an_unknown_cid_with_a_timeout_answers_500(api):
    t0 = time.monotonic()
    resp = api.post("/api/v0/cat", params={"arg": unknown_cid(), "timeout": "1s"})
    elapsed = time.monotonic() - t0
    assert resp.status_code == 500
    assert resp.json() == {"Message": "Failed to cat file: request timed out", "Code": 0, "Type": "error"}
    assert 0.9 < elapsed < 5


def test_a_timeout_without_unit_is_milliseconds(api):
    """`timeout=1` means 1 ms to js-ipfs (parse-duration); Kubo wants a unit: always send one ("5s")."""
    t0 = time.monotonic()
    resp = api.post("/api/v0/cat", params={"arg": unknown_cid(), "timeout": "1"})
    assert resp.status_code == 500 and time.monotonic() - t0 < 0.5


def test_cat_of_an_unknown_cid_without_timeout_hangs_until_the_client_gives_up(api):
    t0 = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        api.post("/api/v0/cat", params={"arg": unknown_cid()}, timeout=1)
    assert time.monotonic() - t0 < 5
    assert api.post("/api/v0/id").status_code == 200  # the node is still fine


def test_bad_cid_answers_400(api):
    resp = api.post("/api/v0/cat", params={"arg": "not-a-cid", "timeout": "1s"})
    assert resp.status_code == 400
    assert resp.json() == {"Message": "Invalid request query input", "Code": 1, "Type": "error"}


def test_pin_add(api):
    data = os.urandom(100)
    cid = add(api, data, pin="false")["Hash"]
    resp = api.post("/api/v0/pin/add", params={"arg": cid, "cid-base": "base32"})
    assert resp.status_code == 200 and resp.json() == {"Pins": [cid]}
    listed = api.post("/api/v0/pin/ls", params={"arg": cid, "cid-base": "base32"}).json()
    assert listed == {"Keys": {cid: {"Type": "recursive"}}}
    resp = api.post("/api/v0/pin/add", params={"arg": unknown_cid(), "timeout": "500ms"})
    assert resp.status_code == 500
    assert resp.json()["Message"] == "Failed to add pin: request timed out"


def test_gateway_serves_added_content(ipfs, api):
    data = blob(1000)
    cid = add(api, data)["Hash"]
    resp = httpx.get(f"{ipfs.gateway_url}/ipfs/{cid}", timeout=10)
    assert resp.status_code == 200 and resp.content == data


def test_a_daemon_that_is_down_refuses_the_connection():
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"http://127.0.0.1:{free_port()}/api/v0/id", timeout=5)


def test_restart_on_the_same_repo_keeps_content(tmp_path):
    node = IpfsNode(repo=tmp_path / "repo", log_file=tmp_path / "ipfs.log")
    data = os.urandom(5000)
    with node:
        cid = httpx.post(f"{node.url}/api/v0/add", params=ADD, files={"file": ("e.json", data)}).json()["Hash"]
    assert not (node.repo / "repo.lock").exists()  # SIGTERM released the lock
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{node.url}/api/v0/id")
    node.start()  # same repo, same port
    assert httpx.post(f"{node.url}/api/v0/cat", params={"arg": cid, "timeout": "5s"}).content == data
    with pytest.raises(Exception, match="in use"):
        IpfsNode(repo=node.repo).start()  # a second node on a repo in use is refused
    node.kill()  # a crash leaves repo.lock behind; the next start clears it
    assert (node.repo / "repo.lock").exists()
    node.start()
    try:
        assert httpx.post(f"{node.url}/api/v0/cat", params={"arg": cid, "timeout": "5s"}).content == data
        pins = httpx.post(f"{node.url}/api/v0/pin/ls", params={"cid-base": "base32"}).json()["Keys"]
        assert pins == {cid: {"Type": "recursive"}}  # empty repo: no help files pinned at init
    finally:
        node.stop()
