"""A conversation: its page with the rating box under each answer, the list (searched), renaming,
deleting, and the message being written counted against the model's context."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from .. import arena, conversations, limits, ratings
from ..models import Conversation, Interaction
from ..replay import replay_questions
from ._common import TURN_RELATED, owned
from .ratings import latest_unrated, rating_context


def _conversation_list(request) -> dict:
    query = request.GET.get("q", "")
    found = conversations.search_conversations(request.user, query)
    return {"conversations": found[:50], "count": found.count(), "q": query}


@login_required
def chat_conversations(request):
    """The conversation list, searched (htmx swaps it as the user types)."""
    return render(request, "chat/_conversations.html", _conversation_list(request))


def _own(request, pk) -> Conversation:
    return owned(Conversation.objects.select_related("model", "context"), pk, request.user,
                 "This is not your conversation.")


@login_required
def conversation(request, pk):
    conv = _own(request, pk)
    if conv.arena and conv.name_hidden:  # a side of a battle not voted on: its page would name the model
        return redirect("arena-battle", arena.battle_of(conv).pk)
    interactions = list(conv.interactions.select_related(*TURN_RELATED))
    preview = ratings.weight_preview(request.user.profile.rating_address) if any(
        i.status == Interaction.Status.DONE and getattr(i, "rating", None) is None for i in interactions) else None
    facts = ratings.turn_facts(interactions)
    unfolded = latest_unrated(conv, interactions)
    turns = [(i, rating_context(i, preview=preview, facts=facts, unfolded=unfolded)) for i in interactions]
    return render(request, "chat/conversation.html", {"conversation": conv, "turns": turns,
                                                      "questions": replay_questions(conv)})


@login_required
@require_POST
def conversation_rename(request, pk):
    conv = _own(request, pk)
    try:
        conversations.rename_conversation(request.user, conv, request.POST.get("title", ""))
    except ValidationError as exc:
        messages.error(request, " ".join(sum(exc.message_dict.values(), [])))
    else:
        messages.success(request, f"Renamed to “{conv.title}”.")
    return redirect("chat") if request.POST.get("next") == "list" else redirect("conversation", conv.pk)


@login_required
@require_POST
def conversation_count(request, pk):
    """The message being written, counted against the model's context (htmx, as the user types)."""
    conv = _own(request, pk)
    prompt = request.POST.get("prompt", "").strip()
    if not prompt:
        return render(request, "chat/_prompt_count.html", {})
    if len(prompt) > conversations.MAX_PROMPT:
        return render(request, "chat/_prompt_count.html", {"too_long": True, "text": (
            f"{len(prompt):,} characters: this site takes at most {conversations.MAX_PROMPT:,} in one message.")})
    wait = limits.take("counts", request.user.pk)
    if wait is not None:  # the model's endpoint is not asked; sending still checks the length
        return render(request, "chat/_prompt_count.html", {"text": (
            f"{len(prompt):,} characters (the token count pauses for {limits.wait_words(wait)}: it was asked "
            "many times in a short time).")})
    fit = async_to_sync(conversations.measure_fit)(conv, prompt)
    if fit is None:
        return render(request, "chat/_prompt_count.html", {"text": f"{len(prompt):,} characters."})
    return render(request, "chat/_prompt_count.html", {"too_long": not fit.fits, "text": fit.describe(conv.model_label)})


@login_required
def conversation_delete(request, pk):
    """GET: what deleting removes and what it cannot; POST: delete."""
    conv = _own(request, pk)
    error = None
    if request.method == "POST":
        try:
            conversations.delete_conversation(request.user, conv)
        except ValidationError as exc:
            error = " ".join(sum(exc.message_dict.values(), []))
        else:
            messages.success(request, f"Deleted “{conv.title}”. {conversations.DELETION_NOTE.split('. ', 1)[1]}")
            return redirect("chat")
    return render(request, "chat/conversation_delete.html", {
        "conversation": conv, "note": conversations.DELETION_NOTE, "error": error,
        "turns": conv.interactions.count()}, status=400 if error else 200)
