"""Position bias (MT-Bench's swap) and calibration (ECE) in lib/metaeval.py, on hand-computed examples."""

from __future__ import annotations

import pytest

from lib.metaeval import FIRST, NEITHER, SECOND, expected_calibration_error, position_bias, swap_rule


def test_the_swap_rule_keeps_an_agreement_and_turns_a_flip_into_a_tie():
    assert swap_rule(FIRST, FIRST) == FIRST
    assert swap_rule(SECOND, SECOND) == SECOND
    assert swap_rule(NEITHER, NEITHER) == NEITHER
    assert swap_rule(FIRST, SECOND) == NEITHER  # the verdict followed the position, not the answer
    assert swap_rule(SECOND, NEITHER) == NEITHER
    assert swap_rule(None, FIRST) is None and swap_rule(FIRST, None) is None  # unreadable is never guessed


def test_position_bias_counts_what_was_shown_first():
    # As the judge gave them: (order as in the pair, order swapped); 1 = what it was shown first.
    asked = [(1, 2),  # the same submission both times: consistent
             (1, 1),  # always the first shown: inconsistent, two first-position wins
             (2, 1),  # consistent
             (0, 0),  # consistent tie, no decided verdict
             (1, None)]  # one unreadable: out of consistency, its readable verdict counts for the win rate
    found = position_bias(asked)
    assert found["both_readable"] == 4 and found["consistent"] == 3 and found["consistency"] == 0.75
    # decided verdicts: 1,2,1,1,2,1,1 -> 5 firsts of 7
    assert found["decided_verdicts"] == 7 and found["first_position_wins"] == 5
    assert found["first_position_win_rate"] == round(5 / 7, 4)


def test_expected_calibration_error_by_hand():
    predictions = [
        ({1: 0.9, 2: 0.05, 0: 0.05}, 1),  # bin 9, correct
        ({1: 0.95, 2: 0.05, 0: 0.0}, 2),  # bin 9, wrong
        ({1: 0.3, 2: 0.6, 0: 0.1}, 2),  # bin 6, correct
        ({1: 0.2, 2: 0.25, 0: 0.55}, 1),  # bin 5, wrong
    ]
    found = expected_calibration_error(predictions, bins=10)
    # bin 9: acc 0.5, conf 0.925 -> |.425| * 2/4 = 0.2125; bin 6: |1 - 0.6| * 1/4 = 0.1;
    # bin 5: |0 - 0.55| * 1/4 = 0.1375; ECE = 0.45
    assert found["ece"] == pytest.approx(0.45)
    assert found["accuracy"] == 0.5 and found["mean_confidence"] == pytest.approx(0.75)
    assert expected_calibration_error([({1: 1.0, 2: 0.0, 0: 0.0}, 1)])["ece"] == 0.0  # confidence 1: last bin
    assert expected_calibration_error([])["ece"] is None
    with pytest.raises(ValueError):
        expected_calibration_error([({}, 1)])
