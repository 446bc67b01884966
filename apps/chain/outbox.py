"""Queue contract calls: validate, then write one outbox row per call, idempotently.

Views, workers and commands call these; the submitter sends what they queue.
"""

from __future__ import annotations

from typing import Any

import time

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Value
from django.db.models.functions import Concat
from eth_utils import is_checksum_address, keccak, to_checksum_address

from lib.ids import is_hex32
from lib.reputation import WAD, likert_ok

from . import relay, work
from .client import ChainError
from .keys import oracle_addresses, relayer_address
from .ledger import CALLS, GRANTABLE_ROLES, HUM_FIELDS, ORACLE_SIGNED, RELAY_NONCE_WINDOW, RELAYABLE
from .metatx import ForwardRequest, recover_signer, to_json
from .models import OutboxItem

CHANNEL = "chain-submit"  # `manage.py runworker chain-submit` (consumers.SubmitConsumer)
ROLE_CODES = {"user": 1, "developer": 2, "oracle": 3, "expert": 4, "registrar": 5}
VOTE_OUTCOMES = {"a": 1, "b": 2, "tie": 3, "bad": 4}  # Reputation.vote: A better, B better, tie, both bad
KEY_MAX_LEN = OutboxItem._meta.get_field("key").max_length


class InvalidCall(ValueError):
    """The call would be refused by the contract, or is malformed: nothing was queued."""


class ConflictingCall(InvalidCall):
    """A call with the same idempotency key but different arguments is already queued."""


class NonceTaken(InvalidCall):
    """Another request of the same signer holds this forwarder nonce: sign again with the next one."""


class Unreachable(InvalidCall):
    """The request could not be checked because the chain cannot be read now: it may pass later."""


def _id(payload: dict, name: str) -> str:
    value = payload.get(name)
    if not is_hex32(value):
        raise InvalidCall(f"{name} must be 0x followed by 64 hex digits")
    if int(value, 16) == 0 and name != "contextId":
        raise InvalidCall(f"{name} must not be zero")
    return value.lower()


def _address(value: Any, name: str) -> str:
    try:
        address = to_checksum_address(value)
    except (TypeError, ValueError) as exc:
        raise InvalidCall(f"{name} is not an address") from exc
    return address


def _wad(value: Any, name: str) -> str:
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise InvalidCall(f"{name} must be an integer in 1e18 fixed point") from exc
    if not 0 <= number <= WAD:
        raise InvalidCall(f"{name} must lie in [0, 1e18], got {number}")
    return str(number)


def _text(value: Any, name: str, max_len: int = 200, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not allow_empty) or len(value) > max_len:
        raise InvalidCall(f"{name} must be a non-empty text of at most {max_len} characters")
    return value


def check_call(function: str, payload: dict) -> dict:
    """The canonical payload of a call, or InvalidCall saying what is wrong."""
    if function not in CALLS:
        raise InvalidCall(f"unknown function {function!r}")
    p = payload
    if function == "addContext":
        ctx = _id(p, "contextId")
        if int(ctx, 16) == 0:
            raise InvalidCall("context 0 is the global context and exists from deployment")
        return {"contextId": ctx, "name": _text(p.get("name"), "name")}
    if function in ("addModel", "updateModelMetadata"):
        return {"modelId": _id(p, "modelId"), "metadataCid": _text(p.get("metadataCid"), "metadataCid")}
    if function == "register":
        role = p.get("role")
        role = ROLE_CODES.get(role, role)
        if role not in ROLE_CODES.values():
            raise InvalidCall(f"role must be one of {sorted(ROLE_CODES)} or 1..5")
        return {"account": _address(p.get("account"), "account"), "role": role,
                "profileCid": _text(p.get("profileCid", ""), "profileCid", allow_empty=True)}
    if function in ("grantRole", "revokeRole"):
        role = p.get("role")
        if role not in GRANTABLE_ROLES:
            raise InvalidCall(f"role must be one of {sorted(GRANTABLE_ROLES)}")
        return {"role": role, "account": _address(p.get("account"), "account")}
    if function == "autoEval":
        ctx = _id(p, "contextId")
        if int(ctx, 16) == 0:
            raise InvalidCall("an interaction belongs to a real context, not the global one")
        if not isinstance(p.get("hasReference"), bool):
            raise InvalidCall("hasReference must be true or false")
        return {"interactionId": _id(p, "interactionId"), "modelId": _id(p, "modelId"), "contextId": ctx,
                "user": _address(p.get("user"), "user"), "hasReference": p["hasReference"],
                "sA": _wad(p.get("sA"), "sA"), "wA": _wad(p.get("wA"), "wA"),
                "evidenceCid": _text(p.get("evidenceCid"), "evidenceCid")}
    if function == "humEval":
        out: dict[str, Any] = {"interactionId": _id(p, "interactionId")}
        for name in HUM_FIELDS:
            if not likert_ok(p.get(name)):
                raise InvalidCall(f"{name} must be an answer from 1 to 5")
            out[name] = p[name]
        return out
    if function == "openBattle":
        out = {"battleId": _id(p, "battleId"), "interactionA": _id(p, "interactionA"),
               "interactionB": _id(p, "interactionB")}
        if out["interactionA"] == out["interactionB"]:
            raise InvalidCall("a battle is between two different interactions")
        if not isinstance(p.get("voided"), bool):
            raise InvalidCall("voided must be true or false")
        return {**out, "voided": p["voided"]}
    if function == "vote":
        if p.get("outcome") not in VOTE_OUTCOMES.values():
            raise InvalidCall(f"outcome must be one of {VOTE_OUTCOMES} (its number)")
        return {"battleId": _id(p, "battleId"), "outcome": p["outcome"]}
    return {"interactionId": _id(p, "interactionId")}  # updateReputation


