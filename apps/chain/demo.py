"""The demo a newcomer sees after `make run`: contexts and accounts, queued like any call."""

from __future__ import annotations

from eth_utils import keccak

from lib.ids import hex32

from . import outbox
from .keys import admin_address, store_key
from .models import OutboxItem, SigningKey

# The eight MT-Bench categories: the contexts the replay data (../shared/data/mt_bench) uses.
DEMO_CONTEXTS = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def context_id(name: str) -> str:
    return hex32(keccak(text=f"llmchain:context:{name}"))


def queue_context(name: str):
    """Queue addContext for a named context (ids derive from the name, so queuing twice is one call)."""
    return outbox.enqueue("addContext", admin_address(), {"contextId": context_id(name), "name": name})


def seed_demo() -> int:
    """Queue the demo contexts and a demo developer and user; returns how many calls were new."""
    before = OutboxItem.objects.count()
    admin = admin_address()
    for name in DEMO_CONTEXTS:
        queue_context(name)
    for label, role in (("demo developer", "developer"), ("demo user", "user")):
        row = SigningKey.objects.filter(label=label).first()
        if row is None:
            row = store_key(keccak(text=f"llmchain demo {label}"), label)  # deterministic, local only
        outbox.enqueue("register", admin, {"account": row.address, "role": role})
    return OutboxItem.objects.count() - before
