"""One signed request never harms another's (relayed ratings and votes, ERC-2771).

- The gas a relayed request must carry (RELAYABLE) is measured here: the least gas each relayed call
  needs through the forwarder on a cold chain, and the bound keeps a margin above it without being
  a blank cheque.
- The door (outbox.check_request, where the site takes a wallet-signed request) refuses a request with
  more gas than its call needs (1e9, 2^62, 2^200), a nonce far ahead of its signer's next one, or a
  deadline too near to relay it; nothing is queued.
- On a real chain, requests that slipped past the door (queued before it existed): gas bombs, an
  overflowing gas value and a flood of future-nonce requests, mixed with honest ratings, leave every
  honest rating confirmed on-chain exactly once, fail only the offenders with words their rater can
  read, and the oracle's calls (on a lane of their own by default) confirm as fast as without them,
  counted in blocks.
- A batch the node refuses (over the block's gas limit) is split until every request goes through.
"""

from __future__ import annotations

import time

import pytest
from eth_account import Account

from apps.chain import metatx, outbox, relay
from apps.chain.keys import new_key, oracle_address, relayer_address
from apps.chain.ledger import RELAY_NONCE_WINDOW, RELAYABLE
from apps.chain.metatx import ForwardRequest
from apps.chain.models import ChainTransaction, OutboxItem
from apps.chain.submitter import Submitter
from lib.ids import b32
from tests.chain.conftest import drain, ledger, ledger_node, rand_id, world  # noqa: F401  (fixtures)
from tests.chain.test_relay import _scored
from tests.contracts.test_access_control import ANSWERS, C1, M1
from tests.support import new_account

ANSWER_FIELDS = dict(zip(("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty"), ANSWERS))


# -- the gas each relayed call needs -------------------------------------------------------------
def _least_gas(driver, signer, call: bytes) -> int:
    """The least `gas` a request carrying `call` may hold and still succeed through the forwarder's
    execute (eth_call: every slot cold, as in a transaction of its own)."""
    d = driver.deployment
    fn = driver.ledger.abis["forwarder"].fn("execute")
    nonce = driver.view("forwarder", "nonces", signer.address)[0]

    def works(gas: int) -> bool:
        request = metatx.sign_request(ForwardRequest(sender=signer.address, to=d.reputation, gas=gas, nonce=nonce,
                                                     deadline=driver.latest_timestamp() + 3600, data=call),
                                      signer.key, d.chainId, d.forwarder)
        try:
            driver.client.call(d.forwarder, fn.encode(metatx.request_tuple(request)), "latest",
                               sender=signer.address)
            return True
        except Exception:  # noqa: BLE001 - any refusal means "not enough"
            return False

    low, high = 1_000, 1_000_000
    assert works(high) and not works(low)
    while high - low > 256:
        mid = (low + high) // 2
        low, high = (low, mid) if works(mid) else (mid, high)
    return high


@pytest.mark.chain
def test_each_relayed_call_gets_the_gas_it_needs_with_a_margin_and_no_more(fresh_chain, admin, oracle):
    d = fresh_chain
    user, developer = new_account(), new_account()
    d.transact(admin, "identity", "register", user.address, 1, "ipfs://u")
    d.transact(admin, "identity", "register", developer.address, 2, "ipfs://d")
    d.transact(admin, "reputation", "addContext", C1, "code")
    d.transact(developer, "reputation", "addModelBatch", [M1, b"\xa2" * 32], ["ipfs://m1", "ipfs://m2"])
    iids = [bytes([0x70 + n]) * 32 for n in range(3)]
    for iid, model in zip(iids, (M1, M1, b"\xa2" * 32)):
        d.transact(oracle, "reputation", "autoEval", iid, model, C1, user.address, True, 7 * 10**17, 6 * 10**17,
                   "ipfs://evidence")
    d.transact(oracle, "reputation", "openBattle", b"\xb9" * 32, iids[1], iids[2], False)
    abi = d.ledger.abis["reputation"]
    # humEval's costliest path: the rater's first rating (a new word for its time, D read from the
    # registration) a day or more after it (D at its cap: the most terms of e^(lambda D)).
    d.client.request("evm_increaseTime", [2 * 86_400])
    d.client.request("evm_mine")
    needs = {"humEval": _least_gas(d, user, abi.fn("humEval").encode(iids[0], *ANSWERS)),
             "vote": _least_gas(d, user, abi.fn("vote").encode(b"\xb9" * 32, 1))}
    print("least gas through the forwarder:", needs, "bound:", RELAYABLE)
    for function, need in needs.items():
        assert 1.5 * need <= RELAYABLE[function] <= 3 * need, (function, need, RELAYABLE[function])


