"""Conversations and their interactions: the check_*/do_* functions behind page, socket and API."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from apps.chain.models import Context
from lib.ids import hex32

from .gateway import Gateway, GatewayError
from .health import running_models
from .models import Conversation, Interaction, RegisteredModel
from .signals import interaction_finished
from .providers import stream_answer

MAX_PROMPT = 8000


def start_conversation(user, model: RegisteredModel, context: Context, title: str = "") -> Conversation:
    if not getattr(user, "is_authenticated", False):
        raise PermissionError("Log in to chat.")
    if not running_models(context).filter(pk=model.pk).exists():
        raise ValidationError({"model": [f"{model.name} is not running for {context.name} right now."]})
    return Conversation.objects.create(user=user, model=model, context=context,
                                       title=(title or f"{model.name} · {context.name}")[:200])


def check_prompt(user, conversation: Conversation, prompt: str) -> str:
    if conversation.user_id != getattr(user, "id", None):
        raise PermissionError("This is not your conversation.")
    prompt = (prompt or "").strip()
    if not prompt:
        raise ValidationError({"prompt": ["Write a message first."]})
    if len(prompt) > MAX_PROMPT:
        raise ValidationError({"prompt": [f"Keep a message under {MAX_PROMPT} characters."]})
    if conversation.interactions.filter(status=Interaction.Status.STREAMING).exists():
        raise ValidationError({"prompt": ["Wait for the current answer to finish."]})
    model = conversation.model
    if not model.running:
        raise ValidationError({"prompt": [f"{model.name} is offline right now."]})
    return prompt


def begin_interaction(user, conversation: Conversation, prompt: str) -> Interaction:
    prompt = check_prompt(user, conversation, prompt)
    return Interaction.objects.create(conversation=conversation, prompt=prompt,
                                      interaction_id=hex32(secrets.token_bytes(32)))


def history(interaction: Interaction) -> list[dict]:
    """The messages the model sees: earlier finished turns of the conversation, then the prompt."""
    messages = []
    for earlier in interaction.conversation.interactions.filter(
            status=Interaction.Status.DONE, id__lt=interaction.id).order_by("id"):
        messages += [{"role": "user", "content": earlier.prompt},
                     {"role": "assistant", "content": earlier.answer}]
    return messages + [{"role": "user", "content": interaction.prompt}]


def answered_first_turns(context: Context | None = None) -> QuerySet:
    """The answered first interactions of conversations (in `context`, if given), oldest first: the
    single-turn prompts that models answered with no history, comparable across models."""
    first = Interaction.objects.filter(conversation=OuterRef("conversation")).order_by("created_at", "id")
    turns = Interaction.objects.filter(status=Interaction.Status.DONE, id=Subquery(first.values("id")[:1]))
    if context is not None:
        turns = turns.filter(conversation__context=context)
    return turns.order_by("created_at", "id")


def finish_interaction(interaction: Interaction, answer: str, reference_pool: str = "running") -> None:
    """Save the answer and, in the same transaction, whatever the apps built on chat keep with it (the
    oracle's evaluation job, through `interaction_finished`)."""
    now = timezone.now()
    with transaction.atomic():
        Interaction.objects.filter(pk=interaction.pk).update(
            answer=answer, status=Interaction.Status.DONE, finished_at=now)
        Conversation.objects.filter(pk=interaction.conversation_id).update(updated_at=now)
        interaction.answer, interaction.status, interaction.finished_at = answer, Interaction.Status.DONE, now
        interaction_finished.send(sender=Interaction, interaction=interaction, reference_pool=reference_pool)


def fail_interaction(interaction: Interaction, error: str, partial: str = "") -> None:
    Interaction.objects.filter(pk=interaction.pk).update(
        answer=partial, status=Interaction.Status.FAILED, error=error[:2000], finished_at=timezone.now())
    interaction.status, interaction.error, interaction.answer = Interaction.Status.FAILED, error, partial


def answer_params() -> dict:
    return {"max_tokens": settings.LLMCHAIN_ANSWER_MAX_TOKENS}


async def answer(interaction: Interaction, model: RegisteredModel, *,
                 on_piece: Callable[[str], Awaitable[None]] | None = None, gateway: Gateway | None = None,
                 db=sync_to_async) -> GatewayError | None:
    """Ask the model, hand each piece of its answer to `on_piece`, then settle the interaction:
    done (saved with its evaluation job) or failed, never left "streaming".

    Returns the endpoint's error when it failed. `db` wraps the database calls (consumers pass
    channels' database_sync_to_async).
    """
    messages = await db(history)(interaction)
    parts: list[str] = []
    try:
        async for piece in stream_answer(model, messages, gateway, **answer_params()):
            parts.append(piece)
            if on_piece is not None:
                await on_piece(piece)
    except GatewayError as exc:
        await db(fail_interaction)(interaction, str(exc), "".join(parts))
        return exc
    except BaseException as exc:  # the page went away, or the server failed: keep what came
        reason = ("the page was closed before the answer finished" if isinstance(exc, asyncio.CancelledError)
                  else "the answer failed on the server")
        await asyncio.shield(db(fail_interaction)(interaction, reason, "".join(parts)))
        raise
    await db(finish_interaction)(interaction, "".join(parts))
    return None
