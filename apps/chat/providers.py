"""How the site reaches a registered model: its endpoint through the gateway, or a replay."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async

from apps.chain.keys import cipher

from .gateway import Endpoint, EndpointRefused, Gateway
from .models import RegisteredModel, ReplayAnswer


class NoRecordedAnswer(EndpointRefused):
    """A replay model was asked something it has no recorded answer to: the interaction fails (it is
    never evaluated, put on-chain or offered for rating), and asking again cannot help."""

    def __init__(self, model: RegisteredModel):
        super().__init__(f"{model.name} is a replay model: it answers only its recorded MT-Bench questions "
                         "(and their follow-ups, asked in order). Pick one of its questions.")


def prompt_key(text: str) -> str:
    """Prompts match whatever their spacing and case."""
    return hashlib.sha256(re.sub(r"\s+", " ", text).strip().casefold().encode()).hexdigest()


def encrypt_api_key(key: str) -> bytes | None:
    return cipher().encrypt(key.encode()) if key else None


def decrypt_api_key(token: bytes | None) -> str:
    return cipher().decrypt(bytes(token)).decode() if token else ""


def rekey_api_keys() -> int:
    """Re-encrypt every registered model's API key with the first configured secret; returns how many."""
    f = cipher()
    models = list(RegisteredModel.objects.exclude(api_key_encrypted=None))
    for model in models:
        model.api_key_encrypted = f.rotate(bytes(model.api_key_encrypted))
    RegisteredModel.objects.bulk_update(models, ["api_key_encrypted"], batch_size=500)
    return len(models)


def endpoint_of(model: RegisteredModel) -> Endpoint:
    return Endpoint(model.endpoint_url, model.endpoint_model, decrypt_api_key(model.api_key_encrypted))


def find_replay(model_pk: int, messages: list[dict]) -> str | None:
    users = [m["content"] for m in messages if m.get("role") == "user"]
    if not users:
        return None
    previous = prompt_key(users[-2]) if len(users) > 1 else ""
    row = ReplayAnswer.objects.filter(model_id=model_pk, prompt_key=prompt_key(users[-1]),
                                      previous_key=previous).first()
    return row.text if row else None


async def stream_answer(model: RegisteredModel, messages: list[dict], gateway: Gateway | None = None,
                        **params) -> AsyncIterator[str]:
    """Yield the model's answer to `messages` piece by piece (an `outcome` dict in `params` receives the
    endpoint's finish_reason; a replay always finishes with "stop")."""
    if model.kind == RegisteredModel.Kind.REPLAY:
        text = await sync_to_async(find_replay)(model.pk, messages)
        if text is None:
            raise NoRecordedAnswer(model)
        for piece in re.findall(r"\S+\s*|\s+", text):
            yield piece
        if params.get("outcome") is not None:
            params["outcome"]["finish_reason"] = "stop"
        return
    async for piece in (gateway or Gateway()).stream_chat(endpoint_of(model), messages, **params):
        yield piece
