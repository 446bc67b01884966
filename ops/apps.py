from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "ops"
    verbose_name = "Operations"

    def ready(self):
        from . import checks  # noqa: F401  registers the check that refuses an unsafe deployment
