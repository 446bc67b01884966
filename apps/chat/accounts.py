"""Sign-up: a site account, its own chain key (encrypted at rest) and its on-chain identity."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction

from apps.chain import outbox
from apps.chain.keys import admin_address, new_key
from apps.chain.models import OutboxItem

from .models import Profile

User = get_user_model()


def check_sign_up(username: str, password: str | None, *, check_password: bool = True) -> None:
    """Raise ValidationError (with field names) when the sign-up cannot go ahead."""
    errors = {}
    username = (username or "").strip()
    if not username:
        errors["username"] = ["Choose a user name."]
    elif len(username) > 150 or not all(c.isalnum() or c in "@.+-_" for c in username):
        errors["username"] = ["Use at most 150 letters, digits and @ . + - _ only."]
    elif User.objects.filter(username__iexact=username).exists():
        errors["username"] = ["That user name is taken."]
    if check_password:
        try:
            validate_password(password or "", User(username=username))
        except ValidationError as exc:
            errors["password"] = list(exc.messages)
    if errors:
        raise ValidationError(errors)


def sign_up(username: str, password: str | None, *, role: str = "user", check_password: bool = True) -> User:
    """Create the account with a fresh key, and queue its Identity registration by the registrar.

    `password=None` (service accounts only) makes an account nobody can log in to.
    """
    check_sign_up(username, password, check_password=check_password)
    with transaction.atomic():
        user = User.objects.create_user(username=username.strip(), password=password)
        key = new_key(label=f"account:{user.username}")
        Profile.objects.create(user=user, address=key.address, is_developer=role == "developer")
        outbox.enqueue("register", admin_address(), {"account": key.address, "role": role})
    return user


def service_account(username: str, role: str = "user") -> User:
    """The site's own account named `username` (the built-in model's owner, the replay's user...),
    created on first use with a chain identity and no usable password."""
    return User.objects.filter(username=username).first() or sign_up(username, None, role=role,
                                                                     check_password=False)


def profile_of(user) -> Profile | None:
    if not getattr(user, "is_authenticated", False):
        return None
    return Profile.objects.filter(user=user).first()


def registration_of(address: str) -> OutboxItem | None:
    """The account's own Identity registration, while it is not on-chain yet: calls from the
    account must wait for it (the contract refuses unregistered senders)."""
    return OutboxItem.objects.filter(key=f"register:{address}").exclude(
        status=OutboxItem.Status.CONFIRMED).first()
