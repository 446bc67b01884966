"""Push an evaluation's progress to the pages showing it (at most once; the row is the truth)."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

log = logging.getLogger(__name__)


def push_evaluation(job) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    interaction = job.interaction
    html = render_to_string("chat/_evaluation_oob.html", {"i": interaction, "job": job})
    try:
        async_to_sync(layer.group_send)(f"conversation-{interaction.conversation_id}",
                                        {"type": "evaluation.update", "html": html})
    except Exception as exc:  # a page update is best-effort; the job row already holds the state
        log.warning("could not push evaluation %s: %s", job.pk, exc)
