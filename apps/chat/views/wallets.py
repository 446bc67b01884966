"""Linking a wallet to the account: the sign-in message it signs, then the link."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import JsonResponse
from django.views.decorators.http import require_POST

from .. import wallet


@login_required
@require_POST
def wallet_challenge(request):
    """The sign-in message (EIP-4361) the user's wallet signs to prove it holds the address."""
    try:
        message = wallet.challenge(request.session, user=request.user, address=request.POST.get("address", ""),
                                   domain=request.get_host(), uri=request.build_absolute_uri("/account/"))
    except ValidationError as exc:
        return JsonResponse({"errors": exc.message_dict}, status=400)
    return JsonResponse({"message": message})


@login_required
@require_POST
def wallet_link(request):
    """Link the address that signed the sign-in message; its registration is queued."""
    try:
        profile = wallet.link(request.session, request.user, request.POST.get("message", ""),
                              request.POST.get("signature", ""))
    except ValidationError as exc:
        return JsonResponse({"errors": exc.message_dict}, status=400)
    messages.success(request, f"Your wallet {profile.wallet_address} is linked: your next answers are recorded "
                              "under it, and your wallet signs their ratings.")
    return JsonResponse({"address": profile.wallet_address})
