"""lib/debate.py: the agent-debate protocol with scripted agents, and reading verdicts from rambling replies."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.debate import (
    DEFAULT_ROUNDS, FIRST, NEITHER, SECOND, Debate, DebateError, consensus, parse_verdict, relabel, run_debate,
    to_canonical, to_shown,
)

ANSWER_A = "Paris is the capital of France; it has been since the tenth century."
ANSWER_B = "The capital of France is Lyon."
AGENTS = ("judge-alpha", "judge-beta", "judge-gamma")


def make_debate(agents=AGENTS) -> Debate:
    return Debate(criterion="helpfulness", criterion_description="How well the answer serves the user's need.",
                  scenario="open-domain general", question="What is the capital of France?",
                  submission_1=ANSWER_A, submission_2=ANSWER_B, agents=agents)


def shown_swapped(prompt: str) -> bool:
    """Whether the prompt shows the debate's submission 2 first (the agents' own view)."""
    return prompt.index(ANSWER_B) < prompt.index(ANSWER_A)


def say(prompt: str, canonical: int) -> str:
    """A reply stating `canonical` in the numbering the prompt used, in words and as the marker."""
    shown = to_shown(canonical, shown_swapped(prompt))
    words = f"Submission {shown} is better." if shown else "Neither is better."
    return f"I compared both under the criterion. {words}\n\nVerdict: {shown}"


def block(prompt: str, label: str) -> str:
    """The text of one labelled section of a prompt."""
    return prompt.split(f"[{label}]\n", 1)[1].split(f"\n[end of {label}]", 1)[0]


class ScriptedAgents:
    """ask(): each agent's canonical verdict per round comes from a script; every call is logged."""

    def __init__(self, script: dict[str, list[int | str]]):
        self.script = script
        self.calls: list[tuple[str, str]] = []

    def __call__(self, agent: str, prompt: str) -> str:
        round_ = sum(1 for a, _ in self.calls if a == agent)
        self.calls.append((agent, prompt))
        plan = self.script[agent]
        step = plan[min(round_, len(plan) - 1)]
        if isinstance(step, str):
            return step  # a raw reply, e.g. rambling without a verdict
        return say(prompt, step)


def test_agents_that_agree_at_once_end_the_debate_in_round_0():
    ask = ScriptedAgents({a: [FIRST] for a in AGENTS})
    result = run_debate(make_debate(), ask, rng=random.Random(1))
    assert result.rounds == 1 and result.consensus == FIRST and not result.disagreement
    assert [t.round for t in result.turns] == [0, 0, 0]
    assert all(t.peers_shown == () for t in result.turns)
    assert len(ask.calls) == 3


def test_an_agent_persuaded_in_discussion_gives_consensus_after_round_1():
    ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [FIRST], "judge-gamma": [SECOND, FIRST]})
    result = run_debate(make_debate(), ask, rng=random.Random(2))
    assert result.rounds == 2 and result.consensus == FIRST
    assert [t.verdict for t in result.round(0)] == [FIRST, FIRST, SECOND]
    assert [t.verdict for t in result.round(1)] == [FIRST, FIRST, FIRST]


@pytest.mark.parametrize("rounds", [1, 2, DEFAULT_ROUNDS, 5])
def test_agents_that_never_agree_leave_a_disagreement_after_round_d_minus_1(rounds):
    ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [SECOND], "judge-gamma": [NEITHER]})
    result = run_debate(make_debate(), ask, rounds=rounds, rng=random.Random(3))
    assert result.disagreement and result.consensus is None
    assert result.rounds == rounds
    assert len(result.turns) == 3 * rounds
    assert max(t.round for t in result.turns) == rounds - 1


def test_the_default_is_three_rounds_an_initial_one_and_two_of_discussion():
    ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [SECOND], "judge-gamma": [SECOND]})
    result = run_debate(make_debate(), ask, rng=random.Random(4))
    assert DEFAULT_ROUNDS == 3 and result.rounds == 3


