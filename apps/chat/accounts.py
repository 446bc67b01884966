"""Sign-up: a site account, its own chain key (encrypted at rest) and its on-chain identity."""

from __future__ import annotations

from types import MappingProxyType

from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.chain import outbox
from apps.chain.keys import admin_address, new_key
from apps.chain.models import OutboxItem

from .models import Invitation, Profile

User = get_user_model()


# Names of the site's own service accounts, and prefixes kept for them: nobody signs up as one
# (someone who took "mt-bench-replayer" before the operator would own every replay conversation).
RESERVED_NAMES = frozenset({"mt-bench-replayer", "mt-bench-replay", "llmchain-builtin", "admin", "administrator",
                            "root", "system", "oracle", "registrar", "operator", "llmchain"})
RESERVED_PREFIXES = ("llmchain-", "mt-bench-", "service-")
# One answer for a taken name and a reserved one: the form does not tell who has an account.
UNAVAILABLE = "This user name is not available: choose another."


def is_reserved(username: str) -> bool:
    name = username.strip().casefold()
    return name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES)


def check_sign_up(username: str, password: str | None, *, check_password: bool = True, service: bool = False) -> None:
    """Raise ValidationError (with field names) when the sign-up cannot go ahead."""
    errors = {}
    username = (username or "").strip()
    if not username:
        errors["username"] = ["Choose a user name."]
    elif len(username) > 150 or not all(c.isalnum() or c in "@.+-_" for c in username):
        errors["username"] = ["Use at most 150 letters, digits and @ . + - _ only."]
    elif (is_reserved(username) and not service) or User.objects.filter(username__iexact=username).exists():
        errors["username"] = [UNAVAILABLE]
    if check_password:
        try:
            validate_password(password or "", User(username=username))
        except ValidationError as exc:
            errors["password"] = list(exc.messages)
    if errors:
        raise ValidationError(errors)


def sign_up(username: str, password: str | None, *, role: str = "user", check_password: bool = True,
            service: bool = False, invitation: str | None = None, share_prompts: bool = False) -> User:
    """Create the account with a fresh key, and queue its Identity registration by the registrar.

    `service=True` (the site's own accounts, `password=None`) makes an account nobody can log in to,
    under a reserved name. `invitation`: the code an admin gave, used up by this sign-up.
    `share_prompts`: the user's consent to the public dataset (changeable on their account page).
    """
    check_sign_up(username, password, check_password=check_password, service=service)
    with transaction.atomic():
        invite = None
        if invitation is not None:
            invite = Invitation.objects.select_for_update().filter(code=invitation.strip(), used_by=None).first()
            if invite is None or (invite.expires_at is not None and invite.expires_at <= timezone.now()):
                raise ValidationError({"invitation": ["This invitation code is not valid (or was used already)."]})
        user = User.objects.create_user(username=username.strip(), password=password)
        if invite is not None:
            Invitation.objects.filter(pk=invite.pk).update(used_by=user, used_at=timezone.now())
        key = new_key(label=f"account:{user.username}")
        Profile.objects.create(user=user, address=key.address, is_developer=role == "developer", is_service=service,
                               share_prompts=share_prompts,
                               share_prompts_changed_at=timezone.now() if share_prompts else None)
        outbox.enqueue("register", admin_address(), {"account": key.address, "role": role})
    return user


def service_account(username: str, role: str = "user") -> User:
    """The site's own account named `username` (the built-in model's owner, the replay's user...),
    created on first use with a chain identity and no usable password."""
    return User.objects.filter(username=username).first() or sign_up(username, None, role=role,
                                                                     check_password=False, service=True)


def profile_of(user) -> Profile | None:
    if not getattr(user, "is_authenticated", False):
        return None
    return Profile.objects.filter(user=user).first()


def registration_of(address: str) -> OutboxItem | None:
    """The account's own Identity registration, while it is not on-chain yet: calls from the
    account must wait for it (the contract refuses unregistered senders)."""
    item = outbox.item_for("register", {"account": address})
    return item if item is not None and item.status != OutboxItem.Status.CONFIRMED else None


def person_of(user_id: int) -> int:
    """The account an admin linked this one to as the same person, else itself."""
    return Profile.objects.filter(user_id=user_id).values_list("same_person_as_id", flat=True).first() or user_id


def same_person(a: int, b: int) -> bool:
    """Whether accounts `a` and `b` are one person: the same account, or linked by an admin."""
    pa, pb = person_of(a), person_of(b)
    return a == b or pa == pb or pa == b or pb == a


def set_share_prompts(user, share: bool) -> bool:
    """Record the user's consent to the public dataset (or its withdrawal), with when it changed;
    False when it already was so (nothing changes)."""
    return bool(Profile.objects.filter(user=user).exclude(share_prompts=share).update(
        share_prompts=share, share_prompts_changed_at=timezone.now()))


# --- logging in --------------------------------------------------------------------------------------

WRONG_LOGIN = "Your user name and password didn't match."
# Said only to whoever gives the right password: a guesser learns nothing, the account's owner learns
# why the door stays shut (not the reason, which is the operator's to tell).
SUSPENDED_LOGIN = ("This account is suspended by the site's operator: it cannot log in for now. "
                   "Write to the operator if you think this is a mistake.")


def is_suspended_login(username, password) -> bool:
    """Whether a refused login named a suspended account with its right password."""
    if not isinstance(username, str) or not isinstance(password, str) or not password:
        return False
    account = User.objects.filter(username=username, profile__suspended_at__isnull=False,
                                  profile__is_service=False).first()
    return account is not None and account.check_password(password)


class LoginForm(AuthenticationForm):
    error_messages = MappingProxyType({**AuthenticationForm.error_messages, "invalid_login": WRONG_LOGIN})

    def clean(self):
        try:
            return super().clean()
        except ValidationError:
            if is_suspended_login(self.cleaned_data.get("username"), self.cleaned_data.get("password")):
                raise ValidationError(SUSPENDED_LOGIN, code="suspended") from None
            raise


def landing_page(user) -> str:
    """Where an account lands after logging in with no page asked for: where its work waits."""
    profile = getattr(user, "profile", None)
    if profile is not None and profile.is_expert:
        return "annotate"  # the annotation queue
    if profile is not None and profile.is_developer:
        return "models"
    return "chat"
