"""Conversations and their interactions: the check_*/do_* functions behind page, socket and API."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from apps.chain.models import Context
from lib.ids import hex32

from . import arena
from .gateway import BadResponse, Gateway, GatewayError
from .health import running_models
from .models import Conversation, Interaction, RegisteredModel
from .providers import NoRecordedAnswer, endpoint_of, stream_answer
from .signals import interaction_finished

MAX_PROMPT = 20_000  # characters (the database keeps no more); the model's context is checked apart


def start_conversation(user, model: RegisteredModel, context: Context, title: str = "") -> Conversation:
    if not getattr(user, "is_authenticated", False):
        raise PermissionError("Log in to chat.")
    if not running_models(context).filter(pk=model.pk).exists():
        raise ValidationError({"model": [f"{model.name} is not running for {context.name} right now."]})
    return Conversation.objects.create(user=user, model=model, context=context,
                                       title=(title or default_title(model, context))[:200])


def default_title(model: RegisteredModel, context: Context) -> str:
    """A new conversation's name until its first message names it (title_from_prompt)."""
    return f"{model.name} · {context.name}"


TITLE_WORDS = 60  # characters of the first message a conversation is named by


def title_from_prompt(prompt: str) -> str:
    """A name for a conversation from its first message, as chat sites do: its first line, cut at a
    word near TITLE_WORDS characters."""
    line = " ".join(next((ln for ln in prompt.splitlines() if ln.strip()), "").split())
    if len(line) <= TITLE_WORDS:
        return line
    cut = line[:TITLE_WORDS].rsplit(" ", 1)[0] or line[:TITLE_WORDS]
    return cut.rstrip(" ,.;:") + "…"


MAX_TITLE = 200
# What deleting a conversation cannot take back, said wherever one is deleted.
DELETION_NOTE = ("Deleting removes the conversation, its messages and your ratings from this site. It cannot "
                 "remove what is already public: the on-chain records of its evaluations (ids, scores, your "
                 "account's address and ratings) and the evidence published on IPFS, which holds the prompts "
                 "and answers that were scored.")


def own(user, conversation: Conversation) -> Conversation:
    if conversation.user_id != getattr(user, "id", None):
        raise PermissionError("This is not your conversation.")
    return conversation


def rename_conversation(user, conversation: Conversation, title: str) -> Conversation:
    own(user, conversation)
    title = " ".join((title or "").split())
    if not title:
        raise ValidationError({"title": ["Give the conversation a name."]})
    if len(title) > MAX_TITLE:
        raise ValidationError({"title": [f"Keep the name under {MAX_TITLE} characters (this one has {len(title)})."]})
    Conversation.objects.filter(pk=conversation.pk).update(title=title)
    conversation.title = title
    return conversation


def unsettled(conversation: Conversation) -> QuerySet:
    """Turns whose evaluation or rating is still on its way to the chain: an answer streaming, a job
    the oracle has not seen on-chain (or given up), a rating not yet on-chain (or failed). Deleting
    them now would lose an accepted evaluation, so a conversation waits for them."""
    settled = ["onchain", "failed"]
    return conversation.interactions.filter(
        Q(status=Interaction.Status.STREAMING)
        | (Q(evaluation__isnull=False) & ~Q(evaluation__status__in=settled))
        | (Q(rating__isnull=False) & ~Q(rating__status__in=settled)))


def delete_conversation(user, conversation: Conversation) -> None:
    own(user, conversation)
    if not arena.can_delete(conversation):
        raise ValidationError({"conversation": [
            "This is one side of an arena battle whose vote is not recorded on the chain yet (or that you abandoned "
            "recently, which counts against your votes for a while): it can be deleted once that is over."]})
    waiting = unsettled(conversation).count()
    if waiting:
        raise ValidationError({"conversation": [
            f"{waiting} answer{'s' if waiting > 1 else ''} of this conversation {'are' if waiting > 1 else 'is'} "
            "still being evaluated or recorded on-chain; delete it once that is done (usually within a minute)."]})
    conversation.delete()


SEARCH_MAX_QUERY = 100  # characters of a search query; the rest is ignored