def test_an_unreadable_reply_is_recorded_with_its_reason_and_never_counts_as_agreement():
    ramble = "Both have merits. Submission 1 is short, Submission 2 is shorter; there are 2 of them, 3 points each."
    ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [FIRST], "judge-gamma": [ramble]})
    result = run_debate(make_debate(), ask, rounds=2, rng=random.Random(5))
    assert result.disagreement and result.rounds == 2
    rambling = [t for t in result.turns if t.agent == "judge-gamma"]
    assert all(t.verdict is None and t.shown_verdict is None for t in rambling)
    assert all(t.unparseable and not t.read_as for t in rambling)
    assert all(t.unparseable == "" and t.read_as for t in result.turns if t.agent != "judge-gamma")
    # In round 1 the others are told that gamma's verdict could not be read, not given a guess.
    alpha_round_1 = next(t for t in result.round(1) if t.agent == "judge-alpha")
    assert "Their verdict could not be read" in alpha_round_1.prompt


def test_consensus_needs_every_verdict_read_and_equal():
    assert consensus([1, 1, 1]) == 1
    assert consensus([0, 0]) == 0
    assert consensus([1, 1, None]) is None
    assert consensus([None, None]) is None
    assert consensus([2, 1, 2]) is None
    assert consensus([]) is None


def test_each_agent_sees_its_own_submission_order_and_its_verdict_is_mapped_back():
    seen_swapped = set()
    for seed in range(20):
        ask = ScriptedAgents({a: [SECOND] for a in AGENTS})  # all prefer the debate's submission 2
        result = run_debate(make_debate(), ask, rng=random.Random(seed))
        assert result.consensus == SECOND
        for turn in result.turns:
            assert shown_swapped(turn.prompt) == turn.swapped
            assert turn.verdict == SECOND
            assert turn.shown_verdict == (FIRST if turn.swapped else SECOND)
            seen_swapped.add(turn.swapped)
    assert seen_swapped == {True, False}


def test_an_agent_keeps_its_submission_order_for_the_whole_debate():
    ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [SECOND], "judge-gamma": [NEITHER]})
    result = run_debate(make_debate(), ask, rng=random.Random(6))
    for agent in AGENTS:
        flags = {t.swapped for t in result.turns if t.agent == agent}
        assert len(flags) == 1


def test_the_others_previous_turns_are_shown_in_a_recorded_shuffled_order():
    orders = set()
    for seed in range(20):
        ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [SECOND], "judge-gamma": [NEITHER]})
        result = run_debate(make_debate(), ask, rng=random.Random(seed))
        for turn in result.turns:
            if turn.round == 0:
                continue
            assert sorted(turn.peers_shown) == sorted(a for a in AGENTS if a != turn.agent)
            previous = {t.agent: t for t in result.round(turn.round - 1)}
            # Their replies appear in the prompt in exactly the recorded order, after the agent's own.
            own_at = turn.prompt.index("[Your previous evaluation]")
            positions = [turn.prompt.index(f"[Evaluator {n}'s previous evaluation]")
                         for n in range(1, len(turn.peers_shown) + 1)]
            assert own_at < positions[0] < positions[1]
            for n, peer in enumerate(turn.peers_shown, start=1):
                shown = block(turn.prompt, f"Evaluator {n}'s previous evaluation")
                expected = previous[peer].reply if previous[peer].swapped == turn.swapped \
                    else relabel(previous[peer].reply)
                assert shown.startswith(expected.strip())
            orders.add((turn.agent, turn.peers_shown))
    assert ("judge-alpha", ("judge-beta", "judge-gamma")) in orders
    assert ("judge-alpha", ("judge-gamma", "judge-beta")) in orders


