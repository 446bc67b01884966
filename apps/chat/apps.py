from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "apps.chat"
    label = "chat"

    def ready(self):
        from apps.chain.signals import name_models

        name_models.connect(_registered_names, dispatch_uid="chat-model-names")


def _registered_names(sender, model_ids, **kwargs) -> dict[str, str]:
    """The names of the registered models among `model_ids` (the chain app's evidence page asks)."""
    from .models import RegisteredModel

    return dict(RegisteredModel.objects.filter(model_id__in=model_ids).values_list("model_id", "name"))
