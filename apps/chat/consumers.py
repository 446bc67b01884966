"""The chat socket: a prompt comes in, the answer streams out token by token as htmx fragments."""

from __future__ import annotations

import asyncio
import json

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string


from . import conversations
from .models import Conversation, Interaction, RegisteredModel
from .replay import replay_questions


class ChatConsumer(AsyncWebsocketConsumer):
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
        try:
            prompt = json.loads(text_data or "{}").get("prompt", "")
        except (ValueError, AttributeError):
            prompt = ""
        try:
            interaction = await database_sync_to_async(conversations.begin_interaction)(
                self.scope["user"], self.conversation, prompt)
        except (ValidationError, PermissionError) as exc:
            message = "; ".join(sum(exc.message_dict.values(), [])) if isinstance(exc, ValidationError) else str(exc)
            await self.send(render_to_string("chat/_error.html", {"message": message}))
            return
        await self.send(render_to_string("chat/_turn_start.html", {"i": interaction}))

        async def send_piece(piece: str) -> None:
            await self.send(render_to_string("chat/_answer_piece.html", {"i": interaction, "piece": piece}))

        await conversations.answer(interaction, self.conversation.model, on_piece=send_piece,
                                   db=database_sync_to_async)
        # The finished turn shows its evaluation and the chain's health: database reads, so not in the loop.
        await self.send(await database_sync_to_async(render_to_string)("chat/_turn_end.html", {"i": interaction}))
        if self.conversation.model.kind == RegisteredModel.Kind.REPLAY:  # what it can be asked next
            await self.send(await database_sync_to_async(self._replay_questions)())

    def _replay_questions(self) -> str:
        return render_to_string("chat/_replay_questions.html", {
            "conversation": self.conversation, "questions": replay_questions(self.conversation), "oob": True})

    async def evaluation_update(self, event):
        """Pushed by the oracle's workers when an evaluation moves on."""
        await self.send(event["html"])