def test_the_others_verdicts_and_wording_are_given_in_the_viewers_numbering():
    ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [SECOND], "judge-gamma": [SECOND]})
    for seed in range(40):
        result = run_debate(make_debate(), ask, rounds=2, rng=random.Random(seed))
        alpha, beta = (next(t for t in result.round(0) if t.agent == a) for a in ("judge-alpha", "judge-beta"))
        if alpha.swapped != beta.swapped:
            break
        ask.calls.clear()
    else:
        pytest.fail("no seed gave alpha and beta different submission orders")
    beta_sees = next(t for t in result.round(1) if t.agent == "judge-beta")
    n = beta_sees.peers_shown.index("judge-alpha") + 1
    alpha_as_shown = block(beta_sees.prompt, f"Evaluator {n}'s previous evaluation")
    # alpha prefers the debate's submission 1: in beta's numbering that is "2", as beta sees them swapped.
    in_beta_numbering = to_shown(FIRST, beta.swapped)
    assert in_beta_numbering == to_shown(SECOND, alpha.swapped)  # the number alpha itself wrote differs
    assert f"Their verdict, in your numbering: {in_beta_numbering}" in alpha_as_shown
    assert f"Submission {in_beta_numbering} is better." in alpha_as_shown  # alpha's wording, renumbered
    assert parse_verdict(alpha_as_shown.split("(Their verdict")[0]).verdict == in_beta_numbering


def test_prompts_hold_the_criterion_the_question_both_submissions_and_the_previous_verdicts():
    ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [SECOND], "judge-gamma": [NEITHER]})
    result = run_debate(make_debate(), ask, rounds=2, rng=random.Random(7))
    for turn in result.turns:
        for text in ("helpfulness", "How well the answer serves the user's need.", "open-domain general",
                     "What is the capital of France?", ANSWER_A, ANSWER_B, "Verdict: "):
            assert text in turn.prompt
    gamma = next(t for t in result.round(1) if t.agent == "judge-gamma")
    assert "[Your previous evaluation]" in gamma.prompt
    assert "Your verdict, in your numbering: 0, neither is better" in gamma.prompt
    shown = {to_shown(FIRST, gamma.swapped), to_shown(SECOND, gamma.swapped)}
    for verdict in shown:
        assert f"Their verdict, in your numbering: {verdict}" in gamma.prompt
    assert "discussion round 1 of at most 1" in gamma.prompt
    assert all("discussion round" not in t.prompt for t in result.round(0))


def test_the_same_seed_holds_the_same_debate():
    def hold(seed):
        ask = ScriptedAgents({"judge-alpha": [FIRST], "judge-beta": [SECOND], "judge-gamma": [NEITHER, SECOND]})
        return run_debate(make_debate(), ask, rng=random.Random(seed))
    assert hold(11) == hold(11)


def test_what_the_transport_raises_propagates():
    def broken(agent, prompt):
        raise ConnectionError("the judge is offline")
    with pytest.raises(ConnectionError, match="offline"):
        run_debate(make_debate(), broken, rng=random.Random(0))


@pytest.mark.parametrize("bad, message", [
    (dict(agents=("solo",)), "at least two agents"),
    (dict(agents=("a", "a")), "distinct"),
    (dict(question="  "), "non-empty question"),
    (dict(submission_2=""), "non-empty submission 2"),
])
def test_a_debate_that_cannot_be_held_is_refused(bad, message):
    fields = dict(criterion="helpfulness", criterion_description="", scenario="", question="Q?",
                  submission_1="A", submission_2="B", agents=AGENTS)
    with pytest.raises(DebateError, match=message):
        Debate(**{**fields, **bad})


@pytest.mark.parametrize("rounds", [0, -1, 1.5, True])
def test_the_number_of_rounds_must_be_at_least_one(rounds):
    with pytest.raises(DebateError, match="at least 1"):
        run_debate(make_debate(), ScriptedAgents({a: [FIRST] for a in AGENTS}), rounds=rounds)


def test_ask_must_return_text():
    with pytest.raises(DebateError, match="must return text"):
        run_debate(make_debate(), lambda agent, prompt: None, rng=random.Random(0))


