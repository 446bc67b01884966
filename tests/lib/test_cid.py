import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multiformats import CID

from lib import cid as cids

# Known answers from Kubo (`ipfs add --cid-version=1 --raw-leaves`): the empty file and "hello".
EMPTY = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"


def test_the_empty_file_has_kubos_well_known_cid():
    assert cids.cid_for(b"") == EMPTY


@given(st.binary(max_size=4096))
def test_a_cid_is_cidv1_raw_sha256_in_base32_of_the_bytes(data):
    cid = cids.cid_for(data)
    decoded = CID.decode(cid)
    assert cid.startswith("bafkrei")
    assert (decoded.version, decoded.codec.name, decoded.hashfun.name) == (1, "raw", "sha2-256")
    assert decoded.raw_digest == hashlib.sha256(data).digest()
    assert cids.matches(cid, data)
    assert not cids.matches(cid, data + b"!")


def test_one_full_chunk_is_accepted_and_one_byte_more_is_refused():
    assert cids.cid_for(b"x" * cids.CHUNK_SIZE)
    with pytest.raises(cids.TooLarge, match="more than one IPFS chunk"):
        cids.cid_for(b"x" * (cids.CHUNK_SIZE + 1))


def test_other_spellings_of_the_same_cid_normalize_to_base32():
    cid = cids.cid_for(b"hello")
    base58 = str(CID.decode(cid).set(base="base58btc"))
    assert base58 != cid
    assert cids.normalize(base58) == cid
    assert cids.normalize(f"  {cid} ") == cid


@pytest.mark.parametrize("text, message", [
    ("", "required"),
    ("not-a-cid", "not a CID"),
    ("QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG", "dag-pb"),  # a CIDv0 directory root
    ("bafyreigbtj4x7ip5legnfznufuopl4sg4knzc2cof6duas4b3q2fy6swua", "dag-cbor"),
])
def test_cids_this_store_cannot_hold_are_refused_clearly(text, message):
    with pytest.raises(cids.CidError, match=message):
        cids.parse(text)
