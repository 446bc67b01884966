"""One model's reputation page: its metadata (checked against the CID on-chain), its REP in every
context with the history behind it, and its latest evaluations.

`model_report` is the domain function; everything it reads is indexed chain state (LedgerModel,
BoardEntry, LedgerInteraction, Context) plus the metadata record from the evidence store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.chain.models import ChainTransaction, Context, LedgerInteraction, LedgerModel, SigningKey
from apps.chain.submitter import RELAY
from apps.chat.models import RegisteredModel
from lib.ids import is_hex32
from lib.reputation import GLOBAL_CONTEXT_ID

from .boards import GLOBAL_NAME
from .entries import short_id
from .metadata import Metadata, link_cid, read_metadata
from .models import BoardEntry

LATEST_EVALUATIONS = 20


class MalformedModelId(ValueError):
    """Not 0x followed by 64 hex digits."""


class UnknownModel(LookupError):
    """A well-formed id that the indexed chain state knows nothing about."""


@dataclass(frozen=True)
class ContextRep:
    context_id: str
    name: str
    entry: BoardEntry

    @property
    def is_global(self) -> bool:
        return self.context_id == GLOBAL_CONTEXT_ID

    def chart(self) -> dict:
        h = self.entry.history or {}
        return {"id": self.context_id, "name": self.name, "i": list(h.get("i", [])), "ra": list(h.get("ra", [])),
                "rh": list(h.get("rh", [])), "r": list(h.get("r", []))}


@dataclass(frozen=True)
class Evaluation:
    row: LedgerInteraction
    context_name: str
    evidence_cid: str  # normalized, or "" when the chain holds something that is not a CID
    # Who signed the human rating: "site" (a key this site holds for the rater), "wallet" (a key only
    # the rater holds), "" when not rated; and whether it was relayed through the forwarder.
    key_kind: str = ""
    relayed: bool = False

    @property
    def txs(self) -> list[tuple[str, str]]:
        """(what, hash) of the interaction's transactions on-chain, in the order they happen."""
        pairs = (("automatic score", self.row.auto_tx), ("rating", self.row.human_tx),
                 ("reputation update", self.row.reputation_tx))
        return [(what, tx) for what, tx in pairs if tx]


@dataclass(frozen=True)
class ModelReport:
    model_id: str
    name: str
    ledger: LedgerModel | None
    metadata: Metadata | None
    registered: RegisteredModel | None
    contexts: list[ContextRep] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)

    @property
    def short_id(self) -> str:
        return short_id(self.model_id)

    @property
    def owner_mismatch(self) -> bool:
        """The record names an owner other than the one on-chain (the record is the owner's claim)."""
        if not (self.ledger and self.metadata and self.metadata.verified):
            return False
        return self.metadata.record.get("owner", "").lower() != self.ledger.owner.lower()

    def chart_data(self) -> dict:
        return {"contexts": [c.chart() for c in self.contexts if (c.entry.history or {}).get("i")]}


def parse_model_id(raw: str) -> str:
    if not is_hex32(raw):
        raise MalformedModelId("A model id is 0x followed by 64 hexadecimal digits "
                               "(the model's on-chain id, as the boards link it).")
    return raw.lower()


def _context_names(context_ids: set[str]) -> dict[str, str]:
    names = dict(Context.objects.filter(context_id__in=context_ids).values_list("context_id", "name"))
    names[GLOBAL_CONTEXT_ID] = GLOBAL_NAME
    return {c: names.get(c) or short_id(c) for c in context_ids}


def model_report(raw_model_id: str) -> ModelReport:
    """Everything the page shows of one model. Raises MalformedModelId or UnknownModel."""
    model_id = parse_model_id(raw_model_id)
    ledger = LedgerModel.objects.filter(model_id=model_id).first()
    entries = list(BoardEntry.objects.filter(model_id=model_id))
    if ledger is None and not entries:
        raise UnknownModel(f"No model with id {model_id} has been indexed from the chain.")
    latest = list(LedgerInteraction.objects.filter(model_id=model_id)
                  .order_by("-auto_block", "interaction_id")[:LATEST_EVALUATIONS])
    names = _context_names({e.context_id for e in entries} | {i.context_id for i in latest} | {GLOBAL_CONTEXT_ID})
    custodial = set(SigningKey.objects.filter(address__in={i.user for i in latest}).values_list("address", flat=True))
    relayed = set(ChainTransaction.objects.filter(tx_hash__in=[i.human_tx for i in latest if i.human_tx],
                                                  function=RELAY).values_list("tx_hash", flat=True))
    contexts = sorted((ContextRep(e.context_id, names[e.context_id], e) for e in entries),
                      key=lambda c: (not c.is_global, c.name.casefold(), c.context_id))
    metadata = read_metadata(ledger.metadata_cid) if ledger is not None else None
    if metadata is not None and metadata.verified:
        name = metadata.record["name"]
    else:
        name = next((e.name for e in entries if e.name), "") or short_id(model_id)
    return ModelReport(
        model_id=model_id, name=name, ledger=ledger, metadata=metadata,
        registered=RegisteredModel.objects.filter(model_id=model_id).first(), contexts=contexts,
        evaluations=[Evaluation(i, names[i.context_id], link_cid(i.evidence_cid),
                                key_kind=("site" if i.user in custodial else "wallet") if i.human_tx else "",
                                relayed=i.human_tx in relayed) for i in latest])
