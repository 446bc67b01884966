"""The local evidence store: content-addressed, verified on every read."""

import pytest

from apps.chain.evidence import EvidenceCorrupt, EvidenceMissing, LocalBlobStore, default_store
from lib.cid import CHUNK_SIZE, TooLarge, cid_for


@pytest.fixture
def store(settings, tmp_path):
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    return default_store()


@pytest.mark.parametrize("size", [0, 1, 1000, 65536, CHUNK_SIZE])
def test_put_returns_the_cid_and_get_returns_the_same_bytes(store, size):
    data = bytes(i % 251 for i in range(size))
    cid = store.put(data)
    assert cid == cid_for(data)
    assert store.get(cid) == data


def test_putting_the_same_bytes_twice_is_one_blob(store, tmp_path):
    assert store.put(b"same") == store.put(b"same")
    assert len([p for p in (tmp_path / "ipfs").rglob("*") if p.is_file()]) == 1


@pytest.mark.django_db
def test_a_blob_larger_than_one_chunk_is_refused_and_nothing_is_written(store, tmp_path):
    with pytest.raises(TooLarge, match="more than one IPFS chunk"):
        store.put(b"x" * (CHUNK_SIZE + 1))
    assert not (tmp_path / "ipfs").exists() or not any((tmp_path / "ipfs").rglob("*"))


@pytest.mark.django_db
def test_a_missing_cid_is_a_clear_error(store):
    with pytest.raises(EvidenceMissing, match="not in the local store"):
        store.get(cid_for(b"never stored"))


def test_a_tampered_blob_is_refused_not_returned(store):
    cid = store.put(b"the real evidence")
    LocalBlobStore(store.local.root).path(cid).write_bytes(b"forged evidence")
    with pytest.raises(EvidenceCorrupt, match="corrupt"):
        store.get(cid)


def test_a_crash_mid_write_leaves_no_partial_blob(store, monkeypatch):
    import os

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        store.put(b"half written")
    monkeypatch.undo()
    assert not store.local.has(cid_for(b"half written"))
    assert not [p for p in store.local.root.rglob("*") if p.is_file()]
