from django.apps import AppConfig


class ChainConfig(AppConfig):
    name = "apps.chain"
    label = "chain"
