"""Ratings signed by their raters and relayed in batches (ERC-2771).

A rating's `humEval` is not a transaction from the rater's address any more but a `ForwardRequest`
the rater signs (EIP-712, no gas) and the relayer (LLMCHAIN_RELAYER_KEY) sends, many at a time, in
one `executeBatch` through the forwarder the Reputation contract trusts; the contract sees the rater
as the caller. Two kinds of signer:

- custodial (the default): the site holds the rater's key (keys.SigningKey) and signs the request
  when the rating is sent, off-chain;
- wallet: the rater linked an address whose key only their wallet holds; the browser asks the
  wallet to sign the typed data `prepare` returns (eth_signTypedData_v4) and sends the signature,
  which is checked here before anything is stored. The site cannot sign for them.

Nonces: the forwarder takes a signer's requests in nonce order, so each request holds the next
nonce of its signer (`OutboxItem.relay_nonce`, unique per signer) and the submitter relays a
signer's requests in that order. A request the forwarder skipped (expired, or its nonce was used)
is signed again for a custodial rater by the submitter; a wallet user is told to sign again.
"""

from __future__ import annotations

import os
from functools import lru_cache

from django.conf import settings
from django.db.models import Max

from lib.ids import b32

from .abi import ContractAbi
from .client import ChainError, chain_time
from .keys import account_for
from .ledger import CALLS, GRANTABLE_ROLES, RELAYABLE, Deployment, Ledger, default_client
from .metatx import ForwardRequest, sign_request, typed_data
from .models import OutboxItem, SigningKey

OFF = {"0", "off", "false", "no", "direct"}


def deployment() -> Deployment | None:
    """This site's deployment, or None before `chain deploy` wrote it."""
    try:
        path = settings.LLMCHAIN_DEPLOYMENT
        return _deployment(str(path), os.stat(path).st_mtime)  # a new deployment file is read anew
    except FileNotFoundError:
        return None


@lru_cache(maxsize=8)
def _deployment(path: str, mtime: float) -> Deployment:
    return Deployment.load(path)


def enabled() -> bool:
    """Ratings are relayed when LLMCHAIN_RELAY allows it and the deployment has a forwarder."""
    if str(settings.LLMCHAIN_RELAY).strip().lower() in OFF:
        return False
    found = deployment()
    return bool(found and found.forwarder)


@lru_cache(maxsize=4)
def _abi(contract: str) -> ContractAbi:
    return ContractAbi.load(contract)


def call_data(function: str, payload: dict) -> bytes:
    """The calldata a request for `function` carries (what its signer signs): the payload must be
    `outbox.check_call`'s canonical form."""
    spec = CALLS[function]
    return _abi({"reputation": "Reputation"}[spec.contract]).fn(function).encode(*spec.args(payload))


def is_custodial(address: str) -> bool:
    return SigningKey.objects.filter(address=address).exists()


def chain_nonce(signer: str, block: str | int = "latest") -> int:
    """The signer's next nonce as the forwarder counts it (ChainError when the node is away)."""
    dep = deployment()
    if dep is None or not dep.forwarder:
        raise ChainError("no forwarder is deployed")
    return Ledger(default_client(), dep).view("forwarder", "nonces", signer, block=block)[0]


def next_nonce(signer: str, *, read_chain: bool = False) -> int:
    """The nonce the signer's next request takes: one above the highest its requests here hold, or
    the forwarder's count for a signer with none (and, `read_chain`, whichever is higher: a wallet
    may have used nonces elsewhere)."""
    top = OutboxItem.objects.filter(signer=signer, relay_nonce__isnull=False).aggregate(n=Max("relay_nonce"))["n"]
    ours = top + 1 if top is not None else None
    if ours is not None and not read_chain:
        return ours
    try:
        onchain = chain_nonce(signer)
    except (ChainError, ValueError):
        if ours is None and read_chain:
            raise
        onchain = 0  # a custodial key signs only here: nothing of its own can be on-chain without a row
    return max(ours or 0, onchain)


CLOCK_TTL_S = 60


def chain_now() -> int:
    """The chain's clock (unix seconds), which a request's deadline is checked against: this machine's
    clock plus how far the chain's latest block was ahead of it when last read (once a minute, kept in
    the cache); this machine's clock while the node cannot be read. A chain's time may run ahead of
    the wall (a development node told to skip a day): deadlines follow the chain's."""
    from django.core.cache import cache

    dep = deployment()
    key = f"chain:clock:{dep.chainId if dep else 0}:{settings.LLMCHAIN_RPC_URL}"
    offset = cache.get(key)
    if offset is None:
        try:
            offset = default_client().clock_offset()
        except (ChainError, ValueError, KeyError):
            return chain_time(None)
        cache.set(key, offset, CLOCK_TTL_S)
    return chain_time(offset)


def unsigned(signer: str, function: str, payload: dict, nonce: int, deadline: int | None = None) -> ForwardRequest:
    dep = deployment()
    if function not in RELAYABLE or dep is None or not dep.forwarder:
        raise ValueError(f"{function} cannot be relayed here")
    return ForwardRequest(sender=signer, to=dep.reputation, gas=RELAYABLE[function], nonce=nonce,
                          deadline=deadline or chain_now() + settings.LLMCHAIN_RELAY_DEADLINE_S,
                          data=call_data(function, payload))


def sign_custodial(signer: str, function: str, payload: dict, nonce: int) -> ForwardRequest:
    """The request signed with the key the site holds for `signer` (KeyError_ for a wallet user)."""
    dep = deployment()
    request = unsigned(signer, function, payload, nonce)
    return sign_request(request, account_for(signer).key, dep.chainId, dep.forwarder)


def message(request: ForwardRequest) -> dict:
    """The typed data a wallet signs for `request` (eth_signTypedData_v4)."""
    dep = deployment()
    return typed_data(request, dep.chainId, dep.forwarder)


def vote_blocker(signer: str, model_ids: list[str]) -> str:
    """What would make a battle's vote by `signer` revert on-chain now although its battle opens (the
    forwarder runs an atomic batch's calls even when one reverts, so the site checks first), in plain
    words, or "": the signer lost USER_ROLE (suspended) or owns one of the two models. The battle's
    user, the outcome and the interactions are checked where the vote is taken. ChainError when the
    node cannot be read."""
    dep = deployment()
    if dep is None:
        raise ChainError("no deployment")
    ledger = Ledger(default_client(), dep)
    if not ledger.view("access", "hasRole", GRANTABLE_ROLES["user"], signer)[0]:
        return "your account may not vote on the chain now"
    if any(ledger.view("reputation", "modelOwner", b32(m))[0] == signer for m in model_ids):
        return "you own one of the two models"
    return ""
