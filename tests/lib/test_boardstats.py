"""lib/boardstats.py against the Python mirror of the contract: the steps it reads back from a pair's
event history are exactly the updates the contract made, and the band is a deterministic bootstrap."""

import random

import pytest

from lib import boardstats
from dataclasses import replace

from hypothesis import given, settings, strategies as hs

from lib.boardstats import (Change, Evaluation, Step, extend, recorded_steps, r_band, stride, summarize,
                            summarize_with_tail, thin)
from lib.reputation import GLOBAL_CONTEXT, WAD, ReputationModel, update

CTX = b"\x01" * 32
MODELS = [bytes([m]) * 32 for m in (7, 8, 9)]
USERS = [f"0x{u:040x}" for u in (1, 2)]


class EmittingMirror(ReputationModel):
    """The mirror, plus the ReputationUpdated events the contract emits (same rules as Reputation.sol)."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[bytes, bytes, Change]] = []
        self.block = 0

    def _emit(self, iid, model, ctx):
        rep = self.reps[(model, ctx)]
        self.block += 1
        self.events.append((model, ctx, Change("0x" + iid.hex(), rep.ra, rep.rh, rep.r, rep.n_auto, rep.n_human,
                                               self.block, 1_700_000_000 + self.block)))

    def auto_eval(self, iid, model, context, user, has_reference, sa, wa):
        existed = {ctx: (model, ctx) in self.reps for ctx in (context, GLOBAL_CONTEXT)}
        super().auto_eval(iid, model, context, user, has_reference, sa, wa)
        for ctx in (context, GLOBAL_CONTEXT):
            if has_reference or not existed[ctx]:
                self._emit(iid, model, ctx)

    def hum_eval(self, iid, *args):
        super().hum_eval(iid, *args)
        it = self.interactions[iid]
        for ctx in (it.context, GLOBAL_CONTEXT):
            self._emit(iid, it.model, ctx)

    def update_reputation(self, iid):
        super().update_reputation(iid)
        it = self.interactions[iid]
        for ctx in (it.context, GLOBAL_CONTEXT):
            self._emit(iid, it.model, ctx)

    def history(self, model, ctx):
        changes = [c for m, x, c in self.events if m == model and x == ctx]
        evals = {}
        for iid, it in self.interactions.items():
            if it.model == model and (ctx == GLOBAL_CONTEXT or it.context == ctx):
                evals["0x" + iid.hex()] = Evaluation("0x" + iid.hex(), it.has_reference, it.sa, it.wa,
                                                     it.sh if it.human_done else None,
                                                     it.wh if it.human_done else None)
        return changes, evals


def run_random(seed: int, n: int = 60) -> tuple[EmittingMirror, list[bytes]]:
    rnd = random.Random(seed)
    mirror = EmittingMirror()
    t = 1_000
    for u in USERS:
        mirror.register(u, t)
    mirror.add_context(CTX)
    for m in MODELS:
        mirror.add_model(m)
    updated = []
    for k in range(n):
        iid = k.to_bytes(32, "big")
        model, user = rnd.choice(MODELS), rnd.choice(USERS)
        mirror.auto_eval(iid, model, CTX, user, rnd.random() < 0.8, rnd.randrange(WAD + 1), rnd.randrange(WAD + 1))
        if rnd.random() < 0.7:
            t += rnd.randrange(60, 200_000)
            mirror.hum_eval(iid, user, t, *(rnd.randint(1, 5) for _ in range(6)))
            if rnd.random() < 0.9:
                mirror.update_reputation(iid)
                updated.append(iid)
    return mirror, updated


@pytest.mark.parametrize("seed", range(8))
def test_recorded_steps_are_the_contracts_updates(seed):
    mirror, updated = run_random(seed)
    for model in MODELS:
        for ctx in (CTX, GLOBAL_CONTEXT):
            changes, evals = mirror.history(model, ctx)
            if not changes:
                continue
            start, steps = recorded_steps(changes, evals)
            mine = [i for i in updated if mirror.interactions[i].model == model]
            assert len(steps) == len(mine)
            # Replaying the recorded steps in chain order with the contract's integer update gives R exactly.
            r = start
            for st in steps:
                r = update(r, st.s, st.w, 0 if st.thirds == 1 else WAD + 1)
            assert r == mirror.reps[(model, ctx)].r
            assert {st.thirds for st in steps} <= {1, 2}


def test_both_rates_occur_and_are_told_apart():
    seen = set()
    for seed in range(8):
        mirror, _ = run_random(seed)
        for model in MODELS:
            changes, evals = mirror.history(model, CTX)
            seen |= {st.thirds for st in recorded_steps(changes, evals)[1]}
    assert seen == {1, 2}


def test_history_that_no_rate_explains_is_refused():
    mirror, _ = run_random(3)
    changes, evals = mirror.history(MODELS[0], CTX)
    start, steps = recorded_steps(changes, evals)
    assert steps
    k = next(i for i in range(1, len(changes)) if changes[i].n_human == changes[i - 1].n_human
             and changes[i].n_auto == changes[i - 1].n_auto)
    forged = list(changes)
    forged[k] = Change(**{**changes[k].__dict__, "r": changes[k].r + 12345})
    with pytest.raises(ValueError, match="neither rate"):
        recorded_steps(forged, evals)


def test_band_is_deterministic_ordered_and_needs_two_ratings():
    steps = [Step(int(0.9 * WAD), int(0.6 * WAD), 1), Step(int(0.2 * WAD), int(0.5 * WAD), 2),
             Step(int(0.7 * WAD), int(0.8 * WAD), 1)]
    band = r_band(WAD // 2, steps, seed=42)
    assert band == r_band(WAD // 2, steps, seed=42)
    lo, hi = band
    assert 0 <= lo < hi <= 1
    assert r_band(WAD // 2, steps, seed=43) != band  # the seed matters: it is part of the definition
    assert r_band(WAD // 2, steps[:1], seed=42) is None


def test_band_of_identical_ratings_is_the_replay_itself():
    step = Step(int(0.8 * WAD), int(0.9 * WAD), 1)
    r = WAD // 2
    for _ in range(5):
        r = update(r, step.s, step.w, 0)
    lo, hi = r_band(WAD // 2, [step] * 5, seed=1)
    assert lo == pytest.approx(r / WAD, abs=1e-6) and hi == pytest.approx(r / WAD, abs=1e-6)


def test_band_closed_form_matches_a_step_by_step_replay():
    rnd = random.Random(5)
    steps = [Step(rnd.randrange(WAD), rnd.randrange(WAD), rnd.choice((1, 2))) for _ in range(30)]
    import numpy as np
    rng = np.random.default_rng(9)
    idx = rng.integers(0, len(steps), size=(boardstats.BAND_RESAMPLES, len(steps)))
    finals = []
    for row in idx:
        r = 0.5
        for k in row:
            a = steps[k].w / WAD * steps[k].thirds / 3
            r = (1 - a) * r + a * steps[k].s / WAD
        finals.append(r)
    lo, hi = np.percentile(finals, [2.5, 97.5])
    assert r_band(WAD // 2, steps, seed=9) == (round(float(lo), 6), round(float(hi), 6))


def test_wider_band_for_disagreeing_ratings():
    agree = [Step(int(0.7 * WAD), int(0.6 * WAD), 1)] * 4 + [Step(int(0.72 * WAD), int(0.6 * WAD), 1)] * 4
    disagree = [Step(int(0.95 * WAD), int(0.6 * WAD), 1)] * 4 + [Step(int(0.05 * WAD), int(0.6 * WAD), 2)] * 4
    width = lambda b: b[1] - b[0]  # noqa: E731
    assert width(r_band(WAD // 2, disagree, seed=3)) > 10 * width(r_band(WAD // 2, agree, seed=3))


def test_summary_thins_history_and_keeps_the_last_state():
    mirror, _ = run_random(1, n=400)
    changes, evals = mirror.history(MODELS[0], GLOBAL_CONTEXT)
    assert len(changes) > boardstats.HISTORY_POINTS
    s = summarize("0xaa", "0xbb", changes, evals)
    last = changes[-1]
    assert (s.ra, s.rh, s.r, s.n_auto, s.n_human, s.block, s.timestamp) == (
        last.ra, last.rh, last.r, last.n_auto, last.n_human, last.block, last.timestamp)
    assert boardstats.HISTORY_POINTS // 2 < len(s.history["r"]) <= boardstats.HISTORY_POINTS
    assert s.history["i"][0] == 1
    assert s.history["i"][-1] == len(changes) and s.history["r"][-1] == round(last.r / WAD, 6)
    assert boardstats.SPARK_POINTS // 2 < len(s.spark) <= boardstats.SPARK_POINTS
    assert s.spark[-1] == round(last.r / WAD, 6)
    assert s.band_lo is not None and s.band_lo <= s.band_hi and s.band_n > 2
    assert summarize("0xaa", "0xbb", [], {}) is None


def test_thin():
    assert thin(5, 10) == [0, 1, 2, 3, 4] and thin(1, 10) == [0] and thin(0, 10) == []
    picked = thin(1000, 32)
    assert picked[0] == 0 and picked[-1] == 999 and 16 < len(picked) <= 32 and picked == sorted(set(picked))
    assert picked[:-1] == list(range(0, 999, 64)), "every stride-th index, then the last"


@given(hs.integers(1, 5000), hs.integers(1, 3000), hs.sampled_from([2, 3, 32, 200]))
def test_thinning_a_longer_series_keeps_only_points_kept_before(n, more, points):
    """What lets a thinned series grow from its kept points alone."""
    before, after = thin(n, points), thin(n + more, points)
    assert len(after) <= points and after[0] == 0 and after[-1] == n + more - 1
    assert n + more <= points or len(after) > points // 2
    assert stride(n + more, points) >= stride(n, points)
    assert set(k for k in after if k < n) <= set(before)


def broken_copy(changes: list[Change], at: int) -> list[Change]:
    """The history with R at change `at` moved by one wei (no rate gives that), counters kept."""
    bad = list(changes)
    prev = bad[at - 1]
    bad[at] = replace(bad[at], n_auto=prev.n_auto, n_human=prev.n_human, r=bad[at].r + 1)
    return bad


@settings(max_examples=40, deadline=None)
@given(hs.integers(0, 10_000), hs.integers(20, 500), hs.lists(hs.integers(1, 60), min_size=1, max_size=30),
       hs.sampled_from([None, 0.3, 0.8]), hs.booleans())
def test_extending_a_summary_chunk_by_chunk_gives_the_whole_histories_summary(seed, n, cuts, break_at, lazy):
    """Whatever the chunks (one change, many, past the stride's doublings), with or without moves of
    R in them, and through a change no rate explains: extend equals summarize on the whole."""
    mirror, _ = run_random(seed, n=n)
    model = MODELS[seed % len(MODELS)]
    for ctx in (CTX, GLOBAL_CONTEXT):
        changes, evals = mirror.history(model, ctx)
        if len(changes) < 2:
            continue
        if break_at is not None:
            changes = broken_copy(changes, max(1, int(len(changes) * break_at)))
        whole = summarize("0xmodel", "0xctx", changes, evals)
        first = cuts[0] % len(changes) + 1
        summary, tail = summarize_with_tail("0xmodel", "0xctx", changes[:first], evals)
        done, k = first, 1
        while done < len(changes):
            step = cuts[k % len(cuts)]
            k += 1
            new = changes[done:done + step]
            kept = tail.steps
            if lazy and not any(prev.n_auto == ch.n_auto and prev.n_human == ch.n_human
                                for prev, ch in zip([tail.last, *new], new)):
                tail = replace(tail, steps=None)  # the steps are needed only when R moves
            summary, tail = extend("0xmodel", "0xctx", summary, tail, new,
                                   {ch.interaction_id: evals[ch.interaction_id] for ch in new
                                    if ch.interaction_id in evals})
            if tail.steps is None:  # as the entries' state keeps them: unchanged
                tail = replace(tail, steps=kept)
            done += len(new)
        assert summary == whole
        assert tail.n == len(changes) and tail.last == changes[-1]


def test_extending_needs_a_summary_thinned_as_thin_does():
    mirror, _ = run_random(3, n=200)
    changes, evals = mirror.history(MODELS[0], GLOBAL_CONTEXT)
    summary, tail = summarize_with_tail("0xa", "0xb", changes[:-1], evals)
    evenly = [round(k * (len(changes) - 2) / 31) for k in range(32)]  # the old even spread
    with pytest.raises(ValueError):
        extend("0xa", "0xb", replace(summary, spark=[0.5] * len(evenly)), tail, changes[-1:], evals)
