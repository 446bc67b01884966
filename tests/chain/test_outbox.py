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


# ----------------------------------------------------------------------------------------------
# grantRole / revokeRole (LLMChainAccess, from the admin)
# ----------------------------------------------------------------------------------------------
ADMIN = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"


@pytest.mark.parametrize("function", ["grantRole", "revokeRole"])
@pytest.mark.parametrize("change, message", [
    ({"role": "oracle"}, "role must be one of"),
    ({"role": "registrar"}, "role must be one of"),
    ({"role": "DEVELOPER_ROLE"}, "role must be one of"),
    ({"role": 2}, "role must be one of"),
    ({"role": None}, "role must be one of"),
    ({"account": "bob"}, "account is not an address"),
    ({"account": None}, "account is not an address"),
])
def test_a_malformed_role_change_is_refused_and_queues_nothing(function, change, message):
    with pytest.raises(outbox.InvalidCall, match=message):
        outbox.enqueue(function, ADMIN, {"role": "developer", "account": USER, **change})
    assert not OutboxItem.objects.exists()


@pytest.mark.parametrize("role", ["developer", "expert", "user"])
def test_a_role_grant_is_canonical_and_keyed_by_role_and_account(role):
    item = outbox.enqueue("grantRole", ADMIN, {"role": role, "account": USER.lower(), "extra": 1})
    assert item.payload == {"role": role, "account": USER}
    assert item.key == f"grantRole:{role}:{USER}" and item.sender_address == ADMIN
    assert outbox.enqueue("grantRole", ADMIN, {"role": role, "account": USER}).pk == item.pk
    assert OutboxItem.objects.count() == 1


def test_grant_revoke_grant_needs_counted_keys():
    grant = outbox.enqueue("grantRole", ADMIN, {"role": "expert", "account": USER})
    revoke = outbox.enqueue("revokeRole", ADMIN, {"role": "expert", "account": USER},
                            key=f"revokeRole:expert:{USER}:1", depends_on=grant)
    again = outbox.enqueue("grantRole", ADMIN, {"role": "expert", "account": USER},
                           key=f"grantRole:expert:{USER}:2", depends_on=revoke)
    assert len({grant.pk, revoke.pk, again.pk}) == 3 and again.depends_on == revoke
    # without a key, a second grant is folded into the first; a default revoke is change 0
    assert outbox.enqueue("grantRole", ADMIN, {"role": "expert", "account": USER}).pk == grant.pk
    assert outbox.idempotency_key("revokeRole", {"role": "expert", "account": USER}) == f"revokeRole:expert:{USER}:0"


def test_a_role_grant_from_another_sender_is_a_conflict():
    outbox.enqueue("grantRole", ADMIN, {"role": "developer", "account": USER})
    with pytest.raises(outbox.ConflictingCall):
        outbox.enqueue("grantRole", ORACLE, {"role": "developer", "account": USER})


def test_role_calls_are_encoded_for_the_access_contract():
    from eth_utils import keccak

    from apps.chain.abi import ContractAbi
    from apps.chain.ledger import CALLS, Deployment, Ledger

    deployment = Deployment(chainId=31337, identity="0x" + "01" * 20, access="0x" + "02" * 20,
                            reputation="0x" + "03" * 20, deployBlock=0)
    ledger = Ledger(None, deployment)
    abi = ContractAbi.load("LLMChainAccess")
    for function in ("grantRole", "revokeRole"):
        assert CALLS[function].contract == "access" and CALLS[function].batch is None
        to, data, gas = ledger.calldata(function, [{"role": "developer", "account": USER}])
        assert to == deployment.access and 50_000 <= gas <= 200_000
        assert data == abi.fn(function).encode(keccak(text="DEVELOPER_ROLE"), USER)
