"""The contexts a fresh site starts with (`make run`), queued like any call.

They are the site's, not demo data: chat, the registry and the boards need contexts, and nothing
else creates them. The demo itself (replay, debates, accounts) is ops/demo.py.
"""

from __future__ import annotations

from eth_utils import keccak

from lib.ids import hex32

from . import outbox
from .keys import admin_address
from .models import OutboxItem

# The eight MT-Bench categories: the contexts the replay data (../shared/data/mt_bench) uses.
DEMO_CONTEXTS = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def context_id(name: str) -> str:
    return hex32(keccak(text=f"llmchain:context:{name}"))


def queue_context(name: str):
    """Queue addContext for a named context (ids derive from the name, so queuing twice is one call)."""
    return outbox.enqueue("addContext", admin_address(), {"contextId": context_id(name), "name": name})


def seed_contexts() -> int:
    """Queue the starting contexts; returns how many calls were new (0 on every later start)."""
    before = OutboxItem.objects.count()
    for name in DEMO_CONTEXTS:
        queue_context(name)
    return OutboxItem.objects.count() - before