SUBJECT = {"addContext": "contextId", "addModel": "modelId", "register": "account", "openBattle": "battleId",
           "vote": "battleId"}  # the payload field a call is keyed by; interactionId for the others


def idempotency_key(function: str, payload: dict, revision: int | None = None) -> str:
    """The key of the outbox row of this call: queuing the same call twice finds the first row.
    `revision` numbers the changes of calls that may be made again with the same arguments (the
    n-th change of a role, the n-th edit of a model's metadata)."""
    if function == "updateModelMetadata":
        if revision is not None:
            return f"{function}:{payload['modelId']}:{revision}"
        # One row per (model, CID): the same edit queued twice is one call, a new CID a new one.
        # Publishing an earlier CID again (A, B, then A) needs a revision.
        # A CID too long for the key column (160) is replaced by its keccak256.
        key = f"{function}:{payload['modelId']}:{payload['metadataCid']}"
        if len(key) > KEY_MAX_LEN:
            key = f"{function}:{payload['modelId']}:keccak:{keccak(text=payload['metadataCid']).hex()}"
        return key
    if function in ("grantRole", "revokeRole"):
        # A role can change repeatedly (grant, revoke, grant again), so one fixed key per
        # (role, account) would fold the second grant into the first. Keys count the changes: the
        # n-th change (`revision`, n = earlier grantRole/revokeRole rows of that role and account) is
        # `grantRole:<role>:<account>` for the first grant (n = 0, the default) and
        # `grantRole:<role>:<account>:<n>` / `revokeRole:<role>:<account>:<n>` otherwise. The same
        # change queued twice is still one row; grant -> revoke -> grant is three.
        n = revision or 0
        return f"{function}:{payload['role']}:{payload['account']}" + (
            "" if function == "grantRole" and n == 0 else f":{n}")
    return f"{function}:{payload[SUBJECT.get(function, 'interactionId')]}"


def item_for(function: str, payload: dict, revision: int | None = None) -> OutboxItem | None:
    """The row queued for this call (`payload` needs only the fields its key is made of), or None."""
    return OutboxItem.objects.filter(key=idempotency_key(function, payload, revision)).first()


def items_for(function: str, payload: dict):
    """Every row queued for this call and its later revisions (the changes of a role for an account,
    the metadata edits of a model), oldest first."""
    if function == "updateModelMetadata":
        prefix = f"{function}:{payload['modelId']}:"
    elif function in ("grantRole", "revokeRole"):
        prefix = f"{function}:{payload['role']}:{payload['account']}"
    else:
        return OutboxItem.objects.filter(key=idempotency_key(function, payload)).order_by("id")
    return OutboxItem.objects.filter(key__startswith=prefix).order_by("id")


def key_expression(function: str, subject: Any) -> Concat:
    """The key of a call keyed by its subject alone (SUBJECT), as a database expression of `subject`
    (e.g. an OuterRef), for a subquery."""
    if function in ("updateModelMetadata", "grantRole", "revokeRole"):
        raise ValueError(f"{function} is not keyed by its subject alone")
    return Concat(Value(f"{function}:"), subject)


