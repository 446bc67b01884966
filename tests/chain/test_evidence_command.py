"""`manage.py evidence put/get` as an operator uses it, in a separate process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lib.cid import CHUNK_SIZE, cid_for

REPO = Path(__file__).resolve().parents[2]


def manage(tmp_path, *args, stdin=None):
    env = {**os.environ, "LLMCHAIN_IPFS_BACKEND": "local", "LLMCHAIN_IPFS_DIR": str(tmp_path / "ipfs"),
           "DJANGO_SETTINGS_MODULE": "llmchain_site.settings"}
    return subprocess.run([sys.executable, "manage.py", "evidence", *args], cwd=REPO, env=env,
                          input=stdin, capture_output=True, timeout=60)


def test_put_prints_the_cid_and_get_writes_the_exact_bytes(tmp_path):
    data = bytes(range(256)) * 7
    f = tmp_path / "blob.bin"
    f.write_bytes(data)
    put = manage(tmp_path, "put", str(f))
    assert put.returncode == 0, put.stderr
    assert put.stdout.decode().strip() == cid_for(data)
    got = manage(tmp_path, "get", cid_for(data))
    assert got.returncode == 0 and got.stdout == data


def test_put_reads_stdin(tmp_path):
    put = manage(tmp_path, "put", "-", stdin=b"from a pipe")
    assert put.stdout.decode().strip() == cid_for(b"from a pipe")


def test_get_of_a_missing_cid_fails_with_a_message(tmp_path):
    got = manage(tmp_path, "get", cid_for(b"absent"))
    assert got.returncode != 0 and got.stdout == b""
    assert b"missing" in got.stderr


def test_get_of_a_corrupt_blob_fails_and_prints_nothing_of_it(tmp_path):
    cid = manage(tmp_path, "put", "-", stdin=b"original").stdout.decode().strip()
    blob = next(p for p in (tmp_path / "ipfs").rglob(cid))
    blob.write_bytes(b"forgery")
    got = manage(tmp_path, "get", cid)
    assert got.returncode != 0 and got.stdout == b""
    assert b"corrupt" in got.stderr


@pytest.mark.parametrize("args, message", [
    (("get", "not-a-cid"), b"not a CID"),
    (("put", "/nonexistent/file"), b"cannot read"),
])
def test_bad_arguments_get_clear_errors(tmp_path, args, message):
    result = manage(tmp_path, *args)
    assert result.returncode != 0 and message in result.stderr


def test_a_file_larger_than_one_chunk_is_refused(tmp_path):
    f = tmp_path / "big.bin"
    f.write_bytes(b"z" * (CHUNK_SIZE + 1))
    result = manage(tmp_path, "put", str(f))
    assert result.returncode != 0 and b"more than one IPFS chunk" in result.stderr
    assert not (tmp_path / "ipfs").exists() or not any(p.is_file() for p in (tmp_path / "ipfs").rglob("*"))
