from django.apps import AppConfig


class AnnotateConfig(AppConfig):
    name = "apps.annotate"
    label = "annotate"
