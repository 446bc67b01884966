"""The people of the tests, for every test package: alice the user, dave the developer, erin the
expert (frank a second one), mallory the outsider: an account with no stake in what the test does.
Each signs up as a person does (`apps.chat.accounts.sign_up`: a
signing key, the Identity registration queued), with the one test password."""

from __future__ import annotations

from apps.chat.accounts import sign_up
from apps.chat.models import Profile

PASSWORD = "a long enough passphrase"


def user(name: str = "alice"):
    return sign_up(name, PASSWORD)


def developer(name: str = "dave"):
    return sign_up(name, PASSWORD, role="developer")


def expert(name: str = "erin"):
    account = user(name)
    Profile.objects.filter(user=account).update(is_expert=True)
    return account


def outsider(name: str = "mallory"):
    return user(name)
