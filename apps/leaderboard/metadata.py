"""A model's metadata record, read through the evidence store and so checked against its CID."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from apps.chain.evidence import EvidenceCorrupt, EvidenceMissing, default_store
from apps.chain.ipfs import IpfsError
from lib import records
from lib.cid import CidError, normalize

log = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 5


@dataclass(frozen=True)
class Metadata:
    """The model's latest metadata record, or why it cannot be shown."""

    cid: str  # as on-chain (untrusted text)
    link_cid: str = ""  # the normalized CID when it is one, for /evidence/<cid>/
    record: dict | None = None  # set only when the bytes matched the CID and parsed as model metadata
    problem: str = ""

    @property
    def verified(self) -> bool:
        return self.record is not None


def link_cid(cid: str) -> str:
    """The normalized CID, or "" when the text is not one (chain data is untrusted)."""
    try:
        return normalize(cid)
    except CidError:
        return ""


def read_metadata(cid: str, store=None) -> Metadata:
    """The record under `cid`, verified against it by the store; never raises for a bad or absent blob."""
    link = link_cid(cid)
    if not link:
        return Metadata(cid=cid, problem="The metadata CID recorded on-chain is not a CID this site can read.")
    try:
        data = (store or default_store()).get(link, timeout=METADATA_TIMEOUT_S)
    except EvidenceMissing:
        return Metadata(cid=cid, link_cid=link, problem="No store this site reaches holds this CID, so the "
                                                        "metadata could not be read.")
    except EvidenceCorrupt:
        return Metadata(cid=cid, link_cid=link, problem="The stored bytes do not match this CID; they were refused, "
                                                        "so the metadata could not be verified.")
    except (IpfsError, OSError) as exc:
        log.warning("metadata %s unreadable: %s", link, exc)
        return Metadata(cid=cid, link_cid=link, problem="The IPFS node could not be reached, so the metadata "
                                                        "could not be read; try again later.")
    try:
        record = records.parse(data)
    except records.RecordError as exc:
        return Metadata(cid=cid, link_cid=link, problem=f"The bytes match the CID but are not a valid metadata "
                                                        f"record: {exc}")
    if record["schema"] != records.MODEL_SCHEMA:
        return Metadata(cid=cid, link_cid=link, problem=f"The bytes match the CID but are a {record['schema']} "
                                                        f"record, not model metadata.")
    return Metadata(cid=cid, link_cid=link, record=record)
