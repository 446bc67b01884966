"""The evidence store: content-addressed blobs (model metadata, interaction evidence).

`put` returns the CID at once, computed locally exactly as Kubo would; the bytes are kept on
disk, and with the Kubo backend a pin row (the outbox of evidence) carries them to the IPFS
node, so an outage of the node delays the copy and loses nothing. `get` always checks the
bytes against the CID: a store that hands back something else is an error.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lib import cid as cids
from lib import outbound, records

from . import work
from .ipfs import IpfsCorrupt, IpfsError, IpfsNotFound, KuboClient
from .models import EvidencePin

PIN_BACKOFF_MAX_S = 300
ANSWER_TIMEOUT_S = 5  # an evidence record's answer, from the IPFS node

log = logging.getLogger(__name__)


class EvidenceMissing(LookupError):
    """No store holds the content of this CID."""


class EvidenceCorrupt(ValueError):
    """A store holds bytes under this CID that are not its content."""


class LocalBlobStore:
    """Blobs on disk, one file per CID, written atomically."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, cid: str) -> Path:
        cid = cids.normalize(cid)
        return self.root / cid[-2:] / cid

    def put(self, data: bytes) -> str:
        cid = cids.cid_for(data)
        path = self.path(cid)
        if path.exists() and cids.matches(cid, path.read_bytes()):
            return cid
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return cid

    def get(self, cid: str) -> bytes:
        path = self.path(cid)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise EvidenceMissing(f"{cids.normalize(cid)} is not in the local store") from None
        if not cids.matches(cid, data):
            raise EvidenceCorrupt(f"the local store's copy of {cids.normalize(cid)} is corrupt "
                                  f"({len(data)} bytes that hash to something else): {path}")
        return data

    def has(self, cid: str) -> bool:
        return self.path(cid).exists()


class EvidenceStore:
    """read_pins=False: never look at the pin rows, so reads need no database (the boards' verify)."""

    def __init__(self, local: LocalBlobStore | None, kubo: KuboClient | None = None, *, read_pins: bool = True):
        self.local = local
        self.kubo = kubo
        self.read_pins = read_pins

    def put(self, data: bytes) -> str:
        """Store `data`; returns its CID. With a node configured, queues the pin in the same step."""
        data = bytes(data)
        cid = self.local.put(data)
        if self.kubo is not None:
            with transaction.atomic():
                EvidencePin.objects.get_or_create(cid=cid, defaults={"data": data, "size": len(data)})
        return cid

    def get(self, cid: str, *, timeout: float | None = None) -> bytes:
        """The verified bytes of `cid`: from disk, a pin not yet sent, or the IPFS node."""
        cid = cids.normalize(cid)
        if self.local is not None:
            try:
                return self.local.get(cid)
            except EvidenceMissing:
                pass
            except EvidenceCorrupt:
                if self.kubo is None:
                    raise
        if self.kubo is None:
            raise EvidenceMissing(f"{cid} is not in the local store")
        if self.read_pins:
            pending = EvidencePin.objects.filter(cid=cid).exclude(data=None).values_list("data", flat=True).first()
            if pending is not None and cids.matches(cid, bytes(pending)):
                return bytes(pending)
        try:
            data = self.kubo.cat(cid, timeout=timeout)
        except IpfsNotFound as exc:
            raise EvidenceMissing(f"{cid} was not found on the IPFS node: {exc}") from exc
        except IpfsCorrupt as exc:
            raise EvidenceCorrupt(str(exc)) from exc
        if self.local is not None:
            self.local.put(data)  # a verified copy: later reads need no node
        return data

    # --- the pin outbox ---------------------------------------------------------------------

    def pin_pending(self, limit: int = 50, *, lease_s: float = 60) -> dict:
        """Copy queued blobs to the node and pin them; returns counts. Safe to run in several workers."""
        counts = {"pinned": 0, "deferred": 0, "failed": 0}
        if self.kubo is None:
            return counts
        for pin_id in work.claim(EvidencePin, [EvidencePin.Status.PENDING], limit, lease_s):
            counts[self._pin_one(EvidencePin.objects.get(id=pin_id))] += 1
        return counts

    def _pin_one(self, pin: EvidencePin) -> str:
        data = bytes(pin.data)
        try:
            if not cids.matches(pin.cid, data):
                raise EvidenceCorrupt(f"the queued bytes of {pin.cid} do not match it")
            self.kubo.add(data)
            self.kubo.pin(pin.cid)
        except (IpfsError, EvidenceCorrupt) as exc:  # the node down: later; anything else: never
            return "deferred" if work.retry_later(pin, exc, cap=PIN_BACKOFF_MAX_S) else "failed"
        work.finish(pin, EvidencePin.Status.PINNED, data=None, pinned_at=timezone.now())
        return "pinned"

    def pins_waiting(self) -> int:
        return EvidencePin.objects.filter(status=EvidencePin.Status.PENDING).count()


# --- the answer an evidence record holds ------------------------------------------------------

def read_answer(cid: str, interaction_id: str, store, *, timeout: float = ANSWER_TIMEOUT_S) -> str | None:
    """The answer text of the evidence record under `cid` (checked against the CID, and naming this
    interaction), or None when there is none to be had there. Raises IpfsError when the node was asked
    and failed (away, or not finding the record in time): the answer is unknown for now."""
    try:
        record = records.parse(store.get(cid, timeout=timeout))
    except (EvidenceMissing, EvidenceCorrupt, cids.CidError, records.RecordError, OSError) as exc:
        log.info("evidence %s of %s unreadable: %s", cid, interaction_id, exc)
        return None
    if record["schema"] != records.EVIDENCE_SCHEMA or record["interaction"].lower() != interaction_id.lower():
        return None
    return record["answer"]["text"]


def evidence_answer(cid: str, interaction_id: str, store, *, timeout: float = ANSWER_TIMEOUT_S) -> str | None:
    """`read_answer`, None also when the IPFS node failed."""
    try:
        return read_answer(cid, interaction_id, store, timeout=timeout)
    except IpfsError as exc:  # the node is away or failing: the answer is unknown for now
        log.warning("evidence %s of %s unreadable: %s", cid, interaction_id, exc)
        return None


def local_store() -> EvidenceStore:
    """This site's own copy of the records (the local blob directory) alone: no network, no database."""
    return EvidenceStore(LocalBlobStore(settings.LLMCHAIN_IPFS_DIR), None, read_pins=False)


def kubo_client() -> KuboClient:
    """This site's own node: the operator named it, so its address is admitted even when private."""
    return KuboClient(settings.LLMCHAIN_IPFS_API_URL, timeout=settings.LLMCHAIN_IPFS_TIMEOUT_S,
                      retries=settings.LLMCHAIN_IPFS_RETRIES,
                      allow=f"{settings.LLMCHAIN_OUTBOUND_ALLOW},{outbound.origin(settings.LLMCHAIN_IPFS_API_URL)}")


def default_store() -> EvidenceStore:
    backend = settings.LLMCHAIN_IPFS_BACKEND
    if backend not in ("local", "kubo"):
        raise ValueError(f"LLMCHAIN_IPFS_BACKEND must be 'local' or 'kubo', not {backend!r}")
    local = LocalBlobStore(settings.LLMCHAIN_IPFS_DIR)
    return EvidenceStore(local, kubo_client() if backend == "kubo" else None)
