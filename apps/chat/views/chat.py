"""The chat page: choosing a context and a model (with the built-in model's start-up and the
context suggestions) and starting a conversation."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.chain.models import Context
from lib.reputation import GLOBAL_CONTEXT_ID

from .. import builtin, conversations, limits
from ..health import chat_choices
from ..models import RegisteredModel
from ..suggest import suggest
from ._common import _contexts
from .conversations import _conversation_list


@login_required
def chat(request, errors=None, status=200):
    contexts = _contexts()
    context = next((c for c in contexts if c.context_id == request.GET.get("context")), contexts[0] if contexts else None)
    models = chat_choices(context) if context else []
    return render(request, "chat/index.html", {
        "contexts": contexts, "context": context, "models": models, "errors": errors or {},
        "builtin_starting": builtin.startup_note(), **_conversation_list(request)}, status=status)


@login_required
def chat_builtin_status(request):
    """While the built-in model starts, what it is doing (the chat page asks every 3 s); once it
    answers, the context's model list with it, and the asking stops (htmx's 286)."""
    note = builtin.startup_note()
    if note is not None:
        return render(request, "chat/_builtin_starting.html", {"builtin_starting": note})
    context = Context.objects.filter(context_id=request.GET.get("context", "")).first()
    models = chat_choices(context) if context else []
    return render(request, "chat/_builtin_starting.html", {"builtin_up": True, "models": models}, status=286)


@login_required
def chat_models(request):
    """The running models of a context (htmx swaps the select when the context changes)."""
    context = Context.objects.filter(context_id=request.GET.get("context", "")).first()
    return render(request, "chat/_model_select.html", {"models": chat_choices(context) if context else []})


@login_required
def chat_suggest(request):
    """The contexts closest to what the user is about to ask (htmx fragment), LLMCHAIN_RATES["suggestions"]
    per user: each one runs the encoder."""
    wait = limits.take("suggestions", request.user.pk)
    if wait is not None:  # a fragment htmx swaps in (it leaves a 429 unswapped): the box says why it paused
        return render(request, "chat/_suggestion.html", {"paused": limits.wait_words(wait)})
    ranked = suggest(request.GET.get("prompt", "")[:2000])[:3]
    # The arena's page asks too: its links start a battle in the context instead of a chat.
    page = "arena" if request.GET.get("for") == "arena" else "chat"
    return render(request, "chat/_suggestion.html", {"ranked": ranked, "page": page})


@login_required
@require_POST
def chat_new(request):
    context = Context.objects.filter(context_id=request.POST.get("context", "")).exclude(context_id=GLOBAL_CONTEXT_ID).first()
    model = RegisteredModel.objects.filter(pk=request.POST.get("model") or 0).first()
    if context is None or model is None:
        return chat(request, {"model": ["Pick a context and a running model."]}, status=400)
    try:
        conversation = conversations.start_conversation(request.user, model, context)
    except ValidationError as exc:
        return chat(request, exc.message_dict, status=400)
    return redirect("conversation", conversation.pk)
