"""Workers woken through the Redis channel layer (apps/chain/work.py wake_on_commit, WakeConsumer):
read what a channel was sent, and hand a message to the site's routed background consumer."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import ChannelNameRouter
from channels.testing import ApplicationCommunicator

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


def redis_layer_settings(settings, prefix: str = "asgi") -> None:
    """This process's settings as the site's with REDIS_URL set (settings.py), or skip the test."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    settings.REDIS_URL = REDIS_URL
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                                                      "prefix": prefix}}}


@pytest.fixture
def redis_layer(settings):
    """The Redis channel layer, under a prefix of its own: no other test run's messages reach it."""
    redis_layer_settings(settings, prefix=f"test-{uuid.uuid4().hex[:12]}")
    layer = get_channel_layer()
    yield layer
    async_to_sync(layer.flush)()


def next_message(layer, channel: str, timeout: float = 1.0) -> dict | None:
    """The next message sent to `channel`, or None when none comes within `timeout` seconds."""
    async def receive():
        try:
            return await asyncio.wait_for(layer.receive(channel), timeout)
        except asyncio.TimeoutError:
            return None

    return async_to_sync(receive)()


def deliver(consumer, message: dict, done, timeout: float = 60) -> None:
    """Hand `message` to a background consumer routed by its channel, as `runworker <channel>` does
    (llmchain_site/asgi.py), and wait until `done()` (read from the database) is true."""
    channel = consumer.channel
    application = ChannelNameRouter({channel: consumer.as_asgi()})

    async def run():
        worker = ApplicationCommunicator(application, {"type": "channel", "channel": channel})
        await worker.send_input(message)
        check = database_sync_to_async(done)  # runs after the consumer's handler: both are thread-sensitive
        deadline = time.monotonic() + timeout
        try:
            while not await check():
                if worker.future.done():
                    worker.future.result()  # the consumer failed: its error, not a timeout
                if time.monotonic() > deadline:
                    raise AssertionError(f"the {channel} worker did not finish within {timeout} s")
                await asyncio.sleep(0.1)
        finally:
            worker.stop(exceptions=False)
            with contextlib.suppress(asyncio.CancelledError):
                await worker.future

    async_to_sync(run)()
