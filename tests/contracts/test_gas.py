"""Gas per evaluation does not grow with the number of models or contexts (REPUTATION.md,
"Numbers": running sums for the means).

The same model history is played in a context holding 1 model, in one holding 60 models and in
a world with 40 more contexts; the gas of the model's *second* autoEval, humEval and
updateReputation (receipt gasUsed), and of its third rating signed by the user and relayed through
the ERC-2771 forwarder, must agree within 2%. So must an arena battle of the model against a
filler (`openBattle`, which brings the small context to 2 models, and the user's `vote`,
direct and relayed). Ids have the same byte pattern in every scenario and the human parts use the
same answers after the same gaps, so calldata and the exp series cost the same.
"""

from __future__ import annotations

import pytest

from apps.chain import metatx
from tests.support import new_account

pytestmark = pytest.mark.chain

SCENARIOS = ("1 model", "60 models", "60 models, 42 contexts")
CTX = {"1 model": b"\xc1" * 32, "60 models": b"\xc2" * 32, "60 models, 42 contexts": b"\xc3" * 32}
MODEL = {"1 model": b"\xa1" * 32, "60 models": b"\xa2" * 32, "60 models, 42 contexts": b"\xa3" * 32}
FIRST = {"1 model": b"\x51" * 32, "60 models": b"\x52" * 32, "60 models, 42 contexts": b"\x53" * 32}
SECOND = {"1 model": b"\x61" * 32, "60 models": b"\x62" * 32, "60 models, 42 contexts": b"\x63" * 32}
THIRD = {"1 model": b"\x71" * 32, "60 models": b"\x72" * 32, "60 models, 42 contexts": b"\x73" * 32}
# Two arena battles per scenario, each of two interactions (the model's and the first filler's).
ARENA = {s: [bytes([0x81 + 0x10 * k + n]) * 32 for k in range(6)] for n, s in enumerate(SCENARIOS)}
FILLERS = [bytes([0xF0, k + 1]) * 16 for k in range(59)]
EXTRA_CONTEXTS = [bytes([0xE0, k + 1]) * 16 for k in range(40)]
SA, WA = 7 * 10**17, 6 * 10**17
ANSWERS = (4, 5, 3, 4, 4, 2)
GAS = 30_000_000


def auto_row(iid, model, ctx, user, sa=SA, wa=WA):
    return (iid, model, ctx, user, True, sa, wa, "ipfs://evidence")


