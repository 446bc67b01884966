"""Roles granted after sign-up (developer, expert): the site's flag and the on-chain role move together.

An admin grants or revokes a role; the Profile flag changes and the LLMChainAccess
`grantRole`/`revokeRole` call from the admin address is queued in the same database transaction,
so the site never shows a role the chain was not asked for (or the other way round). The call
waits for the account's Identity registration when that is not on-chain yet, and for the
previous change of the same role, so changes land in the order they were made.
"""

from __future__ import annotations

from django.db import transaction
from eth_utils import to_checksum_address

from apps.chain import outbox
from apps.chain.keys import admin_address
from apps.chain.models import OutboxItem

from .models import Profile
from .accounts import registration_of

# Role name -> the Profile flag that mirrors it. `user` comes with registration and the operator
# roles (oracle, registrar) with deployment: neither is granted here.
ROLE_FLAGS = {"developer": "is_developer", "expert": "is_expert"}


class RoleError(outbox.InvalidCall):
    """The role cannot be granted or revoked as asked; nothing changed."""


def role_calls(role: str, account: str):
    """Every queued grantRole/revokeRole of `role` for `account`, oldest first."""
    payload = {"role": role, "account": account}
    return (outbox.items_for("grantRole", payload) | outbox.items_for("revokeRole", payload)).order_by("id")


def role_dependency(account: str, role: str = "developer") -> OutboxItem | None:
    """What a call that needs `role` on-chain (e.g. addModel needs developer) must wait for: the
    role's latest change while it is not on-chain yet, else the account's unconfirmed registration.

    A flag flips at once but its grantRole lands later; a call queued in between without this
    dependency could reach the chain first and be refused.
    """
    account = to_checksum_address(account)
    pending = role_calls(role, account).filter(status__in=(OutboxItem.Status.PENDING, OutboxItem.Status.SIGNED)).last()
    return pending if pending is not None else registration_of(account)


def queue_role_call(account: str, role: str, function: str) -> OutboxItem:
    """Queue grantRole/revokeRole of `role` for `account` from the admin: keyed as its n-th change
    (counting the changes lets grant -> revoke -> grant queue three calls, while the same change
    asked twice stays one row), after the role's previous change still on its way (or the account's
    registration)."""
    account = to_checksum_address(account)
    n = role_calls(role, account).count()  # earlier changes of this role for this account
    return outbox.enqueue(function, admin_address(), {"role": role, "account": account},
                          depends_on=role_dependency(account, role), revision=n)


def _flag(role: str) -> str:
    try:
        return ROLE_FLAGS[role]
    except (KeyError, TypeError):
        raise RoleError(f"only the roles {sorted(ROLE_FLAGS)} are granted here, not {role!r}") from None


def _change(profile: Profile, role: str, holds: bool) -> OutboxItem | None:
    flag = _flag(role)
    function = "grantRole" if holds else "revokeRole"
    with transaction.atomic():
        locked = Profile.objects.select_for_update().get(pk=profile.pk)
        if getattr(locked, flag) == holds:
            setattr(profile, flag, holds)
            return None  # already so: nothing to queue
        setattr(locked, flag, holds)
        locked.save(update_fields=[flag])
        item = queue_role_call(locked.address, role, function)
    setattr(profile, flag, holds)
    return item


def grant_role(profile: Profile, role: str) -> OutboxItem | None:
    """Give `profile` the developer or expert role, on the site and on-chain.

    Returns the queued grantRole call, or None when the profile already has the role.
    Raises RoleError for any other role (nothing changes).
    """
    return _change(profile, role, True)


def revoke_role(profile: Profile, role: str) -> OutboxItem | None:
    """Take the developer or expert role away, on the site and on-chain (revokeRole).

    Returns the queued revokeRole call, or None when the profile does not have the role.
    """
    return _change(profile, role, False)
