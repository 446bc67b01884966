"""The deployed contracts, and how each outbox function becomes calldata.

One place knows, for every contract call the site makes: its arguments from an outbox
payload, its batch form, its gas, and how to tell that it is already applied on-chain.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from eth_utils import keccak

from lib.ids import b32
from lib.reputation import answer_score, lambda_wad_from

from .abi import ContractAbi
from .client import ChainClient, ChainError, Reverted


@dataclass(frozen=True)
class Deployment:
    chainId: int
    identity: str
    access: str
    reputation: str
    deployBlock: int
    # The ERC-2771 forwarder the Reputation contract trusts (relayed, signed requests); "" in a
    # deployment file written before it existed.
    forwarder: str = ""

    @classmethod
    def load(cls, path: Path) -> "Deployment":
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"no deployment file at {path}: run `python manage.py chain deploy` first") from exc
        return cls(**{k: data[k] for k in ("chainId", "identity", "access", "reputation", "deployBlock")},
                   forwarder=data.get("forwarder", ""))

    def save(self, path: Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")


@dataclass(frozen=True)
class CallSpec:
    contract: str  # "reputation" | "identity" | "access"
    args: Callable[[dict], tuple]
    gas: int
    batch: str | None = None  # name of the batch form
    batch_gas_per_item: int = 0


def _auto_eval_args(p: dict) -> tuple:
    return (b32(p["interactionId"]), b32(p["modelId"]), b32(p["contextId"]), p["user"],
            bool(p["hasReference"]), int(p["sA"]), int(p["wA"]), p["evidenceCid"])


# ACSC roles the site grants and revokes after registration, by name (keccak256("<NAME>")).
GRANTABLE_ROLES: dict[str, bytes] = {name: keccak(text=f"{name.upper()}_ROLE")
                                     for name in ("user", "developer", "expert")}


def _role_args(p: dict) -> tuple:
    return (GRANTABLE_ROLES[p["role"]], p["account"])


HUM_FIELDS = ("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")

CALLS: dict[str, CallSpec] = {
    "addContext": CallSpec("reputation", lambda p: (b32(p["contextId"]), p["name"]), 200_000),
    "addModel": CallSpec("reputation", lambda p: (b32(p["modelId"]), p["metadataCid"]), 200_000,
                         "addModelBatch", 100_000),
    # Sent by the model's owner; no batch form (an owner edits one model at a time).
    "updateModelMetadata": CallSpec("reputation", lambda p: (b32(p["modelId"]), p["metadataCid"]), 100_000),
    "register": CallSpec("identity", lambda p: (p["account"], int(p["role"]), p.get("profileCid", "")),
                         300_000),
    # LLMChainAccess.grantRole / revokeRole (OpenZeppelin), sent by the admin: grantRole uses
    # ~51k (one new storage slot and an event), revokeRole less. No batch form: role changes are
    # rare, one account at a time.
    "grantRole": CallSpec("access", _role_args, 100_000),
    "revokeRole": CallSpec("access", _role_args, 100_000),
    "autoEval": CallSpec("reputation", _auto_eval_args, 350_000, "autoEvalBatch", 220_000),
    "humEval": CallSpec("reputation",
                        lambda p: (b32(p["interactionId"]), *(int(p[f]) for f in HUM_FIELDS)), 200_000),
    "updateReputation": CallSpec("reputation", lambda p: (b32(p["interactionId"]),), 150_000,
                                 "updateReputationBatch", 90_000),
    # The arena: the oracle opens a battle (155k measured), its user votes (36k direct).
    "openBattle": CallSpec("reputation", lambda p: (b32(p["battleId"]), b32(p["interactionA"]),
                                                    b32(p["interactionB"]), bool(p["voided"])), 250_000,
                           "openBattleBatch", 180_000),
    "vote": CallSpec("reputation", lambda p: (b32(p["battleId"]), int(p["outcome"])), 100_000),
}

# Calls a rater may sign as an ERC-2771 request for the relayer to send through the forwarder
# (apps/chain/relay.py), with the gas each request gives its call: what the call needs at most, measured
# through the forwarder with every slot cold (humEval 97k, a rater's first, a day on; vote 14.4k;
# openBattle 132.5k: tests/security/test_relay_door.py, test_atomic_vote.py), with a margin (x2.1,
# x2.8, x2.1). A request must carry exactly this much: more would let one signer's request spend the
# relayer's whole batch (the node refuses a transaction above the block's gas limit, and the forwarder
# stops a batch that cannot give a request what it signed), less could run its own call out.
# openBattle is relayed only as a request signed by this site's own oracle key (ORACLE_SIGNED): it goes
# on-chain in one atomic batch with the battle's vote (apps/chat/arena.py), never from a user.
RELAYABLE: dict[str, int] = {"humEval": 200_000, "vote": 40_000, "openBattle": 280_000}
ORACLE_SIGNED = frozenset({"openBattle"})
# A relayed request's nonce may be at most this far above its signer's next one (a wallet user may sign a
# few ratings before their answers are scored and queued); a request further ahead would only wait.
RELAY_NONCE_WINDOW = 16
# Per request in an executeBatch: the call (humEval <= 113k) plus the forwarder's share (signature
# recovery, nonce, event, calldata: ~38k measured for one execute) with room to spare; a batch that
# still runs out is retried with more, then one request at a time.
RELAY_ITEM_GAS = 170_000

# Limits sit well above the measured use (contracts/README.md: autoEval <= 206k creating a REP,
# humEval <= 113k, updateReputation <= 64k, updateModelMetadata <= 32k with a 200-character CID);
# a call that still runs out is retried with more.
BATCH_BASE_GAS = 60_000


class Ledger:
    """The contracts on one node: access, identity, reputation and the forwarder."""

    def __init__(self, client: ChainClient, deployment: Deployment):
        self.client = client
        self.deployment = deployment

    @cached_property
    def abis(self) -> dict[str, ContractAbi]:
        return {"reputation": ContractAbi.load("Reputation"), "identity": ContractAbi.load("Identity"),
                "access": ContractAbi.load("LLMChainAccess"), "forwarder": ContractAbi.load("Forwarder")}

    def address(self, contract: str) -> str:
        return getattr(self.deployment, contract)

    @cached_property
    def lambda_wad(self) -> int:
        """The deployment's lambda of F_D (1e18 per minute), as the Reputation contract holds it."""
        return self.view("reputation", "lambdaWad")[0]

    def head_and_final(self) -> tuple[int, int]:
        """The node's head and its last final block under LLMCHAIN_FINALITY."""
        return self.client.head_and_final(finality_rule(self.client))

    # -- calldata ------------------------------------------------------------------------------
    def calldata(self, function: str, payloads: list[dict]) -> tuple[str, bytes, int]:
        """(to, data, gas) for one call, or for the batch form when there are several."""
        spec = CALLS[function]
        abi = self.abis[spec.contract]
        if len(payloads) == 1:
            data = abi.fn(function).encode(*spec.args(payloads[0]))
            gas = spec.gas
        else:
            rows = [spec.args(p) for p in payloads]
            columns = [list(col) for col in zip(*rows)]
            data = abi.fn(spec.batch).encode(*columns)
            gas = BATCH_BASE_GAS + spec.batch_gas_per_item * len(payloads)
        return self.address(spec.contract), data, gas

    def request_calldata(self, function: str, payload: dict) -> tuple[str, bytes]:
        """(to, data) of the call a relayed request makes: what its signer signs."""
        spec = CALLS[function]
        return self.address(spec.contract), self.abis[spec.contract].fn(function).encode(*spec.args(payload))

    def relay_calldata(self, requests: list, refund_receiver: str) -> tuple[str, bytes, int]:
        """(forwarder, data, gas) of one executeBatch relaying signed `requests` (metatx.ForwardRequest).
        With a refund receiver the batch is not atomic: a request that is invalid (expired, its nonce
        used, a bad signature) is skipped, and one whose call reverts is executed with success=false;
        either way the others go on. Which did what is read from the ExecutedForwardRequest events."""
        from .metatx import encode_batch

        data = encode_batch(self.abis["forwarder"].fn("executeBatch").selector, requests, refund_receiver)
        gas = BATCH_BASE_GAS + RELAY_ITEM_GAS * len(requests) + max(r.gas for r in requests)
        return self.address("forwarder"), data, gas

    # -- reads ---------------------------------------------------------------------------------
    def view(self, contract: str, function: str, *args: Any, block: str | int = "latest") -> tuple:
        abi = self.abis[contract]
        fn = abi.fn(function)
        try:
            out = self.client.call(self.address(contract), fn.encode(*args), block)
        except Reverted as exc:
            name, err_args = abi.decode_revert(exc.data)
            raise Reverted(name, err_args, exc.data) from exc
        return fn.decode_output(out)

    def reputation(self, model_id: bytes, context_id: bytes) -> tuple[int, int, int, int, int]:
        return self.view("reputation", "reputation", model_id, context_id)  # type: ignore[return-value]

    def simulate(self, sender: str, to: str, data: bytes, contract: str) -> tuple[str, tuple] | None:
        """None when the call would succeed now, else the decoded revert (name, args)."""
        try:
            self.client.call(to, data, "latest", sender=sender)
            return None
        except Reverted as exc:
            return self.abis[contract].decode_revert(exc.data)

    def already_applied(self, function: str, sender: str, payload: dict, error: str) -> bool:
        """True when a revert only says the call's effect is already on-chain, as intended."""
        if function == "autoEval" and error == "InteractionExists":
            rec = self.view("reputation", "interaction", b32(payload["interactionId"]))
            expected = (b32(payload["modelId"]), b32(payload["contextId"]), payload["user"],
                        bool(payload["hasReference"]), int(payload["sA"]), int(payload["wA"]))
            return tuple(rec[:6]) == expected and rec[10] == keccak(text=payload["evidenceCid"])
        if function == "humEval" and error == "AlreadyEvaluated":
            rec = self.view("reputation", "interaction", b32(payload["interactionId"]))
            return bool(rec[8]) and rec[2] == sender and rec[6] == answer_score(
                int(payload["reliability"]), int(payload["completeness"]), int(payload["utility"]))
        if function == "updateReputation" and error == "AlreadyUpdated":
            return bool(self.view("reputation", "interaction", b32(payload["interactionId"]))[9])
        if function == "openBattle" and error == "BattleExists":
            rec = self.view("reputation", "battle", b32(payload["battleId"]))
            return (rec[3], rec[4], rec[6]) == (b32(payload["interactionA"]), b32(payload["interactionB"]),
                                                bool(payload["voided"]))
        if function == "vote" and error == "AlreadyVoted":
            rec = self.view("reputation", "battle", b32(payload["battleId"]))
            return rec[8] and rec[5] == sender and rec[7] == int(payload["outcome"])
        if function == "addModel" and error == "ModelExists":
            return self.view("reputation", "modelOwner", b32(payload["modelId"]))[0] == sender
        if function == "addContext" and error == "ContextExists":
            return bool(self.view("reputation", "contextExists", b32(payload["contextId"]))[0])
        if function == "register" and error == "AlreadyRegistered":
            return bool(self.view("identity", "isRegistered", payload["account"])[0])
        # grantRole / revokeRole: never needed. OpenZeppelin's AccessControl makes granting a held
        # role (or revoking one not held) a no-op that does not revert; their only revert,
        # AccessControlUnauthorizedAccount, means the sender is not the admin: a real failure.
        # updateModelMetadata: never. The contract keeps no CID to compare with (the event is the
        # record) and none of its reverts (UnknownModel, NotModelOwner, EmptyCid) means "done";
        # sending the same CID again is harmless (one more event, the same current CID), and the
        # outbox key holds the CID, so each queued update is its own call.
        return False


