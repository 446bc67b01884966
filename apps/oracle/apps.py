from django.apps import AppConfig


class OracleConfig(AppConfig):
    name = "apps.oracle"
    label = "oracle"
