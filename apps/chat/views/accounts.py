"""Sign-up, login (a suspended account is told so; each role lands where its work is), the account
page and the user's data to take away."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render, resolve_url

from .. import accounts, export, limits


def signup(request):
    """Sign-up as LLMCHAIN_SIGNUP allows: open, by invitation, or closed; LLMCHAIN_RATES["signups"] per address."""
    mode = settings.LLMCHAIN_SIGNUP
    errors, status = {}, 200
    if mode == "closed":
        return render(request, "registration/signup.html", {"mode": mode}, status=403)
    if request.method == "POST":
        wait = limits.take("signups", limits.client_ip(request))
        if wait is not None:
            errors = {"form": [f"Too many sign-ups from your address: try again in {limits.wait_words(wait)}."]}
            return limits.retry_after(render(request, "registration/signup.html", {
                "errors": errors, "mode": mode, "username": request.POST.get("username", "")}, status=429), wait)
        try:
            user = accounts.sign_up(request.POST.get("username", ""), request.POST.get("password", ""),
                                    invitation=request.POST.get("invitation", "") if mode == "invite" else None,
                                    share_prompts=request.POST.get("share_prompts") == "1")
        except ValidationError as exc:
            errors, status = exc.message_dict, 400
        else:
            login(request, user, backend="apps.chat.limits.AccountBackend")
            return redirect("chat")
    return render(request, "registration/signup.html", {
        "errors": errors, "username": request.POST.get("username", ""), "mode": mode,
        "invitation": request.POST.get("invitation", request.GET.get("invitation", ""))}, status=status)


class LoginView(auth_views.LoginView):
    """Django's login, saying plainly when the account is suspended, and landing each role where its work is."""

    form_class = accounts.LoginForm

    def get_default_redirect_url(self):
        return resolve_url(accounts.landing_page(self.request.user))


@login_required
def account(request):
    """The user's account: whether their prompts go into the public dataset, and their data to take away."""
    profile = accounts.profile_of(request.user)
    if request.method == "POST" and profile is not None:
        share = request.POST.get("share_prompts") == "1"
        if accounts.set_share_prompts(request.user, share):
            messages.success(request, "Your prompts, answers and ratings now go into the public dataset (without your "
                                      "name)." if share else "Your prompts, answers and ratings are no longer shared: "
                                      "the next public export leaves them out.")
        return redirect("account")
    return render(request, "chat/account.html", {"profile": profile})


@login_required
def account_export(request):
    """Everything the user gave, as one JSON file to download."""
    body = json.dumps(export.user_data(request.user), indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="llmchain-{request.user.username}.json"'
    return response