@pytest.fixture(scope="module")
def gas(driver, admin, oracle):
    snap = driver.snapshot()
    try:
        dev = new_account()
        users = {s: new_account() for s in SCENARIOS}
        filler_user = new_account()
        t0 = driver.latest_timestamp() + 10
        driver.set_next_timestamp(t0)
        driver.transact(admin, "identity", "register", dev.address, 2, "")
        for account in [filler_user, *users.values()]:
            driver.set_next_timestamp(t0)
            driver.transact(admin, "identity", "register", account.address, 1, "")
        for s in SCENARIOS:
            driver.transact(admin, "reputation", "addContext", CTX[s], s)
        for ctx in EXTRA_CONTEXTS:
            driver.transact(admin, "reputation", "addContext", ctx, "extra")
        models = [*MODEL.values(), *FILLERS]
        driver.transact(dev, "reputation", "addModelBatch", models, ["ipfs://m"] * len(models), gas=GAS)

        # 59 other models in the crowded contexts; the last scenario also has one model in each of
        # 40 more contexts
        rows = []
        for k, filler in enumerate(FILLERS):
            sa = (k * 37 % 101) * 10**16  # spread over [0, 1]
            rows.append(auto_row((0x1000 + k).to_bytes(32, "big"), filler, CTX["60 models"], filler_user.address, sa))
            rows.append(auto_row((0x2000 + k).to_bytes(32, "big"), filler, CTX["60 models, 42 contexts"],
                                 filler_user.address, sa))
        for k, ctx in enumerate(EXTRA_CONTEXTS):
            rows.append(auto_row((0x3000 + k).to_bytes(32, "big"), FILLERS[k], ctx, filler_user.address))
        for start in range(0, len(rows), 40):
            chunk = rows[start:start + 40]
            driver.transact(oracle, "reputation", "autoEvalBatch", *[list(c) for c in zip(*chunk)], gas=GAS)
        for s in SCENARIOS:
            assert driver.view("reputation", "contextStats", CTX[s])[1] == (0 if s == "1 model" else 59)
        assert driver.view("reputation", "contextCount")[0] == 1 + len(SCENARIOS) + len(EXTRA_CONTEXTS)

        # the model's first interaction, all three steps, then its second
        # every block of a scenario at the same explicit timestamp, so that each D is the same
        t1 = driver.latest_timestamp() + 3_600

        def at(ts, account, *call):
            driver.set_next_timestamp(ts)
            return driver.transact(account, "reputation", *call)

        for s in SCENARIOS:
            at(t1, oracle, "autoEval", *auto_row(FIRST[s], MODEL[s], CTX[s], users[s].address))
            at(t1, users[s], "humEval", FIRST[s], *ANSWERS)
            at(t1, oracle, "updateReputation", FIRST[s])
        assert driver.view("reputation", "contextStats", CTX["1 model"])[1] == 1
        assert driver.view("reputation", "contextStats", CTX["60 models"])[1] == 60
        out: dict[str, dict[str, int]] = {"autoEval": {}, "humEval": {}, "updateReputation": {}}
        t2 = t1 + 5_400
        for s in SCENARIOS:
            row = auto_row(SECOND[s], MODEL[s], CTX[s], users[s].address)
            out["autoEval"][s] = at(t2, oracle, "autoEval", *row).gas_used
            out["humEval"][s] = at(t2, users[s], "humEval", SECOND[s], *ANSWERS).gas_used
            out["updateReputation"][s] = at(t2, oracle, "updateReputation", SECOND[s]).gas_used
            assert driver.view("reputation", "reputation", MODEL[s], CTX[s])[3:] == (2, 2)
        # A third: its rating signed by the user and relayed through the forwarder, the
        # relayer's whole transaction (the forwarder's checks and the humEval it makes).
        out["humEval relayed"] = {}
        relayer = new_account()
        driver.fund(relayer.address)
        d = driver.deployment
        t3 = t2 + 5_400
        for s in SCENARIOS:
            at(t3, oracle, "autoEval", *auto_row(THIRD[s], MODEL[s], CTX[s], users[s].address))
            request = metatx.sign_request(metatx.ForwardRequest(
                sender=users[s].address, to=d.reputation, gas=200_000, nonce=0, deadline=t3 + 3_600,
                data=driver.ledger.abis["reputation"].fn("humEval").encode(THIRD[s], *ANSWERS)),
                users[s].key, d.chainId, d.forwarder)
            driver.set_next_timestamp(t3)
            out["humEval relayed"][s] = driver.transact(relayer, "forwarder", "execute",
                                                        metatx.request_tuple(request)).gas_used
            assert driver.view("reputation", "interaction", THIRD[s])[8] is True  # humanDone
        # Arena battles: the model against the first filler on one prompt of the user; the
        # first battle's vote sent by the user, the second's signed by the user and relayed.
        out["openBattle"], out["vote"], out["vote relayed"] = {}, {}, {}
        t4 = t3 + 5_400
        for s in SCENARIOS:
            first, second, a1, b1, a2, b2 = ARENA[s]
            rows = [auto_row(iid, model, CTX[s], users[s].address)
                    for iid, model in ((a1, MODEL[s]), (b1, FILLERS[0]), (a2, MODEL[s]), (b2, FILLERS[0]))]
            driver.set_next_timestamp(t4)
            driver.transact(oracle, "reputation", "autoEvalBatch", *[list(c) for c in zip(*rows)], gas=GAS)
            out["openBattle"][s] = at(t4, oracle, "openBattle", first, a1, b1, False).gas_used
            at(t4, oracle, "openBattle", second, a2, b2, False)
            out["vote"][s] = at(t4, users[s], "vote", first, 1).gas_used
            request = metatx.sign_request(metatx.ForwardRequest(
                sender=users[s].address, to=d.reputation, gas=100_000, nonce=1, deadline=t4 + 3_600,
                data=driver.ledger.abis["reputation"].fn("vote").encode(second, 2)),
                users[s].key, d.chainId, d.forwarder)
            driver.set_next_timestamp(t4)
            out["vote relayed"][s] = driver.transact(relayer, "forwarder", "execute",
                                                     metatx.request_tuple(request)).gas_used
            assert [driver.view("reputation", "battle", b)[7] for b in (first, second)] == [1, 2]  # outcomes
        print("\ngas of a model's second evaluation (receipt gasUsed):")
        for fn, by in out.items():
            print(f"  {fn:17s}" + "  ".join(f"{s}: {g:7d}" for s, g in by.items()))
        yield out
    finally:
        driver.revert_to(snap)


@pytest.mark.parametrize("function", ["autoEval", "humEval", "updateReputation", "humEval relayed",
                                      "openBattle", "vote", "vote relayed"])
@pytest.mark.parametrize("crowded", ["60 models", "60 models, 42 contexts"])
def test_gas_per_evaluation_does_not_grow_with_the_number_of_models(gas, function, crowded):
    small, big = gas[function]["1 model"], gas[function][crowded]
    print(f"{function}: 1 model {small}, {crowded} {big} ({(big - small) / small:+.3%})")
    assert small > 21_000
    assert abs(big - small) <= 0.02 * small