# -- the door ----------------------------------------------------------------------------------------
def _wallet(world):
    wallet = Account.create()
    outbox.enqueue("register", world.admin, {"account": wallet.address, "role": "user"})
    return wallet


def _signed(wallet, iid: str, *, nonce: int = 0, gas: int | None = None, deadline: int | None = None):
    clean = outbox.check_call("humEval", {"interactionId": iid, **ANSWER_FIELDS})
    request = relay.unsigned(wallet.address, "humEval", clean, nonce, deadline)
    if gas is not None:
        request = ForwardRequest(request.sender, request.to, gas, request.nonce, request.deadline, request.data)
    dep = relay.deployment()
    return clean, metatx.sign_request(request, wallet.key, dep.chainId, dep.forwarder)


@pytest.mark.django_db
@pytest.mark.parametrize("fault", ["gas 1e9", "gas 2^62", "gas 2^200", "gas too little", "nonce far ahead",
                                   "deadline in 20 s"])
def test_the_door_refuses_a_request_that_could_harm_others_and_queues_nothing(world, settings, fault):
    settings.LLMCHAIN_RELAY_MIN_DEADLINE_S = 600
    wallet = _wallet(world)
    iid = rand_id()
    kwargs = {"gas 1e9": {"gas": 10**9}, "gas 2^62": {"gas": 2**62}, "gas 2^200": {"gas": 2**200},
              "gas too little": {"gas": RELAYABLE["humEval"] - 1}, "nonce far ahead": {"nonce": RELAY_NONCE_WINDOW},
              "deadline in 20 s": {"deadline": relay.chain_now() + 20}}[fault]
    clean, request = _signed(wallet, iid, **kwargs)
    before = OutboxItem.objects.count()
    with pytest.raises(outbox.InvalidCall) as refused:
        outbox.enqueue("humEval", wallet.address, clean, request=request)
    assert OutboxItem.objects.count() == before
    said = "gas" if fault.startswith("gas") else {"nonce far ahead": "too far ahead",
                                                   "deadline in 20 s": "expires too soon"}[fault]
    assert said in str(refused.value)


@pytest.mark.django_db
def test_the_door_takes_a_nonce_within_the_window_and_a_deadline_far_enough(world, settings):
    settings.LLMCHAIN_RELAY_MIN_DEADLINE_S = 600
    wallet = _wallet(world)
    clean, request = _signed(wallet, rand_id(), nonce=RELAY_NONCE_WINDOW - 1,
                             deadline=relay.chain_now() + 700)
    item = outbox.enqueue("humEval", wallet.address, clean, request=request)
    assert item.relay_nonce == RELAY_NONCE_WINDOW - 1


# -- on a real chain -------------------------------------------------------------------------------
def _slipped_past_the_door(wallet, iid: str, nonce: int, gas: int, padding: int = 0) -> OutboxItem:
    """A request as a door without today's checks would have queued it (signed by its wallet); with
    `padding`, that many more bytes of call data than its call (a batch holding it would cost more gas
    than it gives: the node holds such a transaction and never mines it)."""
    clean, request = _signed(wallet, iid, nonce=nonce, gas=gas)
    if padding:
        dep = relay.deployment()
        request = metatx.sign_request(ForwardRequest(request.sender, request.to, request.gas, request.nonce,
                                                     request.deadline, request.data + b"\xff" * padding),
                                      wallet.key, dep.chainId, dep.forwarder)
    return OutboxItem.objects.create(function="humEval", key=f"humEval:{iid}", payload=clean,
                                     sender_address=relayer_address(wallet.address), signer=wallet.address,
                                     request=metatx.to_json(request), relay_nonce=nonce)


