"""Named personas and a few contexts for chat tests: alice the user, dave the developer,
mallory the outsider; contexts as the indexer would have written them."""

from __future__ import annotations

from apps.chain.demo import context_id
from apps.chain.models import Context
from apps.chat.accounts import sign_up

PASSWORD = "a long enough passphrase"


def make_contexts(*names: str) -> list[Context]:
    return [Context.objects.get_or_create(context_id=context_id(n), defaults={"name": n, "block_number": 1})[0]
            for n in names]


def developer(name: str = "dave"):
    return sign_up(name, PASSWORD, role="developer")


def user(name: str = "alice"):
    return sign_up(name, PASSWORD)
