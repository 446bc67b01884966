"""Developer and expert roles granted by an admin: the Profile flag and the on-chain grantRole
(or revokeRole) change together, in order after the account's registration."""

from __future__ import annotations

import pytest
from django.urls import reverse
from eth_utils import keccak

from apps.chain import outbox
from apps.chain.keys import admin_address
from apps.chain.models import OutboxItem, Registration
from apps.chain.submitter import Submitter
from apps.chat import roles
from apps.chat.models import Profile, RegisteredModel
from apps.chat.accounts import registration_of
from tests.chain.conftest import drain, ledger, ledger_node, rand_id  # noqa: F401 (fixtures)
from tests.personas import developer, user

pytestmark = pytest.mark.django_db


def role_items():
    return OutboxItem.objects.filter(function__in=("grantRole", "revokeRole")).order_by("id")


def test_granting_a_role_sets_the_flag_and_queues_grant_role_after_the_registration():
    alice = user()
    profile = alice.profile
    registration = registration_of(profile.address)
    assert registration is not None
    item = roles.grant_role(profile, "developer")
    assert profile.is_developer and Profile.objects.get(pk=profile.pk).is_developer
    assert item.function == "grantRole" and item.sender_address == admin_address()
    assert item.payload == {"role": "developer", "account": profile.address}
    assert item.key == f"grantRole:developer:{profile.address}"
    assert item.depends_on == registration
    assert not Profile.objects.get(pk=profile.pk).is_expert


def test_a_registered_account_gets_no_dependency():
    profile = user().profile
    OutboxItem.objects.filter(key=f"register:{profile.address}").update(status=OutboxItem.Status.CONFIRMED)
    assert roles.grant_role(profile, "expert").depends_on is None


def test_granting_twice_queues_one_call():
    profile = user().profile
    first = roles.grant_role(profile, "expert")
    assert roles.grant_role(Profile.objects.get(pk=profile.pk), "expert") is None
    assert roles.grant_role(profile, "expert") is None
    assert list(role_items()) == [first]


def test_a_developer_from_sign_up_already_has_the_role():
    profile = developer().profile
    assert roles.grant_role(profile, "developer") is None
    assert not role_items().exists()


def test_revoking_a_role_never_held_queues_nothing():
    profile = user().profile
    assert roles.revoke_role(profile, "expert") is None
    assert not role_items().exists()


def test_revoke_then_grant_again_queues_each_change_in_order():
    profile = user().profile
    grant = roles.grant_role(profile, "developer")
    revoke = roles.revoke_role(profile, "developer")
    again = roles.grant_role(profile, "developer")
    assert Profile.objects.get(pk=profile.pk).is_developer
    assert [i.function for i in role_items()] == ["grantRole", "revokeRole", "grantRole"]
    assert (revoke.key, again.key) == (f"revokeRole:developer:{profile.address}:1",
                                       f"grantRole:developer:{profile.address}:2")
    assert revoke.depends_on == grant and again.depends_on == revoke  # they land in this order
    # once the changes are on-chain, the next one waits only for what is still pending
    role_items().update(status=OutboxItem.Status.CONFIRMED)
    OutboxItem.objects.filter(key=f"register:{profile.address}").update(status=OutboxItem.Status.CONFIRMED)
    last = roles.revoke_role(profile, "developer")
    assert last.key.endswith(":3") and last.depends_on is None


def test_a_developer_registered_at_sign_up_can_lose_the_role():
    profile = developer().profile
    item = roles.revoke_role(profile, "developer")
    assert item.function == "revokeRole" and item.key == f"revokeRole:developer:{profile.address}:0"
    assert item.depends_on == registration_of(profile.address)
    assert not Profile.objects.get(pk=profile.pk).is_developer


@pytest.mark.parametrize("role", ["user", "oracle", "registrar", "admin", "", None, "Developer"])
def test_a_bad_role_is_refused_and_nothing_changes(role):
    profile = user().profile
    with pytest.raises(roles.RoleError, match="only the roles"):
        roles.grant_role(profile, role)
    with pytest.raises(roles.RoleError):
        roles.revoke_role(profile, role)
    fresh = Profile.objects.get(pk=profile.pk)
    assert not fresh.is_developer and not fresh.is_expert
    assert not role_items().exists()


