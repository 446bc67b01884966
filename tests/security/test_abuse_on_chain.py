"""Contract calls from the wrong roles, sent the way the site sends everything (the outbox, the
submitter, a real chain): the contracts refuse them, the outbox records the refusal, and nothing
reaches the boards."""

from __future__ import annotations

import pytest

from apps.chain import outbox
from apps.chain.keys import new_key
from apps.chain.models import OutboxItem
from apps.chain.submitter import Submitter
from apps.chat import moderation
from apps.chat.models import Profile
from tests.chain.conftest import drain, ledger, ledger_node, rand_id, world  # noqa: F401  (fixtures)
from tests.personas import user

pytestmark = pytest.mark.django_db


def _refused(item: OutboxItem, error: str) -> None:
    item.refresh_from_db()
    assert item.status == OutboxItem.Status.FAILED and error in item.last_error, (item.status, item.last_error)


def test_the_registrar_cannot_register_an_account_with_a_role_only_the_admin_grants(world):
    tried = {role: new_key("would-be " + role).address for role in ("oracle", "expert", "registrar")}
    items = {role: outbox.enqueue("register", world.admin, {"account": account, "role": role})
             for role, account in tried.items()}
    drain(Submitter(world.ledger, owner="test"))
    for role, item in items.items():
        _refused(item, "RoleNotRegistrable")
        assert world.ledger.view("identity", "isRegistered", tried[role]) == (False,)


def test_a_suspended_account_is_named_in_no_evaluation_and_rates_nothing_until_reinstated(world):
    submitter = Submitter(world.ledger, owner="test")
    alice = user("alice")
    address = Profile.objects.get(user=alice).address
    drain(submitter)  # her registration
    assert moderation.suspend_account(alice, "rating stuffing")
    drain(submitter)  # the revocation of her USER_ROLE
    auto = outbox.enqueue("autoEval", world.oracle, {
        "interactionId": rand_id(), "modelId": world.model, "contextId": world.context, "user": address,
        "hasReference": False, "sA": "0", "wA": "0", "evidenceCid": "bafyevidence"})
    drain(submitter)
    _refused(auto, "NotAUser")

    assert moderation.reinstate_account(alice)
    drain(submitter)
    again = outbox.enqueue("autoEval", world.oracle, {
        "interactionId": rand_id(), "modelId": world.model, "contextId": world.context, "user": address,
        "hasReference": False, "sA": "0", "wA": "0", "evidenceCid": "bafyevidence"})
    drain(submitter)
    again.refresh_from_db()
    assert again.status == OutboxItem.Status.CONFIRMED


def test_a_revoked_user_cannot_send_a_rating_for_an_interaction_naming_them(world):
    submitter = Submitter(world.ledger, owner="test")
    rater = world.users[0]
    iid = rand_id()
    auto = outbox.enqueue("autoEval", world.oracle, {
        "interactionId": iid, "modelId": world.model, "contextId": world.context, "user": rater,
        "hasReference": False, "sA": "0", "wA": "0", "evidenceCid": "bafyevidence"})
    drain(submitter)
    revoke = outbox.enqueue("revokeRole", world.admin, {"role": "user", "account": rater})
    drain(submitter)
    revoke.refresh_from_db()
    assert revoke.status == OutboxItem.Status.CONFIRMED
    hum = outbox.enqueue("humEval", rater, {"interactionId": iid, "reliability": 5, "completeness": 5,
                                            "utility": 5, "familiarity": 5, "trust": 5, "uncertainty": 1},
                         depends_on=auto)
    drain(submitter)
    _refused(hum, "NotAUser")
