"""The Reputation contract and lib.reputation.ReputationModel agree to the wei (REPUTATION.md).

Hypothesis draws random sequences of registrations, contexts, models, automatic parts (with and
without a reference, sA/wA anywhere in [0, 1e18] including 0, 0.5 and 1), human parts (random
Likert answers after random gaps of 0 s to 3 days, set as the next block's timestamp) and
updateReputation calls; each is applied to the contract and to the mirror, and every score, every
context's running sums, the HumanEvaluated event and the interaction view must agree exactly.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.chain.client import from_hex
from lib.reputation import GLOBAL_CONTEXT, HALF, WAD, ReputationModel, minutes_since
from tests.support import new_account

pytestmark = pytest.mark.chain

DAY = 86_400
USERS = [new_account() for _ in range(3)]
DEVELOPER = new_account()
MAX_CONTEXTS = 3  # besides the global one
MAX_MODELS = 4

SCORES = st.one_of(st.sampled_from([0, 1, HALF, WAD - 1, WAD]), st.integers(0, WAD))
LIKERT = st.integers(1, 5)
HUMAN_GAPS = st.one_of(
    st.sampled_from([0, 1, 59, 60, 61, 3_600, DAY - 1, DAY, DAY + 1, 3 * DAY]),
    st.integers(0, 3 * DAY),
)
OTHER_GAPS = st.one_of(st.just(0), st.integers(0, 600), st.integers(0, 3 * DAY))


def events(driver, receipt, name):
    abi = driver.ledger.abis["reputation"]
    address = driver.ledger.address("reputation").lower()
    out = []
    for log in receipt.raw["logs"]:
        if log["address"].lower() != address:
            continue
        decoded = abi.decode_log([from_hex(t) for t in log["topics"]], from_hex(log["data"]))
        if decoded and decoded[0] == name:
            out.append(decoded[1])
    return out


class Run:
    """One example: the same calls to the chain and to the mirror."""

    def __init__(self, driver, admin, oracle):
        self.d, self.admin, self.oracle = driver, admin, oracle
        self.m = ReputationModel()
        self.now = driver.latest_timestamp()
        self.contexts: list[bytes] = []
        self.models: list[bytes] = []
        self.users: list = []
        self.next_iid = 0

    def send(self, gap, account, contract, function, *args):
        self.d.set_next_timestamp(self.now + gap)
        receipt = self.d.transact(account, contract, function, *args)
        assert receipt.status == 1
        assert receipt.timestamp == self.now + gap
        self.now = receipt.timestamp
        return receipt

    def check_pair(self, model, ctx):
        assert self.d.view("reputation", "reputation", model, ctx) == self.m.reputation(model, ctx), (model, ctx)

    def check_updated_events(self, receipt):
        for ev in events(self.d, receipt, "ReputationUpdated"):
            state = (ev["rA"], ev["rH"], ev["r"], ev["nAuto"], ev["nHuman"])
            assert state == self.m.reputation(ev["modelId"], ev["contextId"])

    # -- the operations ------------------------------------------------------------------------
    def register(self, gap):
        user = USERS[len(self.users)]
        self.send(gap, self.admin, "identity", "register", user.address, 1, "")
        at = self.d.view("identity", "registeredAt", user.address)[0]
        assert at == self.now
        self.m.register(user.address, at)
        self.users.append(user)

    def add_context(self, gap):
        ctx = bytes([0x10 + len(self.contexts)]) + b"\x00" * 30 + b"\x01"
        self.send(gap, self.admin, "reputation", "addContext", ctx, f"ctx{len(self.contexts)}")
        self.m.add_context(ctx)
        self.contexts.append(ctx)

    def add_model(self, gap):
        model = bytes([0xA0 + len(self.models)]) * 32
        self.send(gap, DEVELOPER, "reputation", "addModel", model, "ipfs://model")
        self.m.add_model(model)
        self.models.append(model)

    def auto_eval(self, gap, model, ctx, user, has_reference, sa, wa):
        self.next_iid += 1
        iid = self.next_iid.to_bytes(32, "big")
        receipt = self.send(gap, self.oracle, "reputation", "autoEval", iid, model, ctx, user.address,
                            has_reference, sa, wa, "ipfs://evidence")
        self.m.auto_eval(iid, model, ctx, user.address, has_reference, sa, wa)
        self.check_pair(model, ctx)
        self.check_pair(model, GLOBAL_CONTEXT)
        self.check_updated_events(receipt)

    def hum_eval(self, gap, iid, answers):
        it = self.m.interactions[iid]
        user = next(u for u in self.users if u.address == it.user)
        previous = self.m.last_human_eval_at.get(it.user, self.m.registered_at[it.user])
        receipt = self.send(gap, user, "reputation", "humEval", iid, *answers)
        self.m.hum_eval(iid, it.user, receipt.timestamp, *answers)
        (ev,) = events(self.d, receipt, "HumanEvaluated")
        assert (ev["interactionId"], ev["user"]) == (iid, user.address)
        assert (ev["sH"], ev["wH"]) == (it.sh, it.wh)
        assert ev["dMinutes"] == minutes_since(receipt.timestamp - previous)
        view = self.d.view("reputation", "interaction", iid)
        assert (view[6], view[7], view[8], view[9]) == (it.sh, it.wh, True, False)
        assert self.d.view("reputation", "lastHumanEvalAt", user.address)[0] == receipt.timestamp
        self.check_pair(it.model, it.context)
        self.check_pair(it.model, GLOBAL_CONTEXT)
        self.check_updated_events(receipt)

    def update_reputation(self, gap, iid):
        it = self.m.interactions[iid]
        receipt = self.send(gap, self.oracle, "reputation", "updateReputation", iid)
        self.m.update_reputation(iid)
        assert self.d.view("reputation", "interaction", iid)[9] is True
        self.check_pair(it.model, it.context)
        self.check_pair(it.model, GLOBAL_CONTEXT)
        self.check_updated_events(receipt)

    def pending(self, human_done):
        return sorted(i for i, it in self.m.interactions.items()
                      if it.human_done == human_done and not it.reputation_done)

    # -- the final comparison ----------------------------------------------------------------------
    def check_everything(self):
        for ctx in [GLOBAL_CONTEXT, *self.contexts]:
            for model in self.models:
                self.check_pair(model, ctx)
            sums = self.m.contexts[ctx]
            stats = self.d.view("reputation", "contextStats", ctx)
            assert stats == (True, sums.n, sums.ra, sums.rh, sums.r)
        for ctx, sums in self.m.contexts.items():
            for rep in (r for (mdl, c), r in self.m.reps.items() if c == ctx):
                assert 0 <= rep.ra <= WAD and 0 <= rep.rh <= WAD and 0 <= rep.r <= WAD


def play(run: Run, data) -> None:
    # a minimal world so that evaluations can start at once; the rest is drawn
    run.register(data.draw(OTHER_GAPS, label="gap"))
    run.add_context(0)
    run.add_model(0)
    steps = data.draw(st.integers(4, 24), label="steps")
    for _ in range(steps):
        ops = ["auto_eval", "auto_eval"]
        if len(run.users) < len(USERS):
            ops.append("register")
        if len(run.contexts) < MAX_CONTEXTS:
            ops.append("add_context")
        if len(run.models) < MAX_MODELS:
            ops.append("add_model")
        if run.pending(False):
            ops += ["hum_eval", "hum_eval"]
        if run.pending(True):
            ops += ["update_reputation", "update_reputation"]
        op = data.draw(st.sampled_from(ops), label="op")
        if op == "auto_eval":
            gap = data.draw(OTHER_GAPS, label="gap")
            model = data.draw(st.sampled_from(run.models), label="model")
            ctx = data.draw(st.sampled_from(run.contexts), label="context")
            user = data.draw(st.sampled_from(run.users), label="user")
            has_reference = data.draw(st.booleans(), label="hasReference")
            # sometimes exactly the threshold (a tie counts as a good answer)
            sa = data.draw(st.one_of(SCORES, st.just("tie")), label="sA")
            if sa == "tie":  # the mean Ra the update will compare with, once the model holds a REP there
                probe = copy.deepcopy(run.m)
                probe._ensure_rep(model, ctx)
                sa = probe.mean(ctx, "ra")
            run.auto_eval(gap, model, ctx, user, has_reference, sa, data.draw(SCORES, label="wA"))
        elif op == "hum_eval":
            run.hum_eval(
                data.draw(HUMAN_GAPS, label="gap"),
                data.draw(st.sampled_from(run.pending(False)), label="interaction"),
                data.draw(st.tuples(*[LIKERT] * 6), label="answers"),
            )
        elif op == "update_reputation":
            run.update_reputation(data.draw(OTHER_GAPS, label="gap"),
                                  data.draw(st.sampled_from(run.pending(True)), label="interaction"))
        else:
            getattr(run, op)(data.draw(OTHER_GAPS, label="gap"))
    run.check_everything()


@pytest.fixture(scope="module")
def with_developer(driver, admin):
    """The developer account of every example (registered once; the module's snapshot undoes it)."""
    snap = driver.snapshot()
    driver.transact(admin, "identity", "register", DEVELOPER.address, 2, "")
    yield driver
    driver.revert_to(snap)


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_contract_matches_the_mirror_to_the_wei_after_any_sequence(with_developer, admin, oracle, data):
    driver = with_developer
    snap = driver.snapshot()
    try:
        play(Run(driver, admin, oracle), data)
    finally:
        driver.revert_to(snap)


def test_a_long_busy_sequence_matches_the_mirror(with_developer, admin, oracle):
    """A fixed, longer run: three users, three contexts, four models, 40 interactions through all
    three steps, gaps cycling through 0 s .. 3 days, sA/wA through the edges."""
    driver = with_developer
    snap = driver.snapshot()
    try:
        run = Run(driver, admin, oracle)
        for _ in USERS:
            run.register(37)
        for _ in range(MAX_CONTEXTS):
            run.add_context(1)
        for _ in range(MAX_MODELS):
            run.add_model(1)
        edges = [0, HALF, WAD, 123_456_789_012_345_678, 999_999_999_999_999_999, 1]
        gaps = [0, 1, 60, 61, 3_599, DAY - 1, DAY, DAY + 1, 3 * DAY, 7]
        for k in range(40):
            run.auto_eval(k % 3, run.models[k % 4], run.contexts[k % 3], run.users[k % 3], k % 4 != 3,
                          edges[k % 6], edges[(k * 5 + 1) % 6])
            iid = run.pending(False)[-1]
            run.hum_eval(gaps[k % 10], iid, tuple(1 + (k * p) % 5 for p in (1, 2, 3, 5, 7, 11)))
            if k % 5 != 4:  # a few stay without updateReputation
                run.update_reputation(0, iid)
        run.check_everything()
    finally:
        driver.revert_to(snap)


def test_a_tie_with_the_threshold_counts_as_a_good_answer_on_chain(with_developer, admin, oracle):
    """A at 2/3 and B at 1/2 in a context: B's sA equal to the mean Ra takes the rate psi."""
    driver = with_developer
    snap = driver.snapshot()
    try:
        run = Run(driver, admin, oracle)
        run.register(60)
        run.add_context(0)
        run.add_model(0)
        run.add_model(0)
        a, b = run.models
        user = run.users[0]
        run.auto_eval(0, a, run.contexts[0], user, False, 0, 0)
        run.auto_eval(0, b, run.contexts[0], user, False, 0, 0)
        run.auto_eval(0, a, run.contexts[0], user, True, WAD, WAD)
        threshold = run.m.mean(run.contexts[0], "ra")
        assert threshold == 583_333_333_333_333_333
        run.auto_eval(0, b, run.contexts[0], user, True, threshold, WAD)
        good = ((WAD - WAD // 3) * HALF + (WAD // 3) * threshold) // WAD
        for ctx in (run.contexts[0], GLOBAL_CONTEXT):
            assert driver.view("reputation", "reputation", b, ctx)[0] == good
    finally:
        driver.revert_to(snap)
