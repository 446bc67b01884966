import pytest

from apps.chain import outbox
from apps.chain.models import OutboxItem

pytestmark = pytest.mark.django_db
ORACLE = "0x70997970C51812dc3A04C67C2E97d9955A0e11a6"
USER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
GOOD = {"interactionId": "0x" + "11" * 32, "modelId": "0x" + "22" * 32, "contextId": "0x" + "33" * 32,
        "user": USER, "hasReference": True, "sA": str(6 * 10**17), "wA": str(10**18), "evidenceCid": "bafyx"}


@pytest.mark.parametrize("change, message", [
    ({"sA": str(10**18 + 1)}, "sA must lie in [0, 1e18]"),
    ({"wA": "-1"}, "wA must lie in [0, 1e18]"),
    ({"sA": "0.5"}, "sA must be an integer"),
    ({"contextId": "0x" + "00" * 32}, "not the global one"),
    ({"interactionId": "0x1234"}, "interactionId must be 0x followed by 64 hex digits"),
    ({"user": "bob"}, "user is not an address"),
    ({"hasReference": "yes"}, "hasReference must be true or false"),
    ({"evidenceCid": ""}, "evidenceCid must be a non-empty text"),
])
def test_a_malformed_auto_evaluation_is_refused_and_queues_nothing(change, message):
    with pytest.raises(outbox.InvalidCall, match=message.replace("[", r"\[").replace("]", r"\]")):
        outbox.enqueue("autoEval", ORACLE, {**GOOD, **change})
    assert not OutboxItem.objects.exists()


@pytest.mark.parametrize("field", ["reliability", "completeness", "utility", "familiarity", "trust", "uncertainty"])
@pytest.mark.parametrize("value", [0, 6, None, "3"])
def test_a_questionnaire_answer_out_of_1_to_5_is_refused(field, value):
    answers = {f: 3 for f in ("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")}
    with pytest.raises(outbox.InvalidCall, match=f"{field} must be an answer from 1 to 5"):
        outbox.enqueue("humEval", USER, {"interactionId": GOOD["interactionId"], **answers, field: value})
    assert not OutboxItem.objects.exists()


def test_queuing_the_same_call_twice_gives_the_first_row():
    first = outbox.enqueue("autoEval", ORACLE, GOOD)
    again = outbox.enqueue("autoEval", ORACLE, dict(GOOD))
    assert again.pk == first.pk and OutboxItem.objects.count() == 1


def test_the_same_interaction_with_other_scores_is_a_conflict():
    outbox.enqueue("autoEval", ORACLE, GOOD)
    with pytest.raises(outbox.ConflictingCall):
        outbox.enqueue("autoEval", ORACLE, {**GOOD, "sA": "1"})
    assert OutboxItem.objects.get().payload["sA"] == GOOD["sA"]


def test_an_unknown_role_or_function_is_refused():
    with pytest.raises(outbox.InvalidCall, match="role must be one of"):
        outbox.enqueue("register", ORACLE, {"account": USER, "role": "king"})
    with pytest.raises(outbox.InvalidCall, match="unknown function"):
        outbox.enqueue("selfDestruct", ORACLE, {})
    assert not OutboxItem.objects.exists()
