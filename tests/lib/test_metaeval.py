import pytest

from lib.metaeval import (
    category_counts, example_agreement, fleiss_kappa, majority, mode, system_agreement, system_preference,
)

# Wikipedia, "Fleiss' kappa", worked example: 10 subjects, 14 raters, 5 categories.
WIKIPEDIA = [
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
]


def test_kappa_matches_the_published_worked_example():
    assert fleiss_kappa(WIKIPEDIA) == pytest.approx(0.210, abs=5e-4)


def test_kappa_is_one_when_raters_always_agree_on_varied_items():
    assert fleiss_kappa([[3, 0, 0], [0, 3, 0], [0, 0, 3]]) == pytest.approx(1.0)


def test_kappa_is_undefined_when_every_rating_is_the_same_category():
    assert fleiss_kappa([[2, 0, 0], [3, 0, 0]]) is None


def test_kappa_is_undefined_without_an_item_rated_twice():
    assert fleiss_kappa([]) is None
    assert fleiss_kappa([[1, 0, 0], [0, 1, 0]]) is None


def test_kappa_leaves_out_items_with_a_single_rating():
    assert fleiss_kappa([[2, 0, 0], [0, 2, 0], [0, 0, 1]]) == fleiss_kappa([[2, 0, 0], [0, 2, 0]])


def test_kappa_with_unequal_rater_counts_uses_pooled_category_shares():
    # P_1 = 1, P_2 = (2*1 + 0) / (3*2) = 1/3; P_bar = 2/3; p = (4/5, 1/5, 0); P_e = 17/25.
    assert fleiss_kappa([[2, 0, 0], [2, 1, 0]]) == pytest.approx((2 / 3 - 17 / 25) / (1 - 17 / 25))


def test_kappa_is_negative_below_chance():
    assert fleiss_kappa([[1, 1, 0], [1, 1, 0], [0, 1, 1]]) < 0


def test_kappa_rejects_ragged_rows():
    with pytest.raises(ValueError):
        fleiss_kappa([[2, 0, 0], [2, 0]])


def test_category_counts_count_each_verdict():
    assert category_counts([1, 1, 2]) == [0, 2, 1]


def test_majority_has_no_winner_on_a_tie():
    assert majority([1, 2, 1]) == 1
    assert majority([1, 2]) is None
    assert majority([]) is None


def test_example_agreement_is_the_share_of_examples_matching_gold():
    result = example_agreement([(1, 1), (2, 1), (0, 0), (None, 2)])
    assert (result.n, result.agreed, result.unparseable) == (4, 2, 1)
    assert result.rate == 0.5


def test_example_agreement_without_gold_has_no_rate():
    assert example_agreement([]).rate is None


def test_system_agreement_compares_the_most_frequent_outcomes():
    # evaluator prefers A twice out of three, gold prefers A twice out of three: same mode.
    assert system_agreement([("A", "A"), ("A", "B"), ("B", "A")]) == 1
    assert system_agreement([("B", "A"), ("B", "A"), ("A", "A")]) == 0


def test_system_agreement_is_undefined_on_a_tied_mode():
    assert system_agreement([("A", "A"), ("B", "A")]) is None
    assert system_agreement([]) is None


def test_unreadable_verdicts_take_no_part_in_the_mode():
    assert mode([None, None, "A"]) == "A"
    assert system_agreement([(None, "A"), (None, "A"), ("A", "A")]) == 1


def test_system_preference_names_the_better_system_whatever_the_order():
    assert system_preference(1, "gpt", "claude") == "gpt"
    assert system_preference(2, "claude", "gpt") == "gpt"
    assert system_preference(0, "gpt", "claude") == "tie"
    assert system_preference(None, "gpt", "claude") is None
