"""Content identifiers exactly as a Kubo node makes them for one-chunk raw blocks.

`ipfs add --cid-version=1 --raw-leaves` stores a file of at most one chunk (256 KiB with the
default chunker) as a single raw block, so its CID is CIDv1(raw, sha2-256(bytes)) in base32.
A larger file becomes a UnixFS DAG whose root CID depends on the chunker and layout; the
evidence store refuses such blobs instead of guessing that layout.
"""

from __future__ import annotations

import hashlib

from multiformats import CID, multihash

CHUNK_SIZE = 262_144  # Kubo's default chunker: size-262144


class CidError(ValueError):
    """A string that is not a CID this store can hold."""


class TooLarge(ValueError):
    """Bytes larger than one chunk: their Kubo CID would be a DAG root, not a raw block."""

    def __init__(self, size: int):
        super().__init__(f"{size} bytes is more than one IPFS chunk ({CHUNK_SIZE} bytes); "
                         "split the record or store it elsewhere")
        self.size = size


def cid_for(data: bytes) -> str:
    """The base32 CIDv1 (raw, sha2-256) of `data`, equal to Kubo's for the same bytes."""
    if len(data) > CHUNK_SIZE:
        raise TooLarge(len(data))
    return str(CID("base32", 1, "raw", multihash.digest(bytes(data), "sha2-256")))


def parse(text: str) -> CID:
    """Decode a CID and insist on the kind this store makes (raw, sha2-256)."""
    if not isinstance(text, str) or not text.strip():
        raise CidError("a CID is required")
    try:
        cid = CID.decode(text.strip())
    except Exception as exc:  # the library raises several error types for bad input
        raise CidError(f"not a CID: {text[:80]!r}") from exc
    if cid.codec.name != "raw" or cid.hashfun.name != "sha2-256":
        raise CidError(f"{text[:80]} is a {cid.codec.name}/{cid.hashfun.name} CID; "
                       "this store holds raw sha2-256 blocks only")
    return cid


def normalize(text: str) -> str:
    """The canonical base32 CIDv1 spelling of a raw sha2-256 CID (accepts CIDv0-free input)."""
    return str(parse(text).set(base="base32", version=1))


def matches(cid: str, data: bytes) -> bool:
    """True when `data` is the content `cid` names."""
    return hashlib.sha256(data).digest() == parse(cid).raw_digest
