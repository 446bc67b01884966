"""The Python mirror of the reputation model (lib/reputation.py) against REPUTATION.md.

Pure tests, no chain: hand-computed fixed-point values for every formula, the update rule for
good and bad answers, initialisation at the mean, the global context, the daily cap on D, the
tie rule, the facts of the paper's Fig. 2, and a property test of the running sums.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lib.reputation import (
    GLOBAL_CONTEXT,
    HALF,
    WAD,
    ReputationError,
    ReputationModel,
    answer_score,
    combine,
    decay_factor,
    human_weight,
    minutes_since,
    update,
    user_weight,
)

C1 = b"\x01" * 32
C2 = b"\x02" * 32
A = b"\xa1" * 32
B = b"\xb2" * 32
C = b"\xc3" * 32
USER = "0x00000000000000000000000000000000000000aa"
OTHER = "0x00000000000000000000000000000000000000bb"
T0 = 1_700_000_000
DAY = 86_400

GOOD_USER = (5, 5, 1)  # F, T, U -> Wh = 1


def f(x: int) -> float:
    return x / WAD


def floor(q: Fraction) -> int:
    return q.numerator // q.denominator


def world(*models: bytes, context: bytes = C1, users=(USER,)) -> ReputationModel:
    m = ReputationModel()
    m.add_context(context)
    for model in models:
        m.add_model(model)
    for u in users:
        m.register(u, T0)
    return m


def one_human_eval(answers: tuple[int, int, int], user: tuple[int, int, int], gap_s: int,
                   sa: int | None = None, wa: int = 0) -> ReputationModel:
    """A fresh world with one model; one interaction, its human part `gap_s` after registration,
    then updateReputation."""
    m = world(A)
    m.auto_eval(b"i" * 32, A, C1, USER, sa is not None, sa or 0, wa)
    m.hum_eval(b"i" * 32, USER, T0 + gap_s, *answers, *user)
    m.update_reputation(b"i" * 32)
    return m


# ----------------------------------------------------------------------------------------------
# Sh, Wh, D, FD, wh: hand-computed values
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("answers, expected", [
    ((1, 1, 1), 0),
    ((5, 5, 5), WAD),
    ((3, 3, 3), HALF),
    ((2, 3, 4), HALF),
    ((4, 5, 3), 750_000_000_000_000_000),  # (3/4 + 1 + 1/2) / 3
    ((5, 1, 1), 333_333_333_333_333_333),  # (1 + 0 + 0) / 3, truncated
    ((2, 2, 2), 250_000_000_000_000_000),
])
def test_the_answer_score_is_the_mean_of_the_three_normalised_answers(answers, expected):
    assert answer_score(*answers) == expected
    normalised = [(x - 1) / 4 for x in answers]
    assert abs(f(answer_score(*answers)) - sum(normalised) / 3) < 1e-17


@pytest.mark.parametrize("fam_trust_unc, expected", [
    ((5, 5, 1), WAD),  # familiar, trusting, certain
    ((1, 1, 5), 0),  # unfamiliar, distrustful, uncertain
    ((3, 3, 3), HALF),
    ((3, 4, 2), 666_666_666_666_666_666),  # (1/2 + 3/4 + 3/4) / 3
    ((5, 5, 5), 666_666_666_666_666_666),  # uncertainty counts against: (1 + 1 + 0) / 3
])
def test_the_user_weight_counts_familiarity_trust_and_certainty(fam_trust_unc, expected):
    assert user_weight(*fam_trust_unc) == expected
    fam, trust, unc = fam_trust_unc
    assert abs(f(user_weight(*fam_trust_unc)) - ((fam - 1) / 4 + (trust - 1) / 4 + 1 - (unc - 1) / 4) / 3) < 1e-17


@pytest.mark.parametrize("seconds, minutes_wad", [
    (0, 0),
    (-5, 0),
    (1, WAD // 60),
    (60, WAD),
    (90, 3 * WAD // 2),
    (3_600, 60 * WAD),
    (DAY, 1440 * WAD),
    (DAY + 1, 1440 * WAD),
    (2 * DAY, 1440 * WAD),
])
def test_d_is_exact_minutes_capped_at_one_day(seconds, minutes_wad):
    assert minutes_since(seconds) == minutes_wad


@pytest.mark.parametrize("d_minutes", [0, 1 / 60, 0.5, 1, 7.25, 10, 60, 123.456, 600, 720, 1000, 1439.99, 1440])
def test_the_decay_factor_is_tanh_of_half_lambda_d(d_minutes):
    d_wad = int(Fraction(d_minutes) * WAD)
    fd = decay_factor(d_wad)
    assert 0 <= fd < WAD
    assert abs(f(fd) - math.tanh(1e-3 * d_minutes / 2)) < 1e-15


def test_the_decay_factor_after_one_day_is_616909302877065020():
    # tanh(0.72) = 0.616909302877065...; the wei digits are the mirror's and the contract's.
    assert decay_factor(1440 * WAD) == 616_909_302_877_065_020
    assert decay_factor(0) == 0


def test_the_decay_factor_grows_with_d():
    values = [decay_factor(minutes_since(s)) for s in (0, 1, 60, 600, 3600, 36_000, DAY)]
    assert values == sorted(values) and len(set(values)) == len(values)


@pytest.mark.parametrize("wh_args", [((5, 5, 1), 1440), ((3, 3, 3), 1440), ((3, 4, 2), 90), ((1, 1, 5), 600)])
def test_the_human_weight_is_user_weight_times_decay_factor(wh_args):
    user, d_minutes = wh_args
    weight, fd = user_weight(*user), decay_factor(d_minutes * WAD)
    assert human_weight(weight, d_minutes * WAD) == weight * fd // WAD
    assert abs(f(human_weight(weight, d_minutes * WAD)) - f(weight) * math.tanh(1e-3 * d_minutes / 2)) < 1e-15


def test_human_weight_for_a_sure_user_after_a_day_equals_the_decay_factor():
    assert human_weight(WAD, 1440 * WAD) == decay_factor(1440 * WAD)
    assert human_weight(HALF, 1440 * WAD) == decay_factor(1440 * WAD) // 2


def test_the_combined_part_weighs_human_two_thirds_and_automatic_one_third():
    assert combine(WAD, 0) == 666_666_666_666_666_666
    assert combine(0, WAD) == 333_333_333_333_333_333
    assert combine(750_000_000_000_000_000, 900_000_000_000_000_000) == 800_000_000_000_000_000


# ----------------------------------------------------------------------------------------------
# The update rule U (Eq. 6)
# ----------------------------------------------------------------------------------------------
def test_a_good_answer_moves_reputation_up_at_rate_psi_w():
    # 0.5 -> (1 - 1/3) * 0.5 + 1/3 * 1 = 2/3, truncated in the last wei.
    assert update(HALF, WAD, WAD, HALF) == 666_666_666_666_666_666
    # w = 0.6: rw = 0.2 exactly: 0.8 * 0.5 + 0.2 * 0.9 = 0.58
    assert update(HALF, 900_000_000_000_000_000, 600_000_000_000_000_000, HALF) == 580_000_000_000_000_000


def test_a_bad_answer_moves_reputation_down_at_rate_xi_w():
    # 0.5 -> (1 - 2/3) * 0.5 + 2/3 * 0 = 1/6
    assert update(HALF, 0, WAD, HALF) == 166_666_666_666_666_667
    # w = 0.6: rw = 0.4: 0.6 * 0.5 + 0.4 * 0.2 = 0.38
    assert update(HALF, 200_000_000_000_000_000, 600_000_000_000_000_000, HALF) == 380_000_000_000_000_000


@pytest.mark.parametrize("rx, s, w, threshold", [
    (HALF, WAD, WAD, HALF), (HALF, 0, WAD, HALF),
    (123_456_789_012_345_678, 987_654_321_098_765_432, 31_415_926_535_897_932, HALF),
    (WAD, 0, WAD, WAD), (0, WAD, WAD, 0), (WAD, WAD, WAD, 0), (0, 0, 0, WAD), (777, 3, 10**17 + 1, 10**18),
])
def test_the_update_is_the_truncated_exact_formula(rx, s, w, threshold):
    rate = Fraction(1, 3) if s >= threshold else Fraction(2, 3)
    rw = floor(w * rate)
    assert update(rx, s, w, threshold) == floor(Fraction((WAD - rw) * rx + rw * s, WAD))
    assert 0 <= update(rx, s, w, threshold) <= WAD


def test_a_zero_weight_leaves_reputation_where_it_is():
    assert update(HALF, WAD, 0, HALF) == HALF
    assert update(HALF, 0, 0, HALF) == HALF


def test_a_good_answer_through_the_model_moves_rh_and_r_of_the_context_and_the_global_context():
    m = one_human_eval((5, 5, 5), GOOD_USER, DAY)  # Sh = 1, Wh = 1, D = 1440
    wh = decay_factor(1440 * WAD)
    expected = update(HALF, WAD, wh, HALF)
    assert abs(f(expected) - (0.5 + wh / WAD / 3 * 0.5)) < 1e-15
    for ctx in (C1, GLOBAL_CONTEXT):
        assert m.reputation(A, ctx) == (HALF, expected, expected, 0, 1)  # no reference: R follows Sh, wh
    assert m.interactions[b"i" * 32].wh == wh and m.interactions[b"i" * 32].sh == WAD


def test_a_bad_answer_through_the_model_moves_rh_and_r_down():
    m = one_human_eval((1, 1, 1), GOOD_USER, DAY)  # Sh = 0
    wh = decay_factor(1440 * WAD)
    expected = update(HALF, 0, wh, HALF)
    assert abs(f(expected) - (0.5 - 2 * wh / WAD / 3 * 0.5)) < 1e-15
    for ctx in (C1, GLOBAL_CONTEXT):
        assert m.reputation(A, ctx) == (HALF, expected, expected, 0, 1)


def test_with_a_reference_ra_moves_and_r_takes_the_combined_part():
    sa, wa = 900_000_000_000_000_000, 600_000_000_000_000_000
    m = one_human_eval((4, 5, 3), GOOD_USER, DAY, sa=sa, wa=wa)  # Sh = 0.75
    wh = decay_factor(1440 * WAD)
    s_theta = 800_000_000_000_000_000  # 2/3 * 0.75 + 1/3 * 0.9
    w_theta = (2 * wh + wa) // 3
    for ctx in (C1, GLOBAL_CONTEXT):
        ra, rh, r, n_auto, n_human = m.reputation(A, ctx)
        assert ra == 580_000_000_000_000_000
        assert rh == update(HALF, 750_000_000_000_000_000, wh, HALF)
        assert r == update(HALF, s_theta, w_theta, HALF)
        assert abs(f(r) - (0.5 + f(w_theta) / 3 * 0.3)) < 1e-15
        assert (n_auto, n_human) == (1, 1)


def test_without_a_reference_ra_is_untouched_and_n_auto_stays_zero():
    m = world(A)
    m.auto_eval(b"i" * 32, A, C1, USER, False, WAD, WAD)
    assert m.reputation(A, C1) == (HALF, HALF, HALF, 0, 0)
    assert m.reputation(A, GLOBAL_CONTEXT) == (HALF, HALF, HALF, 0, 0)


# ----------------------------------------------------------------------------------------------
# Initialisation, global context, D cap, tie
# ----------------------------------------------------------------------------------------------
def test_the_first_model_of_a_context_starts_at_one_half():
    m = world(A)
    assert m.reputation(A, C1) == (0, 0, 0, 0, 0)  # no REP before its first interaction
    m.auto_eval(b"1" * 32, A, C1, USER, False, 0, 0)
    assert m.reputation(A, C1) == (HALF, HALF, HALF, 0, 0)
    assert m.reputation(A, GLOBAL_CONTEXT) == (HALF, HALF, HALF, 0, 0)


def test_a_new_model_starts_at_the_mean_of_the_models_already_in_the_context():
    m = world(A, B, C)
    m.auto_eval(b"1" * 32, A, C1, USER, True, 900_000_000_000_000_000, 600_000_000_000_000_000)
    assert m.reputation(A, C1)[0] == 580_000_000_000_000_000
    m.auto_eval(b"2" * 32, B, C1, USER, False, 0, 0)
    assert m.reputation(B, C1) == (580_000_000_000_000_000, HALF, HALF, 0, 0)
    # B's bad automatic part (0 < mean 0.58) at w = 1: 0.58 / 3
    m.auto_eval(b"3" * 32, B, C1, USER, True, 0, WAD)
    rb = update(580_000_000_000_000_000, 0, WAD, 580_000_000_000_000_000)
    assert rb == 193_333_333_333_333_333
    assert m.reputation(B, C1)[0] == rb
    m.auto_eval(b"4" * 32, C, C1, USER, False, 0, 0)
    assert m.reputation(C, C1) == ((580_000_000_000_000_000 + rb) // 2, HALF, HALF, 0, 0)
    assert m.contexts[C1].n == 3


def test_the_global_context_is_updated_alongside_every_context():
    m = world(A, B)
    m.add_context(C2)
    m.auto_eval(b"1" * 32, A, C1, USER, True, WAD, WAD)  # A in C1: 0.5 -> 2/3 in C1 and in 0
    assert m.reputation(A, C1)[0] == m.reputation(A, GLOBAL_CONTEXT)[0] == 666_666_666_666_666_666
    m.auto_eval(b"2" * 32, A, C2, USER, True, WAD, WAD)  # A in C2: new REP at 0.5 there
    assert m.reputation(A, C2)[0] == 666_666_666_666_666_666
    # in the global context A moved twice: 2/3 then towards 1 again (good: 1 >= mean 2/3)
    assert m.reputation(A, GLOBAL_CONTEXT)[0] == update(666_666_666_666_666_666, WAD, WAD, 666_666_666_666_666_666)
    assert m.reputation(A, GLOBAL_CONTEXT)[3] == 2
    assert m.reputation(A, C1)[3] == m.reputation(A, C2)[3] == 1
    # B's first interaction in C2 starts at C2's mean; in context 0 at context 0's mean
    m.auto_eval(b"3" * 32, B, C2, USER, False, 0, 0)
    assert m.reputation(B, C2)[0] == 666_666_666_666_666_666
    assert m.reputation(B, GLOBAL_CONTEXT)[0] == m.reputation(A, GLOBAL_CONTEXT)[0]
    assert m.contexts[GLOBAL_CONTEXT].n == 2 and m.contexts[C1].n == 1 and m.contexts[C2].n == 2


def test_the_human_part_also_moves_the_global_context():
    m = one_human_eval((5, 5, 5), GOOD_USER, 3_600)
    assert m.reputation(A, C1) == m.reputation(A, GLOBAL_CONTEXT)
    assert m.reputation(A, C1)[1] > HALF


def test_d_is_capped_so_a_two_day_gap_weighs_the_same_as_a_one_day_gap():
    one_day = one_human_eval((5, 5, 5), GOOD_USER, DAY)
    two_days = one_human_eval((5, 5, 5), GOOD_USER, 2 * DAY)
    a_bit_less = one_human_eval((5, 5, 5), GOOD_USER, DAY - 60)
    wh = lambda m: m.interactions[b"i" * 32].wh  # noqa: E731
    assert wh(one_day) == wh(two_days) == decay_factor(1440 * WAD)
    assert wh(a_bit_less) < wh(one_day)
    assert one_day.reputation(A, C1) == two_days.reputation(A, C1)


def test_d_counts_from_the_users_previous_human_evaluation_in_any_context():
    m = world(A, B)
    m.add_context(C2)
    m.auto_eval(b"1" * 32, A, C1, USER, False, 0, 0)
    m.auto_eval(b"2" * 32, B, C2, USER, False, 0, 0)
    m.hum_eval(b"1" * 32, USER, T0 + DAY, 5, 5, 5, *GOOD_USER)
    m.hum_eval(b"2" * 32, USER, T0 + DAY + 600, 5, 5, 5, *GOOD_USER)  # 10 minutes later
    assert m.interactions[b"2" * 32].wh == human_weight(WAD, 10 * WAD)
    assert m.interactions[b"1" * 32].wh == human_weight(WAD, 1440 * WAD)


def test_a_users_first_d_counts_from_registration():
    m = world(A)
    m.register(OTHER, T0 + 1_000)
    m.auto_eval(b"1" * 32, A, C1, OTHER, False, 0, 0)
    m.hum_eval(b"1" * 32, OTHER, T0 + 1_000 + 90, 5, 5, 5, *GOOD_USER)
    assert m.interactions[b"1" * 32].wh == human_weight(WAD, 3 * WAD // 2)


def test_a_human_evaluation_in_the_registration_second_has_zero_weight_and_moves_nothing():
    m = one_human_eval((5, 5, 5), GOOD_USER, 0)
    assert m.interactions[b"i" * 32].wh == 0
    assert m.reputation(A, C1) == (HALF, HALF, HALF, 0, 1)


def test_a_tie_with_the_threshold_counts_as_a_good_answer():
    # the rule itself: S == threshold takes psi
    w = 600_000_000_000_000_000
    assert update(200_000_000_000_000_000, HALF, w, HALF) == 260_000_000_000_000_000  # psi: 0.8 * 0.2 + 0.2 * 0.5
    assert update(200_000_000_000_000_000, HALF - 1, w, HALF) == 319_999_999_999_999_999  # xi: 0.6 * 0.2 + 0.4 * S
    # through the model: A at 2/3 and B at 1/2 in C1 -> mean ra 583333333333333333; B's sA equal to it
    m = world(A, B)
    m.auto_eval(b"1" * 32, A, C1, USER, False, 0, 0)
    m.auto_eval(b"2" * 32, B, C1, USER, False, 0, 0)
    m.auto_eval(b"3" * 32, A, C1, USER, True, WAD, WAD)
    threshold = m.mean(C1, "ra")
    assert threshold == (666_666_666_666_666_666 + HALF) // 2 == 583_333_333_333_333_333
    m.auto_eval(b"4" * 32, B, C1, USER, True, threshold, WAD)
    good = ((WAD - WAD // 3) * HALF + (WAD // 3) * threshold) // WAD
    bad = ((WAD - 2 * WAD // 3) * HALF + (2 * WAD // 3) * threshold) // WAD
    assert m.reputation(B, C1)[0] == good != bad


# ----------------------------------------------------------------------------------------------
# Fig. 2 of the paper, as behaviour
# ----------------------------------------------------------------------------------------------
GOOD_ANSWERS = (5, 5, 4)
BAD_ANSWERS = (1, 2, 1)


@pytest.mark.parametrize("short_gap, long_gap", [(60, 600), (600, 36_000), (3_600, DAY)])
def test_with_the_same_answers_a_larger_d_moves_reputation_further_up_for_a_good_answer(short_gap, long_gap):
    short = one_human_eval(GOOD_ANSWERS, GOOD_USER, short_gap).reputation(A, C1)
    long = one_human_eval(GOOD_ANSWERS, GOOD_USER, long_gap).reputation(A, C1)
    assert HALF < short[1] < long[1]
    assert HALF < short[2] < long[2]


@pytest.mark.parametrize("short_gap, long_gap", [(60, 600), (600, 36_000), (3_600, DAY)])
def test_with_the_same_answers_a_larger_d_moves_reputation_further_down_for_a_bad_answer(short_gap, long_gap):
    short = one_human_eval(BAD_ANSWERS, GOOD_USER, short_gap).reputation(A, C1)
    long = one_human_eval(BAD_ANSWERS, GOOD_USER, long_gap).reputation(A, C1)
    assert HALF > short[1] > long[1]
    assert HALF > short[2] > long[2]


@pytest.mark.parametrize("weak_user, strong_user",
                         [((2, 2, 4), (5, 5, 1)), ((1, 1, 5), (3, 3, 3)), ((3, 3, 3), (4, 5, 2))])
@pytest.mark.parametrize("answers, direction", [(GOOD_ANSWERS, +1), (BAD_ANSWERS, -1)])
def test_with_the_same_answers_a_larger_user_weight_moves_reputation_further(weak_user, strong_user, answers,
                                                                            direction):
    assert user_weight(*weak_user) < user_weight(*strong_user)
    weak = one_human_eval(answers, weak_user, 7_200).reputation(A, C1)
    strong = one_human_eval(answers, strong_user, 7_200).reputation(A, C1)
    for idx in (1, 2):  # Rh and R
        assert direction * (strong[idx] - HALF) > direction * (weak[idx] - HALF) >= 0
        assert strong[idx] != HALF


@pytest.mark.parametrize("user", [(5, 5, 1), (3, 4, 2), (2, 2, 4)])
@pytest.mark.parametrize("gap", [120, 3_600, DAY])
def test_a_bad_answer_moves_reputation_twice_as_fast_as_a_good_one(user, gap):
    # R = 0.5 (threshold 0.5); good S = 0.75, bad S = 0.25: the same w and the same |S - R|.
    good = one_human_eval((4, 4, 4), user, gap)
    bad = one_human_eval((2, 2, 2), user, gap)
    w = good.interactions[b"i" * 32].wh
    assert w == bad.interactions[b"i" * 32].wh > 0
    for idx in (1, 2):  # Rh and R (no reference: R takes Sh, wh)
        good_step = Fraction(good.reputation(A, C1)[idx] - HALF, 750_000_000_000_000_000 - HALF)
        bad_step = Fraction(HALF - bad.reputation(A, C1)[idx], HALF - 250_000_000_000_000_000)
        assert good_step > 0 and bad_step > 0
        assert abs(float(good_step) - w / WAD / 3) < 1e-15  # psi * w
        assert abs(float(bad_step) - 2 * w / WAD / 3) < 1e-15  # xi * w
        assert abs(float(bad_step / good_step) - 2) < 1e-9


def test_a_bad_automatic_part_moves_ra_twice_as_fast_as_a_good_one():
    good, bad = world(A), world(A)
    good.auto_eval(b"1" * 32, A, C1, USER, True, 800_000_000_000_000_000, 300_000_000_000_000_000)
    bad.auto_eval(b"1" * 32, A, C1, USER, True, 200_000_000_000_000_000, 300_000_000_000_000_000)
    assert good.reputation(A, C1)[0] - HALF == 30_000_000_000_000_000  # 0.1 * 0.3
    assert HALF - bad.reputation(A, C1)[0] == 60_000_000_000_000_000  # 0.2 * 0.3


# ----------------------------------------------------------------------------------------------
# Refusals mirror the contract's reverts
# ----------------------------------------------------------------------------------------------
def test_the_mirror_refuses_what_the_contract_reverts():
    m = world(A)
    with pytest.raises(ReputationError):
        m.register(USER, T0)
    with pytest.raises(ReputationError):
        m.add_context(C1)
    with pytest.raises(ReputationError):
        m.add_context(GLOBAL_CONTEXT)
    with pytest.raises(ReputationError):
        m.add_model(A)
    with pytest.raises(ReputationError):
        m.auto_eval(b"1" * 32, A, GLOBAL_CONTEXT, USER, False, 0, 0)
    with pytest.raises(ReputationError):
        m.auto_eval(b"1" * 32, A, C1, USER, True, WAD + 1, 0)
    with pytest.raises(ReputationError):
        m.auto_eval(b"1" * 32, A, C1, OTHER, True, 0, 0)
    m.auto_eval(b"1" * 32, A, C1, USER, False, 0, 0)
    with pytest.raises(ReputationError):
        m.update_reputation(b"1" * 32)
    with pytest.raises(ReputationError):
        m.hum_eval(b"1" * 32, USER, T0 + 1, 5, 5, 5, 5, 5, 6)
    with pytest.raises(ReputationError):
        m.hum_eval(b"1" * 32, OTHER, T0 + 1, 5, 5, 5, 5, 5, 5)
    m.hum_eval(b"1" * 32, USER, T0 + 1, 5, 5, 5, 5, 5, 5)
    with pytest.raises(ReputationError):
        m.hum_eval(b"1" * 32, USER, T0 + 2, 5, 5, 5, 5, 5, 5)
    m.update_reputation(b"1" * 32)
    with pytest.raises(ReputationError):
        m.update_reputation(b"1" * 32)


# ----------------------------------------------------------------------------------------------
# Property: scores stay in [0, 1] and running sums stay exact, whatever the sequence
# ----------------------------------------------------------------------------------------------
SCORES = st.one_of(st.sampled_from([0, 1, HALF, WAD - 1, WAD]), st.integers(0, WAD))
LIKERT = st.integers(1, 5)


class MirrorInvariants(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.m = ReputationModel()
        self.now = T0
        self.users = [f"0x{i:040x}" for i in range(1, 4)]
        self.next_iid = 0

    @initialize()
    def setup(self):
        self.m.register(self.users[0], self.now)
        self.m.add_context(C1)
        self.m.add_model(A)

    @precondition(lambda self: len(self.m.registered_at) < len(self.users))
    @rule(gap=st.integers(0, 3 * DAY))
    def register(self, gap):
        self.now += gap
        self.m.register(self.users[len(self.m.registered_at)], self.now)

    @precondition(lambda self: len(self.m.contexts) < 4)
    @rule()
    def add_context(self):
        self.m.add_context(bytes([0x10 + len(self.m.contexts)]) * 32)

    @precondition(lambda self: len(self.m.models) < 5)
    @rule()
    def add_model(self):
        self.m.add_model(bytes([0xD0 + len(self.m.models)]) * 32)

    @rule(data=st.data(), has_reference=st.booleans(), sa=SCORES, wa=SCORES)
    def auto_eval(self, data, has_reference, sa, wa):
        model = data.draw(st.sampled_from(sorted(self.m.models)))
        ctx = data.draw(st.sampled_from(sorted(c for c in self.m.contexts if c != GLOBAL_CONTEXT)))
        user = data.draw(st.sampled_from(sorted(self.m.registered_at)))
        self.next_iid += 1
        self.m.auto_eval(self.next_iid.to_bytes(32, "big"), model, ctx, user, has_reference, sa, wa)

    def _pending(self, human_done):
        return sorted(i for i, it in self.m.interactions.items()
                      if it.human_done == human_done and not it.reputation_done)

    @precondition(lambda self: self._pending(False))
    @rule(data=st.data(), answers=st.tuples(*[LIKERT] * 6), gap=st.integers(0, 3 * DAY))
    def hum_eval(self, data, answers, gap):
        iid = data.draw(st.sampled_from(self._pending(False)))
        self.now += gap
        self.m.hum_eval(iid, self.m.interactions[iid].user, self.now, *answers)

    @precondition(lambda self: self._pending(True))
    @rule(data=st.data())
    def update_reputation(self, data):
        self.m.update_reputation(data.draw(st.sampled_from(self._pending(True))))

    @invariant()
    def scores_stay_between_zero_and_one(self):
        for rep in self.m.reps.values():
            assert 0 <= rep.ra <= WAD and 0 <= rep.rh <= WAD and 0 <= rep.r <= WAD
        for it in self.m.interactions.values():
            assert 0 <= it.sh <= WAD and 0 <= it.wh <= WAD

    @invariant()
    def context_sums_equal_the_sums_of_the_model_scores(self):
        for ctx, sums in self.m.contexts.items():
            reps = [rep for (model, c), rep in self.m.reps.items() if c == ctx]
            assert sums.n == len(reps)
            assert sums.ra == sum(r.ra for r in reps)
            assert sums.rh == sum(r.rh for r in reps)
            assert sums.r == sum(r.r for r in reps)

    @invariant()
    def every_rep_in_a_context_has_one_in_the_global_context(self):
        for model, ctx in self.m.reps:
            assert (model, GLOBAL_CONTEXT) in self.m.reps


MirrorInvariants.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
test_after_any_sequence_scores_stay_in_range_and_context_sums_stay_exact = MirrorInvariants.TestCase


# --- lambda, fixed by the deployment ------------------------------------------

@pytest.mark.parametrize("lam", [10**12, 10**15, 5 * 10**15, 10**16, 3 * 10**16])
@pytest.mark.parametrize("d_minutes", [1, 60, 1440])
def test_the_decay_factor_follows_the_deployment_s_lambda(lam, d_minutes):
    fd = decay_factor(d_minutes * WAD, lam)
    assert abs(f(fd) - math.tanh(lam / WAD * d_minutes / 2)) < 1e-12


def test_the_default_lambda_is_the_paper_s_to_the_wei():
    from lib.reputation import DEFAULT_LAMBDA_WAD

    assert DEFAULT_LAMBDA_WAD == 10**15
    for d in (0, 1, 59 * WAD // 7, 1440 * WAD):  # the old arithmetic was d // 1000
        assert decay_factor(d, DEFAULT_LAMBDA_WAD) == decay_factor(d)


@pytest.mark.parametrize("text, wad", [("0.001", 10**15), ("1e-3", 10**15), ("0.03", 3 * 10**16),
                                       ("0.000001", 10**12), (" 0.0125 ", 125 * 10**14)])
def test_lambda_is_read_as_written(text, wad):
    from lib.reputation import lambda_wad_from

    assert lambda_wad_from(text) == wad


@pytest.mark.parametrize("text", ["0", "-0.001", "0.031", "0.0000009", "fast", "", "1e-19", "nan"])
def test_a_lambda_outside_the_range_or_not_a_number_is_refused(text):
    from lib.reputation import lambda_wad_from

    with pytest.raises(ValueError, match="lambda"):
        lambda_wad_from(text)


def test_a_mirror_with_another_lambda_weighs_ratings_by_it():
    slow, fast = ReputationModel(), ReputationModel(lambda_wad=10**16)
    for m in (slow, fast):
        m.register(USER, T0)
        m.add_context(C1)
        m.add_model(A)
        m.auto_eval(b"\x01" * 32, A, C1, USER, True, 7 * WAD // 10, WAD // 2)
        m.hum_eval(b"\x01" * 32, USER, T0 + 3600, 5, 5, 5, 5, 5, 1)
    hour = minutes_since(3600)
    assert slow.interactions[b"\x01" * 32].wh == human_weight(user_weight(5, 5, 1), hour)
    assert fast.interactions[b"\x01" * 32].wh == human_weight(user_weight(5, 5, 1), hour, 10**16)
    assert fast.interactions[b"\x01" * 32].wh > slow.interactions[b"\x01" * 32].wh
    with pytest.raises(ReputationError, match="lambda"):
        ReputationModel(lambda_wad=0)