@settings(max_examples=60, deadline=None)
@given(prefs=st.lists(st.sampled_from([FIRST, SECOND, NEITHER]), min_size=2, max_size=4),
       rounds=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_stubborn_agents_agree_in_round_0_or_never(prefs, rounds, seed):
    agents = tuple(f"judge-{i}" for i in range(len(prefs)))
    ask = ScriptedAgents({a: [p] for a, p in zip(agents, prefs)})
    result = run_debate(make_debate(agents), ask, rounds=rounds, rng=random.Random(seed))
    unanimous = len(set(prefs)) == 1
    assert result.consensus == (prefs[0] if unanimous else None)
    assert result.rounds == (1 if unanimous else rounds)
    assert all(t.verdict == prefs[agents.index(t.agent)] for t in result.turns)


# --- parse_verdict ----------------------------------------------------------------------------

@pytest.mark.parametrize("reply, verdict", [
    ("Submission 1 explains more.\n\nVerdict: 1", 1),
    ("Verdict: 2", 2),
    ("Both are fine.\nVerdict: 0", 0),
    ("**Verdict:** 2", 2),
    ("**Final Verdict: 1**", 1),
    ("### Verdict: Submission 2", 2),
    ("My verdict is 1.", 1),
    ("verdict = 0", 0),
    ("Verdict: Neither", 0),
    ("Verdict: tie", 0),
    ('Verdict: "2"', 2),
    ("Verdict: [1]", 1),
    ("Verdict:\n\n2", 2),
    ("Verdict: 2 (Submission 2 is more helpful than Submission 1)", 2),
    # the seed's format: the number, then the number again alone on the last line
    ("Submission 2 is more thorough.\n\n2\n2", 2),
    ("Reasoning...\n\n1", 1),
    ('Reasoning...\n\n"0"', 0),
    ("Reasoning...\n\n**2**\n\n</function1>", 2),
    ("Reasoning...\n```\n0\n```", 0),
    ('Therefore, I choose "1".', 1),
    ("So the better submission is: 2", 2),
    # clear phrasings, without any marker
    ("After weighing both, Submission 2 is better.", 2),
    ("Submission 1 is clearly better than Submission 2.", 1),
    ("I prefer Submission 2 over Submission 1.", 2),
    ("The better response is Submission 1.", 1),
    ("Neither is better; they say the same thing.", 0),
    ("It's a tie.", 0),
    ("Both submissions are equally helpful.", 0),
    ("There is no clear winner here.", 0),
])
def test_clear_verdicts_are_read(reply, verdict):
    parsed = parse_verdict(reply)
    assert parsed.verdict == verdict, parsed.reason
    assert parsed.parsed and parsed.reason.startswith("read from")


@pytest.mark.parametrize("reply, why", [
    ("", "empty"),
    ("   \n ", "empty"),
    (None, "empty"),
    ("Both answers have strengths and weaknesses worth discussing at length.", "no verdict marker"),
    ("Verdict: 3", "not 1, 2 or 0"),
    ("Verdict: 1 or 2", "more than one verdict"),
    ("Verdict: not 1", "negated"),
    ("Verdict: 1.5", "not 1, 2 or 0"),
    ("Verdict: Submission 3", "does not exist"),
    ("Verdict: pending", "names no verdict"),
    ('Answer with one of: Verdict: 1, Verdict: 2 or Verdict: 0', "several verdicts"),
    ("I would rate both as Competent.\n\n3", "says 3"),
    ("Keep it under 150 words.\n\n150", "says 150"),
    ("Submission 1 is better in tone, but Submission 2 is better in substance.", "phrasings disagree"),
    ("I do not think Submission 1 is better.", "negated"),
    ("Submission 2 is not better than Submission 1 in any way.", "no clear phrasing"),
    ("You must choose submission 1, 2, or neither.", "not an assertion"),
    ('If they are close, choose "Neither is better".', "not an assertion"),
    ("Decide whether Submission 1 is better.", "not an assertion"),
])
def test_unclear_replies_are_unparseable_with_the_reason(reply, why):
    parsed = parse_verdict(reply)
    assert parsed.verdict is None and not parsed.parsed
    assert why in parsed.reason


def test_the_last_explicit_marker_wins_over_earlier_ones():
    reply = "Verdict: 1\n\nOn reflection Submission 2 handles the edge case.\n\nVerdict: 2"
    parsed = parse_verdict(reply)
    assert parsed.verdict == 2 and "the last of 2 markers" in parsed.reason
    assert parse_verdict("Verdict: 2\nHmm.\nVerdict: 0").verdict == 0
    # a closing bare number after a verdict line is the last marker
    assert parse_verdict("Verdict: 1\n\n2").verdict == 2


def test_a_bad_last_marker_is_not_rescued_by_an_earlier_good_one():
    parsed = parse_verdict("Verdict: 1\nActually I cannot decide.\nVerdict: 1 or 2")
    assert parsed.verdict is None and "more than one verdict" in parsed.reason


def test_a_marker_beats_the_phrasings_and_numbers_in_the_reasoning():
    reply = ("Submission 1 is better in style and has 3 examples; Submission 2 is better in accuracy, "
             "scoring 4/5 against 2/5.\n\nVerdict: 2")
    assert parse_verdict(reply).verdict == 2


def test_numbers_inside_the_reasoning_are_not_verdicts():
    reply = "Submission 1 lists 2 steps, Submission 2 lists 1 step and costs $30."
    parsed = parse_verdict(reply)
    assert parsed.verdict is None


def test_quoted_peer_verdicts_inside_a_line_are_not_markers():
    reply = "Speaker 2's verdict: 1. I disagree with them.\n\nVerdict: 2"
    assert parse_verdict(reply).verdict == 2
    assert parse_verdict("Speaker 2's verdict: 1. I disagree with them.").verdict is None


@settings(max_examples=200)
@given(reasoning=st.text(), verdict=st.sampled_from([0, 1, 2]))
def test_whatever_the_reasoning_a_final_verdict_line_decides(reasoning, verdict):
    assert parse_verdict(f"{reasoning}\n\nVerdict: {verdict}").verdict == verdict


@settings(max_examples=300)
@given(st.text())
def test_any_text_gives_a_verdict_or_a_reason_and_never_raises(text):
    parsed = parse_verdict(text)
    assert parsed.verdict in (None, 0, 1, 2)
    assert parsed.reason


FRAGMENTS = st.sampled_from([
    "Submission 1", "submission 2", "Response 1", " is better", " is not better", "Verdict: ", "Verdict: 1",
    "Verdict: 2", "Verdict: 0", "1", "2", "0", "3", "\n", "\n\n", ". ", ", ", "neither", " or ", "It's a tie",
    "I prefer ", "the better one is ", '"', "**", "</end>", "Speaker 2 said ", " 150 words ", "1.5",
])


@settings(max_examples=300)
@given(st.lists(FRAGMENTS, max_size=14).map("".join))
def test_relabelling_swaps_the_verdict_and_undoes_itself(reply):
    swapped = relabel(reply)
    assert relabel(swapped) == reply
    assert parse_verdict(swapped).verdict == to_shown(parse_verdict(reply).verdict, True)


def test_relabelling_touches_only_submission_numbers_and_markers():
    reply = "Speaker 2 noted Submission 1 has 2 bugs; submission 2 has none.\nVerdict: 1\n\n1"
    assert relabel(reply) == "Speaker 2 noted Submission 2 has 2 bugs; submission 1 has none.\nVerdict: 2\n\n2"


@given(st.sampled_from([None, 0, 1, 2]), st.booleans())
def test_mapping_a_verdict_to_a_shown_order_and_back_is_the_identity(verdict, swapped):
    assert to_canonical(to_shown(verdict, swapped), swapped) == verdict
    assert to_shown(NEITHER, swapped) == NEITHER
    assert to_shown(FIRST, True) == SECOND and to_shown(SECOND, True) == FIRST


def test_the_prompt_asks_for_the_marker_the_parser_reads():
    ask = ScriptedAgents({a: [FIRST] for a in AGENTS})
    prompt = run_debate(make_debate(), ask, rng=random.Random(0)).turns[0].prompt
    assert re.search(r'last line of your reply, written as "Verdict: " followed by the number', prompt)
    assert "1 if Submission 1 is better, 2 if Submission 2 is better, 0 if neither is better" in prompt
