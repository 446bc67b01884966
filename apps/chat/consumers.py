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
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.exceptions import ValidationError
from django.template.loader import get_template, render_to_string


from . import conversations
from .models import Conversation, Interaction
from .replay import replay_questions

log = logging.getLogger(__name__)
RENDER_EVERY_S = 0.1  # the streaming answer is rendered as Markdown at most this often


class ChatConsumer(AsyncWebsocketConsumer):
    answering: asyncio.Task | None = None  # the answer streaming now
    stop: asyncio.Event | None = None

    async def connect(self):
        self.conversation = await self._conversation()
        if self.conversation is None:
            await self.close(code=4403)
            return
        self.group = f"conversation-{self.conversation.pk}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Workers push through the channel layer when it is shared (Redis); with the in-memory
        # layer of `make run` they run in other processes, so the socket also watches the rows.
        self.seen = await self._evaluation_states()
        self.watcher = asyncio.create_task(self._watch())

    async def disconnect(self, code):
        if getattr(self, "watcher", None):
            self.watcher.cancel()
        if self.answering is not None:  # the page went away: the answer fails with what came
            self.answering.cancel()
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

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

    async def _watch(self, every: float = 1.0):
        while True:
            await asyncio.sleep(every)
            states = await self._evaluation_states()
            for pk, state in states.items():
                if self.seen.get(pk) != state:
                    self.seen[pk] = state
                    await self.send(await self._render_evaluation(pk))

    @database_sync_to_async
    def _conversation(self):
        user = self.scope.get("user")
        if not getattr(user, "is_authenticated", False):
            return None
        pk = self.scope["url_route"]["kwargs"]["pk"]
        return Conversation.objects.select_related("model", "context").filter(pk=pk, user=user).first()

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
            await self.send(render_to_string("chat/_error.html", {"message": message}))
            return
        await self.send(render_to_string("chat/_turn_start.html", {"i": interaction}))
        self.stop = asyncio.Event()
        self.answering = asyncio.create_task(self._answer(interaction))

    async def _answer(self, interaction: Interaction) -> None:
        piece_template = get_template("chat/_answer_piece.html")
        parts: list[str] = []
        next_render = time.monotonic() + RENDER_EVERY_S

        async def send_piece(piece: str) -> None:
            nonlocal next_render
            parts.append(piece)
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

    async def evaluation_update(self, event):
        """Pushed by the oracle's workers when an evaluation moves on."""
        await self.send(event["html"])
