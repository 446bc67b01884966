"""The ledger's tables: the outbox of transactions to send, and the indexed chain state.

Work that must happen is a row with a status: a crashed process loses nothing, because the
submitter records a signed transaction before broadcasting it and re-sends the same bytes
(same hash, same nonce) until a receipt says what became of it.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Min
from django.utils import timezone

from lib.reputation import WAD

from .work import WorkRow


class SigningKey(models.Model):
    """A local account the submitter signs for; the private key is encrypted at rest."""

    address = models.CharField(max_length=42, unique=True)
    label = models.CharField(max_length=64, blank=True)
    encrypted_key = models.BinaryField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.label or 'key'} {self.address}"


class Sender(models.Model):
    """One nonce lane: the next nonce this site will use for an address, and who holds the lane."""

    address = models.CharField(max_length=42, unique=True)
    next_nonce = models.BigIntegerField(null=True)  # None: read it from the node first
    lease_owner = models.CharField(max_length=64, blank=True)
    lease_until = models.DateTimeField(null=True)
    # Why the lane cannot progress right now ("" when it can), and since when: said once in the
    # log when it changes, shown by `chain status` and the admin.
    stuck_reason = models.TextField(blank=True)
    stuck_since = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return self.address


class ChainTransaction(models.Model):
    """A signed transaction, stored before it is broadcast."""

    class Status(models.TextChoices):
        SIGNED = "signed"  # recorded, not yet accepted by a node
        SENT = "sent"  # accepted by a node, no receipt yet
        MINED = "mined"  # a receipt (`succeeded` says which kind) in a block that is not final yet
        CONFIRMED = "confirmed"  # receipt with status 1 in a final block
        REVERTED = "reverted"  # receipt with status 0 in a final block
        DROPPED = "dropped"  # its nonce went to another transaction; its items were re-queued

    sender = models.ForeignKey(Sender, on_delete=models.PROTECT, related_name="transactions")
    nonce = models.BigIntegerField()
    function = models.CharField(max_length=64)
    tx_hash = models.CharField(max_length=66, unique=True)
    raw = models.BinaryField()
    gas_limit = models.BigIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SIGNED, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    block_number = models.BigIntegerField(null=True)
    block_hash = models.CharField(max_length=66, blank=True)  # of the receipt's block: a reorg changes it
    succeeded = models.BooleanField(null=True)  # the receipt's status (None: no receipt)
    gas_used = models.BigIntegerField(null=True)
    resends = models.PositiveIntegerField(default=0)  # broadcasts after the first: the backoff's exponent
    next_send_at = models.DateTimeField(null=True)  # not re-sent (or re-checked) before this
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True)
    mined_at = models.DateTimeField(null=True)
    final_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["sender", "nonce"], condition=~models.Q(status="dropped"),
                                    name="one_live_tx_per_nonce"),
        ]
        indexes = [models.Index(fields=["sender", "status", "nonce"])]

    def __str__(self) -> str:
        return f"{self.function} #{self.nonce} {self.tx_hash[:10]} {self.status}"


class OutboxItem(models.Model):
    """One contract call that must happen exactly once (an evaluation, a model, a context...)."""

    class Status(models.TextChoices):
        PENDING = "pending"  # waiting to be signed
        SIGNED = "signed"  # in a transaction that is not mined yet
        CONFIRMED = "confirmed"  # its effect is on-chain
        FAILED = "failed"  # the contract refused it for good; `failure` says why, last_error in detail

    class Failure(models.TextChoices):
        """Why an item failed, as code compares it; the label is what a person reads."""

        REVERTED = "reverted", "the chain refused it"
        DEPENDENCY = "dependency", "a step it waited for failed"
        NODE_REFUSED = "node_refused", "the chain's node would not take it"
        SUSPENDED = "suspended", "the account is suspended"
        # A relayed request's:
        EXPIRED = "expired", "the signature expired before it could be sent"
        NONCE_USED = "nonce_used", "another signed request took its place"
        EARLIER_FAILED = "earlier_failed", "an earlier signed request of the same account did not go through"
        UNUSABLE = "unusable", "the signed request cannot be sent as it is"
        BAD_SIGNATURE = "bad_signature", "the signature was not accepted"
        WAITED = "waited", "it waited too long for an earlier signed request of the same account"

    # The failures of a relayed request that its signer cures by signing the call again (a signature
    # the forwarder refused as much as one that went stale).
    CURED_BY_SIGNING = frozenset({Failure.EXPIRED, Failure.NONCE_USED, Failure.EARLIER_FAILED, Failure.UNUSABLE,
                                  Failure.NODE_REFUSED, Failure.BAD_SIGNATURE})

    function = models.CharField(max_length=64)
    sender_address = models.CharField(max_length=42)
    key = models.CharField(max_length=160, unique=True)  # idempotency key, e.g. autoEval:<id>
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    depends_on = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="dependents")
    transaction = models.ForeignKey(ChainTransaction, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="items")
    # A call relayed through the forwarder: its signer (the rater; the lane is the relayer's) and the
    # ERC-2771 request they signed (metatx.to_json), stored before it is relayed.
    signer = models.CharField(max_length=42, blank=True, db_index=True)
    request = models.JSONField(null=True, blank=True)
    # The signer's forwarder nonce the request holds (or used up): two requests of one signer never
    # hold the same one. None while a request is to be signed again, and for one that never used it.
    relay_nonce = models.BigIntegerField(null=True, blank=True)
    # Relayed requests that go on-chain together or not at all (an arena battle's openBattle, signed by
    # the oracle, and its user's vote): the same non-empty group, one atomic executeBatch of their own,
    # in id order; none is ever sent without the others.
    atomic_group = models.CharField(max_length=80, blank=True, db_index=True)
    solo = models.BooleanField(default=False)  # never batch (set after a batch reverted)
    duplicate = models.BooleanField(default=False)  # found already applied on-chain
    attempts = models.PositiveIntegerField(default=0)
    failure = models.CharField(max_length=16, choices=Failure.choices, blank=True)  # "" unless it failed
    last_error = models.TextField(blank=True)  # the details, for operators
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    confirmed_at = models.DateTimeField(null=True)

    class Meta:
        indexes = [models.Index(fields=["status", "sender_address", "id"])]
        constraints = [models.UniqueConstraint(fields=["signer", "relay_nonce"], condition=models.Q(
            relay_nonce__isnull=False), name="one_request_per_signer_nonce")]

    def __str__(self) -> str:
        return f"{self.key} {self.status}"

    @property
    def needs_new_signature(self) -> bool:
        """A relayed request that failed in a way a new signature of its signer cures."""
        return self.status == self.Status.FAILED and bool(self.signer) and self.failure in self.CURED_BY_SIGNING

    @property
    def failure_words(self) -> str:
        """Why it failed, in plain words ("" unless it failed)."""
        if self.status != self.Status.FAILED:
            return ""
        return self.get_failure_display() if self.failure else "it could not be recorded on the chain"


class IndexerCursor(models.Model):
    """The last block whose events are folded into the tables below, and its hash: the next
    chunk must descend from it, or the chain was reorganised under the indexer."""

    name = models.CharField(max_length=64, unique=True)
    last_block = models.BigIntegerField()
    last_hash = models.CharField(max_length=66, blank=True)  # "" for cursors from before hashes were kept
    updated_at = models.DateTimeField(auto_now=True)


class IndexedBlock(models.Model):
    """The hash of a recently folded block: where to find the common ancestor after a reorg.

    The indexer keeps the last LLMCHAIN_REORG_WINDOW of them per cursor; a reorg deeper than
    that rebuilds the tables from the deployment block."""

    cursor = models.CharField(max_length=64)
    number = models.BigIntegerField()
    hash = models.CharField(max_length=66)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cursor", "number"], name="one_hash_per_block")]


# --- Indexed chain state: every row can be rebuilt from contract events ----------------------

class Context(models.Model):
    context_id = models.CharField(max_length=66, unique=True)
    name = models.CharField(max_length=200)
    block_number = models.BigIntegerField()

    def __str__(self) -> str:
        return self.name


class LedgerModel(models.Model):
    """A model as the Reputation contract knows it."""

    model_id = models.CharField(max_length=66, unique=True)
    owner = models.CharField(max_length=42)
    metadata_cid = models.CharField(max_length=200)
    block_number = models.BigIntegerField()
    metadata_block = models.BigIntegerField(null=True)  # the block of the event that set metadata_cid

    def __str__(self) -> str:
        return self.model_id


class Registration(models.Model):
    address = models.CharField(max_length=42, unique=True)
    role = models.PositiveSmallIntegerField()
    profile_cid = models.CharField(max_length=200, blank=True)
    registered_at = models.BigIntegerField()  # block timestamp
    block_number = models.BigIntegerField(null=True)  # None for rows indexed before it was kept


class LedgerInteraction(models.Model):
    """An interaction as the Reputation contract records it (the chat's turn is apps.chat.models.Interaction)."""

    interaction_id = models.CharField(max_length=66, unique=True)
    model_id = models.CharField(max_length=66, db_index=True)
    context_id = models.CharField(max_length=66, db_index=True)
    user = models.CharField(max_length=42)
    has_reference = models.BooleanField()
    sa = models.BigIntegerField()  # all scores in 1e18 fixed point
    wa = models.BigIntegerField()
    evidence_cid = models.CharField(max_length=200)
    auto_tx = models.CharField(max_length=66)
    auto_block = models.BigIntegerField()
    sh = models.BigIntegerField(null=True)
    wh = models.BigIntegerField(null=True)
    d_minutes = models.DecimalField(max_digits=30, decimal_places=0, null=True)  # 1e18 minutes, up to 1440e18
    human_tx = models.CharField(max_length=66, blank=True)
    human_block = models.BigIntegerField(null=True)
    reputation_tx = models.CharField(max_length=66, blank=True)
    reputation_block = models.BigIntegerField(null=True)
    # The length in characters of the answer its evidence record holds (apps/chain/answers.py): None
    # while the record has not been read (or cannot be: no such record, or not of this interaction).
    answer_chars = models.PositiveIntegerField(null=True)

    # A rating this soon after its rater's previous one keeps little of its weight (the time factor F_D),
    # and the rating's page says so.
    QUICK_SUCCESSION_MINUTES = 60

    class Meta:
        db_table = "chain_interaction"
        # The boards' refresh reads a model's rated interactions, in one context or in all of them; the
        # answers' fill walks the rows whose length is not known yet.
        indexes = [models.Index(fields=["model_id", "context_id"]),
                   models.Index(fields=["id"], condition=models.Q(answer_chars__isnull=True),
                                name="answer_chars_unknown")]

    @property
    def rated_in_quick_succession(self) -> bool:
        """Whether the human rating came within QUICK_SUCCESSION_MINUTES of its rater's previous one."""
        return self.d_minutes is not None and self.d_minutes < self.QUICK_SUCCESSION_MINUTES * WAD

    @classmethod
    def first_ratings(cls, rows: dict[str, LedgerInteraction]) -> set[str]:
        """Of these indexed rows, the ids of those that hold their rater's first rating on-chain, whose time
        factor the contract counts from the rater's registration rather than from a previous rating: the
        rater's only rating in the earliest block that holds one of theirs. Two queries, however many rows."""
        rated = [row for row in rows.values() if row.human_block is not None]
        if not rated:
            return set()
        users = {row.user for row in rated}
        earliest = dict(cls.objects.filter(user__in=users, human_block__isnull=False)
                        .values("user").annotate(block=Min("human_block")).values_list("user", "block"))
        there: dict[str, list[str]] = {}
        for user, block, iid in cls.objects.filter(
                user__in=users, human_block__in=set(earliest.values())).values_list("user", "human_block", "interaction_id"):
            if earliest.get(user) == block:
                there.setdefault(user, []).append(iid)
        return {iids[0] for iids in there.values() if len(iids) == 1 and iids[0] in rows}


class Reputation(models.Model):
    """REP = (Ra, Rh, R) of a model in a context, as last emitted by the contract."""

    model_id = models.CharField(max_length=66)
    context_id = models.CharField(max_length=66)
    ra = models.BigIntegerField()
    rh = models.BigIntegerField()
    r = models.BigIntegerField()
    n_auto = models.BigIntegerField()
    n_human = models.BigIntegerField()
    block_number = models.BigIntegerField()
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model_id", "context_id"], name="one_rep_per_pair")]
        indexes = [models.Index(fields=["context_id", "r"])]


class ReputationChange(models.Model):
    """Every ReputationUpdated event: the full history behind each board number."""

    block_number = models.BigIntegerField()
    log_index = models.IntegerField()
    tx_hash = models.CharField(max_length=66)
    interaction_id = models.CharField(max_length=66)
    model_id = models.CharField(max_length=66)
    context_id = models.CharField(max_length=66)
    ra = models.BigIntegerField()
    rh = models.BigIntegerField()
    r = models.BigIntegerField()
    n_auto = models.BigIntegerField()
    n_human = models.BigIntegerField()
    timestamp = models.BigIntegerField(null=True)  # the block's (seconds); None for rows indexed before it was kept

    class Meta:
        constraints = [models.UniqueConstraint(fields=["block_number", "log_index"], name="one_row_per_log")]
        indexes = [models.Index(fields=["model_id", "context_id", "block_number"])]


class ArenaBattle(models.Model):
    """A battle as the Reputation contract recorded it (BattleOpened), and its vote (Voted): two
    anonymous answers of one user to one prompt in one context, and which the user found better."""

    class Outcome(models.IntegerChoices):
        A = 1, "A better"
        B = 2, "B better"
        TIE = 3, "tie"
        BAD = 4, "both bad"

    battle_id = models.CharField(max_length=66, unique=True)
    context_id = models.CharField(max_length=66, db_index=True)
    model_a = models.CharField(max_length=66)
    model_b = models.CharField(max_length=66)
    interaction_a = models.CharField(max_length=66)
    interaction_b = models.CharField(max_length=66)
    user = models.CharField(max_length=42)
    voided = models.BooleanField()  # an answer named its own model: a vote is kept, not counted
    block_number = models.BigIntegerField()
    tx = models.CharField(max_length=66)
    outcome = models.PositiveSmallIntegerField(null=True, choices=Outcome.choices)
    counted = models.BooleanField(null=True)
    vote_block = models.BigIntegerField(null=True)
    vote_tx = models.CharField(max_length=66, blank=True)

    class Meta:
        indexes = [models.Index(fields=["context_id", "vote_block"])]

    def __str__(self) -> str:
        return f"battle {self.battle_id[:10]} {self.get_outcome_display() if self.outcome else 'not voted'}"


class EvidencePin(WorkRow):
    """A blob to copy to the IPFS node and pin there: the outbox of evidence.

    The bytes stay in this row until the node has pinned them, so an IPFS outage delays the
    copy and loses nothing; the CID is known (and may go on-chain) before the node sees them.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        PINNED = "pinned"
        FAILED = "failed"  # the node stored something else under another CID; last_error says

    cid = models.CharField(max_length=100, unique=True)
    data = models.BinaryField(null=True)
    size = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    created_at = models.DateTimeField(default=timezone.now)
    pinned_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"{self.cid} {self.status}"
