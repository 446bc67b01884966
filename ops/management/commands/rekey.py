"""python manage.py rekey: re-encrypt every stored secret with the first LLMCHAIN_KEY_SECRETS secret."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from ops.keys import rekey


class Command(BaseCommand):
    help = ("Re-encrypt every stored secret (the accounts' signing keys and the models' API keys) with the first "
            "LLMCHAIN_KEY_SECRETS secret; run it after putting a new secret first, before dropping the old one.")

    def handle(self, *args, **opts):
        self.stdout.write(f"re-encrypted {rekey()} stored secrets (signing keys and model API keys)")