def search_conversations(user, query: str = "") -> QuerySet:
    """The user's conversations, latest first; with a query, those whose name, model, context or one
    of the user's latest LLMCHAIN_SEARCH_MESSAGES messages (prompt or answer) holds it,
    case-insensitively. The query is cut at SEARCH_MAX_QUERY characters."""
    # Arena sides whose vote is not final on-chain stay off the list: it names each conversation's model.
    mine = Conversation.objects.filter(user=user).exclude(pk__in=arena.hidden_sides().values("pk")).select_related(
        "model", "context")
    query = " ".join((query or "").split())[:SEARCH_MAX_QUERY]
    if not query:
        return mine
    # A LIKE reads every row it is given: only the user's own, and only so many of the latest.
    latest = Interaction.objects.filter(conversation__user=user).order_by("-id").values("id")[
        :settings.LLMCHAIN_SEARCH_MESSAGES]
    matching = Interaction.objects.filter(Q(prompt__icontains=query) | Q(answer__icontains=query),
                                          id__in=latest).values("conversation_id")
    return mine.filter(Q(title__icontains=query) | Q(model__name__icontains=query)
                       | Q(context__name__icontains=query) | Q(pk__in=matching))


def check_prompt(user, conversation: Conversation, prompt: str) -> str:
    if conversation.user_id != getattr(user, "id", None):
        raise PermissionError("This is not your conversation.")
    prompt = (prompt or "").strip()
    if not prompt:
        raise ValidationError({"prompt": ["Write a message first."]})
    if len(prompt) > MAX_PROMPT:
        raise ValidationError({"prompt": [f"This message has {len(prompt):,} characters; this site takes at most "
                                          f"{MAX_PROMPT:,} in one message. Nothing was sent."]})
    if conversation.interactions.filter(status=Interaction.Status.STREAMING).exists():
        raise ValidationError({"prompt": ["Wait for the current answer to finish."]})
    arena.check_turn(conversation, prompt)
    if not conversation.model.running:
        raise ValidationError({"prompt": [f"{conversation.model_label} is offline right now."]})
    return prompt


def begin_interaction(user, conversation: Conversation, prompt: str, replaces: Interaction | None = None) -> Interaction:
    """The new turn, streaming. The conversation's row is locked while it is checked and created, so
    two requests at once (two tabs, a script) cannot both start an answer: one waits, then is refused."""
    with transaction.atomic():
        locked = Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
        prompt = check_prompt(user, conversation, prompt)
        arena.claim_prompt(conversation, prompt)
        if (not conversation.interactions.exists() and not conversation.arena
                and locked.title == default_title(conversation.model, conversation.context)):
            # Named by its first message unless its owner named it already; renaming stays open.
            conversation.title = title_from_prompt(prompt) or locked.title
            Conversation.objects.filter(pk=conversation.pk).update(title=conversation.title)
        return Interaction.objects.create(conversation=conversation, prompt=prompt, replaces=replaces,
                                          interaction_id=hex32(secrets.token_bytes(32)))


def check_retry(conversation: Conversation, pk) -> Interaction:
    """The turn to ask again (regenerate, or edit and resend): the conversation's last one only, so
    that no later turn was built on the answer it replaces."""
    last = conversation.interactions.order_by("-id").first()
    if last is None or str(last.pk) != str(pk):
        raise ValidationError({"prompt": ["Only the last message can be asked again."]})
    return last


def retry_interaction(user, conversation: Conversation, pk, prompt: str | None = None) -> Interaction:
    """Ask the last turn again, with its prompt (regenerate) or an edited one; the earlier answer is kept."""
    last = check_retry(conversation, pk)
    return begin_interaction(user, conversation, last.prompt if prompt is None else prompt,
                             replaces=last.replaces or last)


def history(interaction: Interaction) -> list[dict]:
    """The messages the model sees: the earlier finished turns of the conversation (of a turn asked
    again, only its latest attempt; before the turn this one replaces), then the prompt."""
    return messages_for(interaction.conversation, interaction.prompt,
                        before=interaction.replaces_id or interaction.id)


def messages_for(conversation: Conversation, prompt: str, before: int | None = None) -> list[dict]:
    """The messages a model would see for `prompt` asked in `conversation` (before turn `before`;
    None: after every turn so far)."""
    turns = conversation.interactions.filter(status=Interaction.Status.DONE)
    earlier = list((turns if before is None else turns.filter(id__lt=before)).order_by("id"))
    latest = {}  # first turn -> its latest finished attempt
    for turn in earlier:
        latest[turn.replaces_id or turn.id] = turn
    messages = []
    for turn in latest.values():  # in the order of the first turns (a dict keeps its first insertion's place)
        messages += [{"role": "user", "content": turn.prompt},
                     {"role": "assistant", "content": turn.answer}]
    return messages + [{"role": "user", "content": prompt}]


