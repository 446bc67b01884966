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


# ----------------------------------------------------------------------------------------------
# updateModelMetadata
# ----------------------------------------------------------------------------------------------
DEVELOPER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
MODEL = "0x" + "AB" * 32
CID = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"


@pytest.mark.parametrize("change, message", [
    ({"metadataCid": ""}, "metadataCid must be a non-empty text of at most 200"),
    ({"metadataCid": "b" * 201}, "metadataCid must be a non-empty text of at most 200"),
    ({"metadataCid": None}, "metadataCid must be a non-empty text"),
    ({"metadataCid": 42}, "metadataCid must be a non-empty text"),
    ({"modelId": "0x1234"}, "modelId must be 0x followed by 64 hex digits"),
    ({"modelId": "0x" + "00" * 32}, "modelId must not be zero"),
    ({"modelId": None}, "modelId must be 0x followed by 64 hex digits"),
])
def test_a_malformed_metadata_update_is_refused_and_queues_nothing(change, message):
    with pytest.raises(outbox.InvalidCall, match=message):
        outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": CID, **change})
    assert not OutboxItem.objects.exists()


def test_a_metadata_update_is_keyed_by_model_and_cid():
    item = outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": CID, "extra": 1})
    assert item.payload == {"modelId": MODEL.lower(), "metadataCid": CID}
    assert item.key == f"updateModelMetadata:{MODEL.lower()}:{CID}"
    assert outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": CID}).pk == item.pk
    second = outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": "bafysecond"})
    assert second.pk != item.pk and OutboxItem.objects.count() == 2


def test_the_same_metadata_update_from_another_sender_is_a_conflict():
    outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": CID})
    with pytest.raises(outbox.ConflictingCall):
        outbox.enqueue("updateModelMetadata", USER, {"modelId": MODEL, "metadataCid": CID})


def test_republishing_an_earlier_cid_needs_its_own_key():
    first = outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": CID})
    outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": "bafysecond"})
    assert outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": CID}).pk == first.pk
    again = outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": CID},
                           key=f"updateModelMetadata:{MODEL.lower()}:{CID}:rev3")
    assert again.pk != first.pk and OutboxItem.objects.count() == 3


def test_a_long_cid_is_keyed_by_its_hash_within_the_key_column():
    max_len = OutboxItem._meta.get_field("key").max_length
    long_cid, other = "bafy" + "k" * 196, "bafy" + "k" * 195 + "j"
    item = outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": long_cid})
    assert len(item.key) <= max_len and item.key.startswith(f"updateModelMetadata:{MODEL.lower()}:keccak:")
    assert item.payload["metadataCid"] == long_cid
    assert outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": other}).key != item.key
    # a CID that just fits keeps its plain form
    fits = "b" * (max_len - len(f"updateModelMetadata:{MODEL.lower()}:"))
    assert outbox.enqueue("updateModelMetadata", DEVELOPER, {"modelId": MODEL, "metadataCid": fits}).key.endswith(fits)
