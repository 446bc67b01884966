"""The chat socket: a prompt comes in, the answer streams out token by token as htmx fragments, and
every so often the whole answer so far replaces them rendered as Markdown (lib/markdown.py). The
answer streams in a task, so Stop is heard while it streams and a second message is refused."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from asgiref.sync import sync_to_async

from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.template.loader import get_template, render_to_string


from . import arena, conversations, limits, moderation
from .models import Conversation, Interaction
from .replay import replay_questions

log = logging.getLogger(__name__)
RENDER_EVERY_S = 0.1  # the streaming answer is rendered as Markdown at most this often
FALLBACK_POLL_S = 3.0  # the in-memory channel layer only: how often a socket looks at its evaluations
SLOT_TTL_S = 120  # a socket's place in its user's quota lasts this long unless refreshed
SLOT_REFRESH_S = 45
CLOSE_TOO_MANY = 4429  # the close code when a user has too many chat sockets open
CLOSE_SUSPENDED = 4403


class ChatConsumer(AsyncWebsocketConsumer):
    answering: asyncio.Task | None = None  # the answer streaming now
    stop: asyncio.Event | None = None

    pane = ""  # "-<pk>" for an arena side (its page holds two conversations)
    hidden = False  # an arena side whose models are not named yet
    slot: str | None = None  # the cache key holding this socket's place in its user's quota

    async def connect(self):
        self.conversation = await self._conversation()
        if self.conversation is None:
            await self.close(code=4403)
            return
        # An arena side is one pane of two on its page: its fragments go to that pane's elements.
        self.pane = f"-{self.conversation.pk}" if self.conversation.arena else ""
        await self.accept()
        self.slot = await self._take_slot()
        if self.slot is None:
            cap = settings.LLMCHAIN_CHAT_SOCKETS_PER_USER
            await self.send(render_to_string("chat/_error.html", {"pane": self.pane, "message": (
                f"You already have {cap} chats open (tabs or devices): this page stays closed to new messages. "
                "Close one of them and reload this page.")}))
            await self.close(code=CLOSE_TOO_MANY)
            return
        self.group = f"conversation-{self.conversation.pk}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        # Suspending the account reaches every socket it holds (moderation.end_open_sockets).
        self.account = moderation.account_group(self.scope["user"].id)
        await self.channel_layer.group_add(self.account, self.channel_name)
        # Workers push each evaluation's progress through the channel layer once it commits
        # (apps/oracle/notify.py). The in-memory layer of `make run` cannot carry a push from the worker
        # processes, so only there the socket also looks at the rows, every FALLBACK_POLL_S.
        self.seen = await self._evaluation_states() if self._layer_is_local() else None
        self.watcher = asyncio.create_task(self._keep())

    def _layer_is_local(self) -> bool:
        return isinstance(self.channel_layer, InMemoryChannelLayer)

    async def _take_slot(self) -> str | None:
        """A place among the user's LLMCHAIN_CHAT_SOCKETS_PER_USER sockets, taken atomically in the
        shared cache (`add` sets a key only if it is free, in Redis as in memory); a place held by a
        process that died frees itself after SLOT_TTL_S, since live sockets refresh theirs."""
        user_id = self.scope["user"].id
        for n in range(settings.LLMCHAIN_CHAT_SOCKETS_PER_USER):
            key = f"chat-socket:{user_id}:{n}"
            if await cache.aadd(key, self.channel_name, SLOT_TTL_S):
                return key
        return None

    async def _keep(self):
        """Refresh this socket's place in its user's quota; on the in-memory layer, also watch the rows."""
        every = FALLBACK_POLL_S if self.seen is not None else SLOT_REFRESH_S
        since_refresh = 0.0
        while True:
            await asyncio.sleep(every)
            since_refresh += every
            if since_refresh >= SLOT_REFRESH_S:
                since_refresh = 0.0
                await cache.atouch(self.slot, SLOT_TTL_S)
            if self.seen is not None:
                states = await self._evaluation_states()
                for pk, state in states.items():
                    if self.seen.get(pk) != state:
                        self.seen[pk] = state
                        await self.send(await self._render_evaluation(pk))

    async def disconnect(self, code):
        if getattr(self, "watcher", None):
            self.watcher.cancel()
        if self.answering is not None:  # the page went away: the answer fails with what came
            self.answering.cancel()
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if getattr(self, "account", None):
            await self.channel_layer.group_discard(self.account, self.channel_name)
        if self.slot is not None and await cache.aget(self.slot) == self.channel_name:
            await cache.adelete(self.slot)

    @database_sync_to_async
    def _evaluation_states(self) -> dict:
        # The oracle's job of each interaction, through its reverse relation (`evaluation`): chat does
        # not import the oracle, which is built on it.
        return {pk: (status, updated) for pk, status, updated in Interaction.objects.filter(
            conversation=self.conversation, evaluation__isnull=False).values_list(
            "pk", "evaluation__status", "evaluation__updated_at")}

    @database_sync_to_async
    def _render_evaluation(self, interaction_pk: int) -> str:
        interaction = Interaction.objects.select_related("evaluation__outbox_item__transaction").get(pk=interaction_pk)
        return render_to_string("chat/_evaluation_oob.html", {"i": interaction, "job": interaction.evaluation})

    @database_sync_to_async
    def _conversation(self):
        user = self.scope.get("user")
        if not getattr(user, "is_authenticated", False):
            return None
        pk = self.scope["url_route"]["kwargs"]["pk"]
        conversation = Conversation.objects.select_related("model", "context").filter(pk=pk, user=user).first()
        self.hidden = conversation is not None and conversation.name_hidden
        return conversation

    async def receive(self, text_data=None, bytes_data=None):
        """{"prompt": ...} asks; {"action": "stop"} stops the answer streaming; {"action": "regenerate" or
        "edit", "interaction": pk[, "prompt": ...]} asks the last turn again. The answer streams in a
        task, so that a stop (or a refused second message) is read while it streams."""
        try:
            data = json.loads(text_data or "{}")
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        action = data.get("action") or "send"
        if action == "stop":
            if self.answering is not None and not self.answering.done():
                self.stop.set()
                self.answering.cancel()
            return
        user, prompt = self.scope["user"], data.get("prompt", "")
        if not await self._account_open(user.pk):  # suspended since the socket opened
            await self.account_suspended({})
            return
        wait = await sync_to_async(limits.take)("prompts", user.pk)  # the API's "prompts" rate, shared
        if wait is not None:
            await self.send(render_to_string("chat/_error.html", {"pane": self.pane, "message": (
                f"You have sent many messages in a short time: wait {limits.wait_words(wait)}, then send again. "
                "Nothing was sent.")}))
            return
        title = self.conversation.title
        try:
            # The model's context is checked before anything is saved or sent (a clear count, no cut).
            if action in ("regenerate", "edit"):
                last = await database_sync_to_async(conversations.check_retry)(self.conversation,
                                                                               data.get("interaction"))
                text = await database_sync_to_async(conversations.check_prompt)(
                    user, self.conversation, prompt if action == "edit" else last.prompt)
                await conversations.check_fits(self.conversation, text, before=last.replaces_id or last.id)
                interaction = await database_sync_to_async(conversations.retry_interaction)(
                    user, self.conversation, data.get("interaction"), prompt if action == "edit" else None)
            else:
                text = await database_sync_to_async(conversations.check_prompt)(user, self.conversation, prompt)
                await conversations.check_fits(self.conversation, text)
                interaction = await database_sync_to_async(conversations.begin_interaction)(
                    user, self.conversation, prompt)
        except (ValidationError, PermissionError) as exc:
            message = "; ".join(sum(exc.message_dict.values(), [])) if isinstance(exc, ValidationError) else str(exc)
            await self.send(render_to_string("chat/_error.html", {"pane": self.pane, "message": message}))
            return
        # The first message names the conversation (conversations.begin_interaction): the page's heading follows.
        await self.send(render_to_string("chat/_turn_start.html", {
            "i": interaction, "retitled": self.conversation.title != title}))
        self.stop = asyncio.Event()
        self.answering = asyncio.create_task(self._answer(interaction))

    async def _answer(self, interaction: Interaction) -> None:
        piece_template = get_template("chat/_answer_piece.html")
        parts: list[str] = []
        next_render = time.monotonic() + RENDER_EVERY_S

        async def send_piece(piece: str) -> None:
            nonlocal next_render
            parts.append(piece)
            if self.hidden:  # a hidden arena side: only masked renders, never a raw piece (arena.shown_so_far)
                if time.monotonic() >= next_render:
                    await self.send(render_to_string("chat/_answer_render.html", {
                        "i": interaction, "text": arena.shown_so_far(self.conversation.model, "".join(parts))}))
                    next_render = time.monotonic() + RENDER_EVERY_S
                return
            await self.send(piece_template.render({"i": interaction, "piece": piece}))
            # Every so often the whole answer so far is rendered as Markdown and replaces the raw pieces;
            # a long answer takes longer to render, so it is rendered less often (at most a quarter of the time).
            if time.monotonic() >= next_render:
                started = time.monotonic()
                html = await sync_to_async(render_to_string, thread_sensitive=False)(
                    "chat/_answer_render.html", {"i": interaction, "text": "".join(parts)})
                await self.send(html)
                next_render = time.monotonic() + max(RENDER_EVERY_S, 4 * (time.monotonic() - started))

        try:
            await conversations.answer(interaction, self.conversation.model, on_piece=send_piece,
                                       db=database_sync_to_async, stop=self.stop)
        except Exception:  # noqa: BLE001 - answer() settled the turn as failed; the page still learns it ended
            log.exception("the answer to interaction %s failed", interaction.pk)
        # The finished turn shows its evaluation and the chain's health: database reads, so not in the loop.
        await self.send(await database_sync_to_async(self._turn_end)(interaction.pk))
        questions = await database_sync_to_async(self._replay_questions)()
        if questions:  # a replay model: what it can be asked next
            await self.send(questions)

    def _turn_end(self, pk: int) -> str:
        return render_to_string("chat/_turn_end.html", {"i": Interaction.objects.get(pk=pk)})

    def _replay_questions(self) -> str:
        questions = replay_questions(self.conversation)
        return "" if questions is None else render_to_string("chat/_replay_questions.html", {
            "conversation": self.conversation, "questions": questions, "oob": True})

    @database_sync_to_async
    def _account_open(self, user_id: int) -> bool:
        return get_user_model().objects.filter(pk=user_id, is_active=True).exists()

    async def account_suspended(self, event):
        """The account was suspended: the answer streaming stops and the socket closes."""
        if self.answering is not None and not self.answering.done():
            self.answering.cancel()
        await self.send(render_to_string("chat/_error.html", {"pane": self.pane, "message": (
            "This account has been suspended by the site's operator: this chat is closed.")}))
        await self.close(code=CLOSE_SUSPENDED)

    async def evaluation_update(self, event):
        """Pushed by the oracle's workers when an evaluation moves on."""
        await self.send(event["html"])
