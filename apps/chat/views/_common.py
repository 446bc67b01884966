"""What several of the chat's pages share: the contexts a page offers, what a turn's page fetches
with each answer, and the user's own conversation or battle."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404

from apps.chain.models import Context
from lib.reputation import GLOBAL_CONTEXT_ID


# What a turn's page shows of each interaction, fetched with it.
TURN_RELATED = ("evaluation__outbox_item__transaction", "rating__hum_item__transaction",
                "rating__update_item__transaction")


def _contexts():
    return list(Context.objects.exclude(context_id=GLOBAL_CONTEXT_ID).order_by("name"))


def owned(queryset, pk: int, user, refusal: str):
    """The row `pk` of `queryset` if it is `user`'s: 404 when there is none, 403 (`refusal`) when it is
    someone else's."""
    row = get_object_or_404(queryset, pk=pk)
    if row.user_id != user.id:
        raise PermissionDenied(refusal)
    return row