CHARS_PER_TOKEN = 3  # an estimate on the safe side for English text (BPE tokenizers give 3.5-4.5)
MESSAGE_OVERHEAD = 8  # tokens a chat template adds around each message (role markers), at most


@dataclass(frozen=True)
class Fit:
    """How a prompt and its conversation fit a model's context."""

    tokens: int  # what the model would read
    limit: int  # its context length
    reserve: int  # kept free for the answer
    counted: bool  # by the model's own tokenizer (else estimated)

    @property
    def fits(self) -> bool:
        return self.tokens + self.reserve <= self.limit

    def describe(self, model_name: str) -> str:
        how = "counted with its tokenizer" if self.counted else "estimated"
        if self.fits:
            return (f"{self.tokens:,} of {self.limit:,} tokens ({how}), with room for a "
                    f"{self.reserve:,}-token answer.")
        over = self.tokens + self.reserve - self.limit
        return (f"Too long for {model_name}: this message and the conversation so far come to {self.tokens:,} "
                f"tokens ({how}), and {model_name} reads at most {self.limit:,}, with {self.reserve:,} of them kept "
                f"for its answer. Shorten it by about {over:,} tokens (some {over * 4:,} characters), or start a "
                "new conversation.")


def estimate_tokens(messages: list[dict]) -> int:
    return sum(-(-len(m["content"]) // CHARS_PER_TOKEN) + MESSAGE_OVERHEAD for m in messages)


async def measure_fit(conversation: Conversation, prompt: str, *, before: int | None = None,
                      gateway: Gateway | None = None) -> Fit | None:
    """Count what the model would read for `prompt` against its context length: with the endpoint's
    tokenizer where it offers one (vLLM's /tokenize, the built-in server), else estimated against the
    context length its model card advertises (looked up once a minute per model). None when the
    length is unknown (a replay model, or an endpoint that does not say)."""
    model = conversation.model
    if model.kind == RegisteredModel.Kind.REPLAY:
        return None
    messages = await sync_to_async(messages_for)(conversation, prompt, before)
    gateway = gateway or Gateway()
    endpoint = await sync_to_async(endpoint_of)(model)
    # A tokenizer gives the same count for the same text: asked once per text (and, for an endpoint
    # without one, once in 30 s), not at each keystroke's pause nor again when the text is sent.
    version = f"{model.pk}:{model.updated_at.timestamp()}"
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    count_key, none_key = f"chat:tokens:{version}:{digest}", f"chat:no-tokenizer:{version}"
    counted = await cache.aget(count_key)
    if counted is None and not await cache.aget(none_key):
        counted = await gateway.count_tokens(endpoint, messages)
        if counted is None:
            await cache.aset(none_key, True, 30)
        else:
            await cache.aset(count_key, counted, 600)
    limit = counted[1] if counted else None
    if limit is None:
        key = f"chat:context-length:{model.pk}:{model.updated_at.timestamp()}"
        limit = await cache.aget(key)
        if limit is None:
            limit = await gateway.context_length(endpoint) or 0
            await cache.aset(key, limit, 60)
    if not limit:
        return None
    tokens = counted[0] if counted else estimate_tokens(messages)
    reserve = min(settings.LLMCHAIN_ANSWER_MAX_TOKENS, limit // 4)
    return Fit(tokens=tokens, limit=limit, reserve=reserve, counted=counted is not None)


async def check_fits(conversation: Conversation, prompt: str, *, before: int | None = None,
                     gateway: Gateway | None = None) -> Fit | None:
    """Refuse (ValidationError, nothing saved) a prompt that would not fit the model's context."""
    fit = await measure_fit(conversation, prompt, before=before, gateway=gateway)
    if fit is not None and not fit.fits:
        raise ValidationError({"prompt": [fit.describe(conversation.model_label)]})
    return fit


def answered_first_turns(context: Context | None = None) -> QuerySet:
    """The answered first interactions of conversations (in `context`, if given), oldest first: the
    single-turn prompts that models answered with no history, comparable across models."""
    first = Interaction.objects.filter(conversation=OuterRef("conversation")).order_by("created_at", "id")
    turns = Interaction.objects.filter(status=Interaction.Status.DONE, id=Subquery(first.values("id")[:1]))
    if context is not None:
        turns = turns.filter(conversation__context=context)
    return turns.order_by("created_at", "id")


def finish_interaction(interaction: Interaction, answer: str, reference_pool: str = "running",
                       finish_reason: str = "") -> None:
    """Save the answer and, in the same transaction, whatever the apps built on chat keep with it (the
    oracle's evaluation job, through `interaction_finished`)."""
    now = timezone.now()
    with transaction.atomic():
        Interaction.objects.filter(pk=interaction.pk).update(
            answer=answer, status=Interaction.Status.DONE, finished_at=now, finish_reason=finish_reason)
        Conversation.objects.filter(pk=interaction.conversation_id).update(updated_at=now)
        interaction.answer, interaction.status, interaction.finished_at = answer, Interaction.Status.DONE, now
        interaction.finish_reason = finish_reason
        interaction_finished.send(sender=Interaction, interaction=interaction, reference_pool=reference_pool)


def fail_interaction(interaction: Interaction, error: str, partial: str = "") -> None:
    Interaction.objects.filter(pk=interaction.pk).update(
        answer=partial, status=Interaction.Status.FAILED, error=error[:2000], finished_at=timezone.now())
    interaction.status, interaction.error, interaction.answer = Interaction.Status.FAILED, error, partial


def stop_interaction(interaction: Interaction, partial: str) -> None:
    """The user stopped the answer: what came is kept, and nothing is evaluated (not a whole answer)."""
    now = timezone.now()
    Interaction.objects.filter(pk=interaction.pk).update(
        answer=partial, status=Interaction.Status.STOPPED, finished_at=now)
    interaction.status, interaction.answer, interaction.finished_at = Interaction.Status.STOPPED, partial, now


def plain_error(model: RegisteredModel, exc: GatewayError) -> str:
    """What went wrong, for the person chatting: what happened, whether trying again can help, and
    what else to do. The endpoint's own words and URL stay out (its owner sees them on the model page)."""
    if isinstance(exc, NoRecordedAnswer):
        return str(exc)
    if isinstance(exc, BadResponse):
        return (f"{model.name} answered in a form this site cannot read ({exc}). Trying again may not help; "
                "another model of this context can answer in the meantime.")
    if exc.permanent:
        return (f"{model.name} refused this request ({exc}). Trying again will probably fail the same way; "
                "another model of this context can answer in the meantime.")
    return (f"{model.name} could not answer just now ({exc}). This is usually brief: try again in a moment.")


def answer_params() -> dict:
    return {"max_tokens": settings.LLMCHAIN_ANSWER_MAX_TOKENS}


async def answer(interaction: Interaction, model: RegisteredModel, *,
                 on_piece: Callable[[str], Awaitable[None]] | None = None, gateway: Gateway | None = None,
                 db=sync_to_async, stop: asyncio.Event | None = None) -> GatewayError | None:
    """Ask the model, hand each piece of its answer to `on_piece`, then settle the interaction:
    done (saved with its evaluation job), failed, or stopped, never left "streaming".

    Returns the endpoint's error when it failed. `db` wraps the database calls (consumers pass
    channels' database_sync_to_async). To stop the answer, set `stop` and cancel the task running
    this: the interaction is then kept as stopped and the cancellation ends here.
    """
    parts: list[str] = []
    outcome: dict = {}  # the endpoint's finish_reason
    try:
        messages = await db(history)(interaction)
        async for piece in stream_answer(model, messages, gateway, outcome=outcome, **answer_params()):
            parts.append(piece)
            if on_piece is not None:
                await on_piece(piece)
    except GatewayError as exc:
        await db(fail_interaction)(interaction, plain_error(model, exc), "".join(parts))
        return exc
    except asyncio.CancelledError:
        if stop is None or not stop.is_set():
            await asyncio.shield(db(fail_interaction)(interaction, "the page was closed before the answer finished",
                                                      "".join(parts)))
            raise
        await asyncio.shield(db(stop_interaction)(interaction, "".join(parts)))
        asyncio.current_task().uncancel()
        return None
    except BaseException:  # the server failed: keep what came
        await asyncio.shield(db(fail_interaction)(interaction, "the answer failed on the server", "".join(parts)))
        raise
    try:
        await db(finish_interaction)(interaction, "".join(parts), finish_reason=outcome.get("finish_reason", ""))
    except asyncio.CancelledError:
        if stop is None or not stop.is_set():
            raise
        asyncio.current_task().uncancel()  # Stop came after the last piece: the whole answer is saved as done
    return None
