"""An operator's hold on accounts and models: suspending an account stops it at once on
the site (no login, no token, no socket, its unsent ratings not sent) and queues the revocation of
its USER_ROLE on-chain, so the contract refuses anything new naming it; suspending a model takes it
offline whatever its owner does. Both are lifted the same way."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework.authtoken.models import Token

from apps.chain.models import OutboxItem

from . import roles
from .models import Profile, Rating, RegisteredModel

log = logging.getLogger(__name__)
User = get_user_model()
SUSPENDED = "the account was suspended by the site's operator"


def account_group(user_id: int) -> str:
    """The channel-layer group every chat socket of one account joins."""
    return f"account-{user_id}"


def end_open_sockets(user_id: int) -> None:
    """Close every chat socket the account holds open, an answer streaming in one included."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(account_group(user_id), {"type": "account.suspended"})
    except Exception as exc:  # noqa: BLE001 - a socket also checks the account before each prompt it takes
        log.warning("could not close the sockets of account %s: %s", user_id, exc)


def suspend_account(user, reason: str = "") -> bool:
    """False when it was suspended already (nothing changes)."""
    with transaction.atomic():
        profile = Profile.objects.select_for_update().get(user=user)
        if profile.suspended_at is not None:
            return False
        Profile.objects.filter(pk=profile.pk).update(suspended_at=timezone.now(), suspension_reason=reason[:300])
        User.objects.filter(pk=user.pk).update(is_active=False)
        Token.objects.filter(user=user).delete()
        # Ratings not sent yet are not sent: their calls still waiting to be signed fail here.
        waiting = Rating.objects.filter(user=user, status__in=[Rating.Status.WAITING, Rating.Status.QUEUED])
        item_ids = [i for r in waiting for i in (r.hum_item_id, r.update_item_id) if i]
        OutboxItem.objects.filter(pk__in=item_ids, status=OutboxItem.Status.PENDING).update(
            status=OutboxItem.Status.FAILED, failure=OutboxItem.Failure.SUSPENDED, last_error=SUSPENDED)
        waiting.filter(Q(hum_item=None) | Q(hum_item__status=OutboxItem.Status.FAILED)).update(
            status=Rating.Status.FAILED, failure=OutboxItem.Failure.SUSPENDED, error=SUSPENDED)
        for address in filter(None, (profile.address, profile.wallet_address)):  # a linked wallet rates nothing either
            roles.queue_role_call(address, "user", "revokeRole")
        transaction.on_commit(lambda: end_open_sockets(user.pk))
    return True


def reinstate_account(user) -> bool:
    with transaction.atomic():
        profile = Profile.objects.select_for_update().get(user=user)
        if profile.suspended_at is None:
            return False
        Profile.objects.filter(pk=profile.pk).update(suspended_at=None, suspension_reason="")
        User.objects.filter(pk=user.pk).update(is_active=True)
        for address in filter(None, (profile.address, profile.wallet_address)):
            roles.queue_role_call(address, "user", "grantRole")
    return True


def suspend_model(model: RegisteredModel, reason: str = "") -> bool:
    updated = RegisteredModel.objects.filter(pk=model.pk, suspended_at=None).update(
        suspended_at=timezone.now(), suspension_reason=reason[:300])
    return bool(updated)


def lift_model_suspension(model: RegisteredModel) -> bool:
    return bool(RegisteredModel.objects.filter(pk=model.pk).exclude(suspended_at=None).update(
        suspended_at=None, suspension_reason=""))