def check_request(function: str, sender: str, clean: dict, request: ForwardRequest) -> None:
    """InvalidCall unless `request` is `sender`'s signed request for exactly this call, to the
    deployed Reputation contract through its forwarder, and not expired."""
    if function not in RELAYABLE:
        raise InvalidCall(f"{function} is not relayed; send it directly")
    if function in ORACLE_SIGNED and sender not in oracle_addresses():
        raise InvalidCall(f"{function} is relayed only when this site's oracle signs it")
    dep = relay.deployment()
    if dep is None or not dep.forwarder:
        raise InvalidCall("this deployment has no forwarder to relay signed requests through")
    if _address(request.sender, "the request's sender") != sender:
        raise InvalidCall("the request is made out for another account")
    if _address(request.to, "the request's target").lower() != dep.reputation.lower():
        raise InvalidCall("the request calls another contract than this site's Reputation contract")
    if request.data != relay.call_data(function, clean):
        raise InvalidCall("the request does not carry this call with these answers")
    if request.value != 0 or request.gas != RELAYABLE[function]:
        raise InvalidCall(f"the request must send no value and give its call {RELAYABLE[function]} gas, "
                          f"what this call needs")
    now = max(time.time(), relay.chain_now())
    if request.deadline <= now:
        raise InvalidCall("the request has expired: sign it again")
    if request.deadline < now + settings.LLMCHAIN_RELAY_MIN_DEADLINE_S:
        raise InvalidCall(f"the request expires too soon to be relayed: it must stay valid for at least "
                          f"{settings.LLMCHAIN_RELAY_MIN_DEADLINE_S // 60} minutes")
    try:
        signer = recover_signer(request, dep.chainId, dep.forwarder)
    except Exception as exc:  # noqa: BLE001 - any malformed signature is the same refusal
        raise InvalidCall("the request's signature is malformed") from exc
    if signer != sender:
        raise InvalidCall("the request is not signed by the account it names")
    check_nonce(sender, request.nonce)


def check_nonce(signer: str, nonce: int) -> None:
    """InvalidCall unless `nonce` is at most RELAY_NONCE_WINDOW - 1 above the signer's next one (the
    next after the requests queued here, or the forwarder's count for a signer with none)."""
    if nonce < 0:
        raise InvalidCall("the request's nonce must not be negative")
    try:
        next_nonce = relay.next_nonce(signer)
    except (ChainError, ValueError) as exc:
        raise Unreachable("the chain cannot be reached to check the request's nonce: try again in a moment") from exc
    if nonce >= next_nonce + RELAY_NONCE_WINDOW:
        raise InvalidCall(f"the request's nonce {nonce} is too far ahead of your next one ({next_nonce}): "
                          f"sign it again")


def enqueue(function: str, sender: str, payload: dict, *, depends_on: OutboxItem | None = None,
            key: str | None = None, revision: int | None = None,
            request: ForwardRequest | None = None, relayer: str | None = None, atomic_group: str = "") -> OutboxItem:
    """Queue one contract call from `sender`. Queuing the same call twice returns the first row.
    With `request` (the call signed by `sender` as an ERC-2771 request), the relayer sends it
    through the forwarder: the row is in the relayer's lane and keeps the signed request.
    `revision` numbers a call made again with the same arguments (idempotency_key); `key` replaces
    the key altogether (tests). A new row wakes the submitter's consumer once it is committed.
    `relayer` puts a relayed request in that relayer's lane instead of its signer's (the requests of an
    `atomic_group`, which go in one atomic batch, share one lane)."""
    clean = check_call(function, payload)
    if not is_checksum_address(sender):
        sender = _address(sender, "sender")
    key = key or idempotency_key(function, clean, revision)
    fields = {"sender_address": sender}
    if request is not None:
        check_request(function, sender, clean, request)
        fields = {"sender_address": relayer or relayer_address(sender), "signer": sender, "request": to_json(request),
                  "relay_nonce": request.nonce, "atomic_group": atomic_group}
    try:
        with transaction.atomic():
            item = OutboxItem.objects.create(function=function, key=key, payload=clean, depends_on=depends_on,
                                             **fields)
            work.wake_on_commit(CHANNEL)
            return item
    except IntegrityError:
        existing = OutboxItem.objects.filter(key=key).first()
        if existing is None:
            raise NonceTaken(f"nonce {request.nonce} of {sender} is held by another request") from None
        return _queued_before(existing, clean, sender)


def _queued_before(existing: OutboxItem, clean: dict, sender: str) -> OutboxItem:
    """The row of the same call queued before, which queuing it again returns; ConflictingCall when
    the row under its key holds other arguments or another sender."""
    if existing.payload != clean or (existing.signer or existing.sender_address) != sender:
        raise ConflictingCall(f"{existing.key} is already queued with other arguments")
    return existing


def enqueue_signed(function: str, rater: str, payload: dict, *, depends_on: OutboxItem | None = None,
                   relayer: str | None = None, atomic_group: str = "") -> OutboxItem:
    """Queue `rater`'s call as a request signed with the key the site holds for them (custodial),
    relayed by the relayer; with the signer's next forwarder nonce (the next one again if a
    concurrent rating took it). The oracle's own key signs this way too (an arena battle's openBattle)."""
    clean = check_call(function, payload)
    existing = OutboxItem.objects.filter(key=idempotency_key(function, clean)).first()
    if existing is not None:
        return _queued_before(existing, clean, rater)
    for _ in range(5):
        request = relay.sign_custodial(rater, function, clean, relay.next_nonce(rater))
        try:
            return enqueue(function, rater, clean, depends_on=depends_on, request=request, relayer=relayer,
                           atomic_group=atomic_group)
        except NonceTaken:
            continue
    raise NonceTaken(f"could not find a free nonce for {rater}")