def _round(world, *, attack: bool) -> dict:
    """Honest ratings (custodial and wallet) and new oracle calls queued at once, with or without the
    attack's requests; one submitter (a pass holds at most 20 calls a lane) runs until the honest
    ratings and the oracle's calls are confirmed. Returns what happened and how long it took, in seconds,
    in blocks (from the first block that could hold the oracle's calls, how many blocks later the last
    of them was mined, and how many later the site saw them all confirmed: printed, since a loaded
    machine stretches a pass over more blocks), and in the submitter's passes: in which pass the last
    of the oracle's calls was sent, which the attack must not push back whatever the machine's load."""
    raters = [*world.users, *(w.address for w in world.wallets)]
    scored = {r: [_scored(world, r) for _ in range(3 if r in world.users else 2)] for r in raters}
    drain(Submitter(world.ledger, owner="setup"))
    before = world.ledger.reputation(b32(world.model), b32(world.context))
    bad: list[OutboxItem] = []
    oversized = None
    if attack:
        for gas in (10**9, 2**62, 2**200):
            bad.append(_slipped_past_the_door(Account.create(), rand_id(), 0, gas))
        oversized = _slipped_past_the_door(Account.create(), rand_id(), 0, RELAYABLE["humEval"], padding=200_000)
        for _ in range(20):  # far-ahead nonces that can never be relayed (nonce 0 never comes), queued first
            sybil = Account.create()
            for nonce in range(1, 11):
                _slipped_past_the_door(sybil, rand_id(), nonce, RELAYABLE["humEval"])
    start = time.monotonic()
    honest = []
    for rater, rated in scored.items():
        wallet = next((w for w in world.wallets if w.address == rater), None)
        for iid, auto in rated:
            if wallet is None:
                honest.append(outbox.enqueue_signed("humEval", rater, {"interactionId": iid, **ANSWER_FIELDS},
                                                    depends_on=auto))
            else:
                clean, request = _signed(wallet, iid, nonce=relay.next_nonce(rater))
                honest.append(outbox.enqueue("humEval", rater, clean, depends_on=auto, request=request))
    client = world.ledger.client
    first_block = client.block_number() + 1  # the first block that can hold the oracle's calls
    oracle_calls = [_scored(world, world.users[0])[1] for _ in range(8)]
    times: dict[str, float] = {}
    blocks: dict[str, int] = {}
    passes = {"run": 0}
    submitter = Submitter(world.ledger, owner="round", max_items=20)
    run_once = submitter.run_once

    def counted_pass():
        passes["run"] += 1
        worked = run_once()
        if "sent" not in passes and not OutboxItem.objects.filter(pk__in=[r.pk for r in oracle_calls],
                                                                 transaction__isnull=True).exists():
            passes["sent"] = passes["run"]
        return worked
    submitter.run_once = counted_pass

    def done() -> bool:
        for name, rows in (("oracle", oracle_calls), ("ratings", honest)):
            if name not in times and OutboxItem.objects.filter(pk__in=[r.pk for r in rows],
                                                               status="confirmed").count() == len(rows):
                times[name] = time.monotonic() - start
                if name == "oracle":
                    blocks["confirmed"] = client.block_number() - first_block
        return len(times) == 2

    drain(submitter, timeout=150, until=done, what="confirming")
    after = world.ledger.reputation(b32(world.model), b32(world.context))
    blocks["mined"] = max(ChainTransaction.objects.filter(items__in=[r.pk for r in oracle_calls])
                          .values_list("block_number", flat=True)) - first_block
    return {"times": times, "oracle_blocks": blocks, "oracle_sent_in_pass": passes["sent"], "honest": honest,
            "bad": bad, "oversized": oversized, "scored": scored, "moved": after[4] - before[4]}