def test_the_flag_and_the_call_happen_together(monkeypatch):
    profile = user().profile

    def broken(*args, **kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(outbox, "enqueue", broken)
    with pytest.raises(RuntimeError):
        roles.grant_role(profile, "developer")
    assert not Profile.objects.get(pk=profile.pk).is_developer
    assert not profile.is_developer
    assert not role_items().exists()


def test_a_model_queued_right_after_a_grant_waits_for_it():
    profile = user().profile
    grant = roles.grant_role(profile, "developer")
    assert roles.role_dependency(profile.address, "developer") == grant
    grant.status = OutboxItem.Status.CONFIRMED
    grant.save()
    assert roles.role_dependency(profile.address, "developer") == registration_of(profile.address)


# ----------------------------------------------------------------------------------------------
# Django admin
# ----------------------------------------------------------------------------------------------
@pytest.fixture
def staff_client(client, django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.org", "a long admin passphrase")
    client.force_login(root)
    return client


def test_the_admin_action_grants_the_role_on_chain_too(staff_client):
    alice, bob = user("alice").profile, user("bob").profile
    url = reverse("admin:chat_profile_changelist")
    response = staff_client.post(url, {"action": "grant_developer", "_selected_action": [alice.pk, bob.pk]})
    assert response.status_code == 302
    assert Profile.objects.filter(is_developer=True).count() == 2
    assert sorted(i.payload["account"] for i in role_items()) == sorted([alice.address, bob.address])
    # again: nothing more is queued
    staff_client.post(url, {"action": "grant_developer", "_selected_action": [alice.pk]})
    assert role_items().count() == 2
    staff_client.post(url, {"action": "revoke_developer", "_selected_action": [alice.pk]})
    assert not Profile.objects.get(pk=alice.pk).is_developer
    assert role_items().last().key == f"revokeRole:developer:{alice.address}:1"
    staff_client.post(url, {"action": "grant_expert", "_selected_action": [bob.pk]})
    assert Profile.objects.get(pk=bob.pk).is_expert
    page = staff_client.get(url).content.decode()
    assert "Grant the developer role (on-chain too)" in page and "Revoke the expert role (on-chain too)" in page
    assert "register pending" in page


def test_the_admin_shows_the_indexed_registration_and_keeps_the_flags_read_only(staff_client):
    alice = user().profile
    Registration.objects.create(address=alice.address, role=1, registered_at=1)
    page = staff_client.get(reverse("admin:chat_profile_changelist")).content.decode()
    assert "registered (user)" in page
    change = reverse("admin:chat_profile_change", args=[alice.pk])
    form = staff_client.get(change).content.decode()
    assert 'name="is_developer"' not in form and 'name="is_expert"' not in form
    staff_client.post(change, {"is_developer": "on", "is_expert": "on"})
    fresh = Profile.objects.get(pk=alice.pk)
    assert not fresh.is_developer and not fresh.is_expert and not role_items().exists()


def test_a_plain_user_cannot_use_the_admin(client):
    alice = user()
    client.force_login(alice)
    client.post(reverse("admin:chat_profile_changelist"),
                {"action": "grant_developer", "_selected_action": [alice.profile.pk]})
    assert not Profile.objects.get(pk=alice.profile.pk).is_developer


def test_the_model_and_outbox_admins_never_show_the_api_key(staff_client, settings, tmp_path):
    from apps.chat.providers import encrypt_api_key

    dave = developer()
    model = RegisteredModel.objects.create(
        owner=dave, name="tiny-7b", provider="Dave's lab", endpoint_url="http://127.0.0.1:9000/v1",
        endpoint_model="tiny", api_key_encrypted=encrypt_api_key("sk-secret"), model_id=rand_id(),
        metadata_cid="bafymodel")
    listing = staff_client.get(reverse("admin:chat_registeredmodel_changelist")).content.decode()
    assert "tiny-7b" in listing and model.model_id in listing and "bafymodel" in listing
    detail = staff_client.get(reverse("admin:chat_registeredmodel_change", args=[model.pk])).content.decode()
    assert "sk-secret" not in detail and "api_key" not in detail
    outbox_page = staff_client.get(reverse("admin:chain_outboxitem_changelist"))
    assert outbox_page.status_code == 200 and f"register:{dave.profile.address}" in outbox_page.content.decode()
    assert staff_client.get(reverse("admin:chain_chaintransaction_changelist")).status_code == 200
    assert staff_client.get(reverse("admin:chain_outboxitem_add")).status_code == 403


# ----------------------------------------------------------------------------------------------
# On a real chain, through the submitter
# ----------------------------------------------------------------------------------------------
@pytest.mark.chain
@pytest.mark.django_db(transaction=True)
def test_a_granted_developer_holds_the_role_on_chain_and_can_add_a_model(ledger):  # noqa: F811
    alice = user()
    profile = alice.profile
    developer_role = keccak(text="DEVELOPER_ROLE")
    grant = roles.grant_role(profile, "developer")
    drain(Submitter(ledger, owner="roles"))
    grant.refresh_from_db()
    assert grant.status == OutboxItem.Status.CONFIRMED, grant.last_error
    assert ledger.view("access", "hasRole", developer_role, profile.address)[0] is True
    assert ledger.view("identity", "isRegistered", profile.address)[0] is True
    # the new developer adds a model from its own address
    model_id = rand_id()
    add = outbox.enqueue("addModel", profile.address, {"modelId": model_id, "metadataCid": "bafyalice"},
                         depends_on=roles.role_dependency(profile.address))
    drain(Submitter(ledger, owner="roles"))
    add.refresh_from_db()
    assert add.status == OutboxItem.Status.CONFIRMED, add.last_error
    assert ledger.view("reputation", "modelOwner", bytes.fromhex(model_id[2:]))[0] == profile.address

    # revoke, grant again: each lands, in order
    roles.revoke_role(profile, "developer")
    drain(Submitter(ledger, owner="roles"))
    assert ledger.view("access", "hasRole", developer_role, profile.address)[0] is False
    roles.grant_role(profile, "developer")
    roles.grant_role(profile, "expert")
    drain(Submitter(ledger, owner="roles"))
    assert set(role_items().values_list("status", flat=True)) == {"confirmed"}
    assert ledger.view("access", "hasRole", developer_role, profile.address)[0] is True
    assert ledger.view("access", "hasRole", keccak(text="EXPERT_ROLE"), profile.address)[0] is True


@pytest.mark.chain
@pytest.mark.django_db(transaction=True)
def test_a_model_queued_before_the_grant_lands_waits_for_it(ledger):  # noqa: F811
    profile = user("carol").profile
    roles.grant_role(profile, "developer")
    model_id = rand_id()
    add = outbox.enqueue("addModel", profile.address, {"modelId": model_id, "metadataCid": "bafycarol"},
                         depends_on=roles.role_dependency(profile.address))
    drain(Submitter(ledger, owner="roles"))
    add.refresh_from_db()
    assert add.status == OutboxItem.Status.CONFIRMED, add.last_error
    used = {i.function: i.transaction.gas_used for i in OutboxItem.objects.filter(
        function__in=("grantRole", "register")).select_related("transaction")}
    assert used["grantRole"] < 100_000