# Chain ids of local development nodes (anvil, Hardhat, Ganache): final after LLMCHAIN_LOCAL_FINALITY blocks.
DEV_CHAIN_IDS = frozenset({31337, 1337})


def finality_rule(client: ChainClient) -> int | str:
    """LLMCHAIN_FINALITY as a depth (0: every block is final) or a block tag ("finalized", "safe")."""
    value = str(settings.LLMCHAIN_FINALITY).strip().lower()
    if value == "auto":
        if settings.LLMCHAIN_POA:
            return 0  # QBFT and IBFT2 blocks are final when they are sealed
        return settings.LLMCHAIN_LOCAL_FINALITY if client.chain_id in DEV_CHAIN_IDS else "finalized"
    if value in ("finalized", "safe"):
        return value
    if value.isdigit():
        return int(value)
    raise ImproperlyConfigured(
        f"LLMCHAIN_FINALITY={settings.LLMCHAIN_FINALITY!r}: use auto, a number of blocks, finalized or safe")


def default_client() -> ChainClient:
    return ChainClient(settings.LLMCHAIN_RPC_URL, poa=settings.LLMCHAIN_POA,
                       gas_price=settings.LLMCHAIN_GAS_PRICE)


def default_ledger() -> Ledger:
    return Ledger(default_client(), Deployment.load(settings.LLMCHAIN_DEPLOYMENT))


def deployment_lambda() -> tuple[int, bool]:
    """The lambda of F_D (1e18 per minute) of this site's Reputation contract and whether it was read
    from the chain: it is fixed at deployment, so it is read once per deployment (in the background:
    a page never waits for it) and kept in the cache; LLMCHAIN_DECAY_LAMBDA (what a new deployment
    would get) until it could be read."""
    from .background import cached_read

    try:
        deployment = Deployment.load(settings.LLMCHAIN_DEPLOYMENT)
    except FileNotFoundError:
        return lambda_wad_from(settings.LLMCHAIN_DECAY_LAMBDA), False
    url, poa = settings.LLMCHAIN_RPC_URL, settings.LLMCHAIN_POA

    def read() -> int | None:
        try:
            return Ledger(ChainClient(url, poa=poa, timeout=5.0, retries=0), deployment).lambda_wad
        except (ChainError, ValueError):
            return None

    found = cached_read(f"chain:lambda-read:{deployment.chainId}:{deployment.reputation.lower()}", read,
                        fresh_s=None, wait_s=0.5, keep_s=None)
    if found is None:
        return lambda_wad_from(settings.LLMCHAIN_DECAY_LAMBDA), False
    return found, True