@pytest.mark.django_db(transaction=True)
def test_gas_bombs_and_a_nonce_flood_leave_every_honest_rating_confirmed_once_and_the_oracle_on_time(
        world, settings):
    settings.LLMCHAIN_RELAYER_KEY = ""  # the default: a relayer of its own, derived from the oracle's key
    assert relayer_address() != oracle_address()
    world.wallets = [_wallet(world) for _ in range(2)]
    drain(Submitter(world.ledger, owner="setup"))

    calm = _round(world, attack=False)
    attacked = _round(world, attack=True)
    print(f"oracle's calls confirmed in {calm['times']['oracle']:.1f} s without the attack, "
          f"{attacked['times']['oracle']:.1f} s with it; in blocks after the first that could hold them, "
          f"{calm['oracle_blocks']} and {attacked['oracle_blocks']}; honest ratings in "
          f"{calm['times']['ratings']:.1f} s and {attacked['times']['ratings']:.1f} s; sent in pass "
          f"{calm['oracle_sent_in_pass']} and {attacked['oracle_sent_in_pass']}")
    for result in (calm, attacked):
        assert all(item.status == "confirmed" for item in OutboxItem.objects.filter(
            pk__in=[h.pk for h in result["honest"]])), "every honest rating confirmed"
        assert result["moved"] == len(result["honest"]), "each one moved Rh once: nHuman counts them exactly"
        for rater, rated in result["scored"].items():
            for iid, _ in rated:
                assert world.ledger.view("reputation", "interaction", b32(iid))[8] is True
    for rater in [*world.users, *(w.address for w in world.wallets)]:
        assert world.ledger.view("forwarder", "nonces", rater)[0] == OutboxItem.objects.filter(
            signer=rater, status="confirmed").count(), "no request of an honest rater applied twice or lost"
    for item in attacked["bad"]:
        item.refresh_from_db()
        assert item.status == "failed" and "gas" in item.last_error and item.failure == OutboxItem.Failure.UNUSABLE
        assert item.needs_new_signature
        assert world.ledger.view("forwarder", "nonces", item.signer)[0] == 0
    oversized = attacked["oversized"]
    oversized.refresh_from_db()
    assert "another call" in oversized.last_error and oversized.failure == OutboxItem.Failure.UNUSABLE
    assert oversized.needs_new_signature
    assert world.ledger.view("forwarder", "nonces", oversized.signer)[0] == 0
    flood = OutboxItem.objects.filter(relay_nonce__gte=1, status="pending").exclude(signer="")
    assert flood.count() == 200 and not flood.filter(transaction__isnull=False).exists(), "never sent"
    # The oracle's calls are not held up: sent in the same pass of the submitter as without the attack
    # (the first one: the bad requests and the flood never take their place in a pass). Counted in
    # passes, not blocks or seconds: a loaded machine stretches a pass over more blocks (mined 1 block
    # after calm and 3 attacked on a run beside other tests, 0 and 0-1 alone), not a call into a later pass.
    assert attacked["oracle_sent_in_pass"] == calm["oracle_sent_in_pass"] == 1, (
        calm["oracle_sent_in_pass"], attacked["oracle_sent_in_pass"])


@pytest.mark.django_db(transaction=True)
def test_a_batch_the_node_refuses_is_split_until_every_request_goes_through(world):
    users = world.users + [new_key(f"rater{i}").address for i in range(5)]
    for u in users[3:]:
        outbox.enqueue("register", world.admin, {"account": u, "role": "user"})
    scored = [(u, *_scored(world, u)) for u in users]
    drain(Submitter(world.ledger, owner="setup"))
    client = world.ledger.client
    limit = int(client.get_block("latest")["gasLimit"], 16)
    # Eight requests in one executeBatch ask for ~1.6M gas; one alone, or four, fit under 1M.
    client.request("evm_setBlockGasLimit", [hex(1_000_000)])
    try:
        rows = [outbox.enqueue_signed("humEval", u, {"interactionId": iid, **ANSWER_FIELDS}, depends_on=auto)
                for u, iid, auto in scored]
        submitter = Submitter(world.ledger, owner="split", batch_size=64)
        drain(submitter, timeout=120, until=lambda: not OutboxItem.objects.filter(
            pk__in=[r.pk for r in rows]).exclude(status="confirmed").exists())
    finally:
        client.request("evm_setBlockGasLimit", [hex(limit)])
    assert submitter.stats["split"] >= 1
    assert ChainTransaction.objects.filter(status="dropped", function="executeBatch").exists()
    for u, iid, _ in scored:
        assert world.ledger.view("reputation", "interaction", b32(iid))[8] is True
        assert world.ledger.view("forwarder", "nonces", u)[0] == 1
