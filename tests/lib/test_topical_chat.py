"""Topical-Chat USR as meta-evaluation data (lib/topical_chat.py): loading, and the pairs derived
from it (same context, two systems, the higher human `overall` wins)."""

from __future__ import annotations

import json

import pytest

from lib import topical_chat
from lib.topical_chat import TopicalChatError, derive_pairs, load, scored_items

SYSTEMS = ("Original Ground Truth", "Argmax Decoding", "Nucleus Decoding (p = 0.3)")


def scores(overall: float, as_string: bool = False):
    s = {c: 3.0 for c in topical_chat.CRITERIA} | {"overall": overall}
    return repr(s) if as_string else s


def write(tmp_path, rows) -> str:
    path = tmp_path / "tc.json"
    path.write_text(json.dumps(rows))
    return str(path)


def row(history: str, system: str, overall: float, as_string: bool = False) -> dict:
    return {"source": history, "context": f"fact for {history}", "system_id": system,
            "system_output": f"{system} answers {history}", "scores": scores(overall, as_string)}


@pytest.fixture
def two_contexts(tmp_path):
    rows = [row("h1", s, o, as_string=True) for s, o in zip(SYSTEMS, (4.0, 2.0, 4.0000000001))]
    rows += [row("h2", s, o) for s, o in zip(SYSTEMS, (1.0, 5.0, 3.0))]
    return write(tmp_path, rows)


def test_scores_given_as_a_python_dict_string_are_read_without_eval(two_contexts):
    responses = load(two_contexts)
    assert [r.context_id for r in responses] == [0, 0, 0, 1, 1, 1]
    assert responses[0].scores["overall"] == 4.0 and responses[3].scores["overall"] == 1.0


def test_code_in_the_scores_string_is_refused(tmp_path):
    bad = row("h1", "Argmax Decoding", 3.0) | {"scores": "__import__('os').system('true')"}
    with pytest.raises(TopicalChatError, match="row 0.*not a Python dict literal"):
        load(write(tmp_path, [bad]))


def test_a_row_without_a_criterion_is_refused(tmp_path):
    bad = row("h1", "Argmax Decoding", 3.0)
    del bad["scores"]["groundedness"]
    with pytest.raises(TopicalChatError, match="lacks 'groundedness'"):
        load(write(tmp_path, [bad]))


def test_every_two_systems_of_a_context_make_a_pair_won_by_the_higher_overall(two_contexts):
    pairs = derive_pairs(load(two_contexts))
    assert len(pairs) == 6  # 2 contexts x C(3, 2)
    by_models = {(p["model_a"], p["model_b"], p["question"]): p["human"] for p in pairs}
    h1 = {frozenset((a, b)): (a, h) for (a, b, q), h in by_models.items() if q == "h1"}
    # 4.0 vs 4.0000000001 is a tie (scores are means printed to 10 decimals)
    assert h1[frozenset(SYSTEMS[::2])][1] == "tie"
    first, verdict = h1[frozenset(SYSTEMS[:2])]
    assert verdict == ("a" if first == "Original Ground Truth" else "b")


def test_pairs_carry_the_knowledge_as_reference_and_alternate_the_slots(two_contexts):
    pairs = derive_pairs(load(two_contexts))
    assert {p["reference"] for p in pairs} == {"fact for h1", "fact for h2"}
    assert {p["category"] for p in pairs} == {"topical-chat"}
    assert len({p["id"] for p in pairs}) == 6
    # the same system pair comes in either order in consecutive contexts
    assert (pairs[0]["model_a"], pairs[0]["model_b"]) == (pairs[3]["model_b"], pairs[3]["model_a"])


def test_scored_items_hold_the_response_the_knowledge_and_the_human_scores(two_contexts):
    item = scored_items(load(two_contexts))[4]
    assert item["response"] == "Argmax Decoding answers h2"
    assert item["reference"] == "fact for h2" and item["human"]["overall"] == 5.0
    assert item["id"] == "tc-01-argmax-decoding"
