"""Refuse to start an unsafe deployment: one Django system check, an error rather than a warning.

It is registered as an ordinary check (tags "security" and "deploy"), so that every command that runs
system checks refuses: `runserver`, `up`, `migrate`, and the workers (`chain work`, `oracle work`,
`debate work`, `runworker`, `health`); `check --deploy` includes it too, and the ASGI application
runs it before serving (llmchain_site/asgi.py: daphne runs no checks). `serve_model` reads none of
these secrets and skips checks.

Everything unsafe is said in ONE error that names each variable to set, so that an operator who
starts with `DEBUG=0` and nothing else learns the whole list at once.
"""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from apps.chain.node import DEV_KEYS

MIN_SECRET_KEY_LENGTH = 50  # Django's own deployment check asks as much


def _key(hex_key: str) -> str:
    return (hex_key or "").strip().lower().removeprefix("0x")


def unsafe_settings() -> list[tuple[str, str]]:
    """(variable to set, what is wrong with it now) for each setting that makes this deployment unsafe."""
    problems = []
    if not settings.DEBUG:
        if settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY:
            problems.append(("SECRET_KEY", "is the development key committed in settings.py"))
        elif len(settings.SECRET_KEY) < MIN_SECRET_KEY_LENGTH:
            problems.append(("SECRET_KEY", f"is shorter than {MIN_SECRET_KEY_LENGTH} characters"))
        secrets = [s for s in settings.LLMCHAIN_KEY_SECRETS if s]
        if not secrets or secrets[0] == settings.SECRET_KEY:  # the first one encrypts
            problems.append(("LLMCHAIN_KEY_SECRETS", "is SECRET_KEY: the signing and API keys stored encrypted "
                                                     "need a secret of their own"))
        if settings.LLMCHAIN_PROFILE == "production" and not settings.ALLOWED_HOSTS:
            problems.append(("ALLOWED_HOSTS", "is empty: name the host names the site answers to"))
    if not settings.LLMCHAIN_DEV_CHAIN:
        published = {_key(k) for k in DEV_KEYS}  # settings.ANVIL_DEV_KEY is the first
        from apps.chain.keys import configured_relayer_keys, oracle_keys

        admin = _key(settings.LLMCHAIN_ADMIN_KEY)
        if admin in published:
            problems.append(("LLMCHAIN_ADMIN_KEY", "is one of anvil's published development keys"))
        if not oracle_keys():
            problems.append(("LLMCHAIN_ORACLE_KEY", "is empty: name the key (or keys) the oracle signs with"))
        problems += _own_keys("LLMCHAIN_ORACLE_KEY", oracle_keys(), published, admin,
                              "the oracle signs with a key of its own")
        # none: the oracle's, checked above
        problems += _own_keys("LLMCHAIN_RELAYER_KEY", configured_relayer_keys(), published, admin,
                              "the relayer pays gas with a key of its own")
    return problems


def _own_keys(name: str, keys: list[str], published: set[str], admin: str, why: str) -> list[tuple[str, str]]:
    """A problem for each distinct key of `name` that is a published anvil key or the admin's."""
    problems = []
    for key in {_key(k) for k in keys}:
        if key in published:
            problems.append((name, "is one of anvil's published development keys"))
        elif key == admin:
            problems.append((name, f"is the admin's key: {why}"))
    return problems


@checks.register(checks.Tags.security, "deploy")
def unsafe_deployment(app_configs=None, **kwargs) -> list[checks.Error]:
    problems = unsafe_settings()
    if not problems:
        return []
    chain = "a local development chain" if settings.LLMCHAIN_DEV_CHAIN else f"the chain at {settings.LLMCHAIN_RPC_URL}"
    lines = "\n".join(f"  {name}: {why}" for name, why in problems)
    return [checks.Error(
        f"This deployment is not safe to start (DEBUG {'on' if settings.DEBUG else 'off'}, {chain}). "
        f"Set {', '.join(dict.fromkeys(name for name, _ in problems))}:\n{lines}",
        hint="A laptop needs none of them: DEBUG=1 (the default) with anvil on 127.0.0.1. Production: see the "
             "docs/operating.md, 'Deploying' (LLMCHAIN_DEV_CHAIN=1 admits anvil's keys on a throwaway chain).",
        id="llmchain.E001")]
