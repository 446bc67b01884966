"""Limits on abuse: login lockout, rates, expiring tokens, accounts that never log in.

- Logins go through django-axes (`LockoutBackend`): LLMCHAIN_LOGIN_FAILURES failed tries of one
  user name from one address lock that pair out for LLMCHAIN_LOCKOUT_MINUTES, on the login page, the
  admin's and `POST /api/token`, counted in the database (every process sees them).
- `AccountBackend` lets no service account and no suspended account in, by password or session.
- Rates are DRF's scoped throttles (settings.LLMCHAIN_RATES), counted in the shared cache (Redis when
  REDIS_URL is set). `take()` counts against the same rates from places that are not DRF views: the
  chat socket's prompts, the sign-up page.
- API tokens expire LLMCHAIN_TOKEN_DAYS after they were issued.
"""

from __future__ import annotations

import datetime

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle


def client_ip(request) -> str:
    """The client's address: REMOTE_ADDR, or behind the proxy (REST_FRAMEWORK NUM_PROXIES) the one it
    adds to X-Forwarded-For. The same for the lockout and the rates."""
    return BaseThrottle().get_ident(request)


def is_locked_out_account(user) -> bool:
    """A service account or a suspended one: it never logs in."""
    profile = getattr(user, "profile", None)
    return bool(profile is not None and (profile.is_service or profile.suspended_at is not None))


class LockoutBackend(AxesStandaloneBackend):
    """django-axes' check. A call with no request (a script, the test client's login) is none of a
    visitor's tries: it is neither counted nor refused here."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class AccountBackend(ModelBackend):
    """Passwords, as Django checks them; service and suspended accounts never get in."""

    def user_can_authenticate(self, user) -> bool:
        return super().user_can_authenticate(user) and not is_locked_out_account(user)


def token_expiry(token: Token) -> datetime.datetime:
    return token.created + datetime.timedelta(days=settings.LLMCHAIN_TOKEN_DAYS)


def current_token(user) -> Token:
    """The user's API token: the one they have while it is valid, else a new one."""
    token, _ = Token.objects.get_or_create(user=user)
    if timezone.now() >= token_expiry(token):
        token.delete()
        token = Token.objects.create(user=user)
    return token


class ExpiringTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>`, refused once the token is older than LLMCHAIN_TOKEN_DAYS or its
    account cannot log in (a service account, a suspended one)."""

    def authenticate_credentials(self, key):
        user, token = super().authenticate_credentials(key)
        if timezone.now() >= token_expiry(token):
            raise exceptions.AuthenticationFailed(
                f"This API token expired on {token_expiry(token):%Y-%m-%d %H:%M} UTC; get a new one with "
                "POST /api/token.")
        if is_locked_out_account(user):
            raise exceptions.AuthenticationFailed("This account cannot use the API.")
        return user, token


class _Rate(SimpleRateThrottle):
    """One scope's counter for one identity, in DRF's own cache keys (shared with ScopedRateThrottle)."""

    def __init__(self, scope: str, ident: str):
        self.scope, self.ident = scope, ident
        super().__init__()

    def get_rate(self):
        return settings.LLMCHAIN_RATES[self.scope]

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.ident}


def take(scope: str, ident) -> float | None:
    """Count one use of `scope` by `ident` (a user's pk, or an address); None when it is allowed,
    else how many seconds until it would be."""
    rate = _Rate(scope, str(ident))
    return None if rate.allow_request(None, None) else (rate.wait() or 1.0)


def retry_after(response, seconds: float):
    """`response` (a 429) with the Retry-After header saying when to come back."""
    response["Retry-After"] = str(max(1, round(seconds)))
    return response


def wait_words(seconds: float) -> str:
    seconds = max(1, round(seconds))
    return f"{seconds} second{'s' if seconds != 1 else ''}" if seconds < 120 else f"{round(seconds / 60)} minutes"


# --- Public pages that recompute: shared copies, and a limit on who makes them recompute ------------

class RebuildLimited(Exception):
    """An anonymous visitor asked for a rebuild too soon, and no earlier copy could be shown."""

    def __init__(self, wait: float):
        super().__init__(f"try again in {wait_words(wait)}")
        self.wait = wait


def rebuild_allowance(request):
    """A callable that counts one rebuild for this visitor: None when allowed, else the seconds to
    wait. Anonymous visitors count per address against LLMCHAIN_RATES["rebuilds"]; signed-in ones
    are not limited here."""
    if getattr(request.user, "is_authenticated", False):
        return lambda: None
    ident = f"anon:{client_ip(request)}"
    return lambda: take("rebuilds", ident)


def cached_build(key: str, version: str, build, allow, timeout: float = 3600):
    """`build()` shared by every process (the cache) while `version` is the same; (value, stale).

    A new version is built only when `allow()` permits it (None): otherwise the previous copy is
    served, marked stale, or RebuildLimited is raised when there is none."""
    from django.core.cache import cache

    entry = cache.get(key)
    if entry is not None and entry[0] == version:
        return entry[1], False
    wait = allow()
    if wait is not None:
        if entry is not None:
            return entry[1], True
        raise RebuildLimited(wait)
    value = build()
    cache.set(key, (version, value), timeout)
    return value, False
