"""Rotating the secret that encrypts what the site keeps at rest (see docs/operating.md, "Rotating
the key-encryption secret"): the accounts' signing keys (`apps.chain`) and the registered models' API
keys (`apps.chat`) share one cipher, so one operation re-encrypts both."""

from __future__ import annotations

from apps.chain.keys import rekey_signing_keys
from apps.chat.providers import rekey_api_keys


def rekey() -> int:
    """Re-encrypt every stored secret with the first of LLMCHAIN_KEY_SECRETS; returns how many."""
    return rekey_signing_keys() + rekey_api_keys()
