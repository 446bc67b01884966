"""The blind arena: starting a battle, its page with both answers, the vote (and a wallet user's typed
data for it), abandoning a battle."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from .. import arena, limits, ratings
from ..models import Battle
from ._common import TURN_RELATED, _contexts, owned
from .ratings import rating_context


@login_required
def arena_index(request):
    """Start a blind battle in a context (GET: the form and the user's battles; POST: start one)."""
    errors, status = {}, 200
    contexts = _contexts()
    wanted = request.POST.get("context") or request.GET.get("context")
    context = next((c for c in contexts if c.context_id == wanted), contexts[0] if contexts else None)
    if request.method == "POST":
        wait = limits.take("conversations", request.user.pk)
        if wait is not None:
            errors, status = {"context": [f"You started many battles in a short time: wait {limits.wait_words(wait)}."]}, 429
        elif context is None:
            errors, status = {"context": ["Choose a context."]}, 400
        else:
            try:
                battle = arena.start_battle(request.user, context)
            except ValidationError as exc:
                errors, status = exc.message_dict, 400
            else:
                return redirect("arena-battle", battle.pk)
    battles = list(Battle.objects.filter(user=request.user).select_related(
        "context", "conversation_a__model", "conversation_b__model").with_revealed().order_by("-created_at")[:20])
    response = render(request, "chat/arena.html", {"contexts": contexts, "context": context, "errors": errors,
                                                   "battles": battles,
                                                   # the newest: no battle starts while one waits for its vote
                                                   "unvoted": battles[0] if battles and battles[0].status == Battle.Status.ANSWERING else None,
                                                   "abandon_limit": settings.LLMCHAIN_ARENA_ABANDON_LIMIT,
                                                   "abandon_days": f"{settings.LLMCHAIN_ARENA_ABANDON_DAYS:g}"},
                      status=status)
    return limits.retry_after(response, 60) if status == 429 else response


def _own_battle(request, pk) -> Battle:
    return owned(Battle.objects.select_related("context", "conversation_a__model", "conversation_b__model"), pk,
                 request.user, "This is not your battle.")


@login_required
def arena_battle(request, pk):
    battle = _own_battle(request, pk)
    panes = []
    for side, conversation in zip(("A", "B"), (battle.conversation_a, battle.conversation_b)):
        interactions = list(conversation.interactions.select_related(*TURN_RELATED))
        facts = None if conversation.name_hidden else ratings.turn_facts(interactions)
        panes.append({"side": side, "conversation": conversation,
                      "turns": [(i, None if conversation.name_hidden else rating_context(i, facts=facts,
                                                                                          unfolded=None))
                                for i in interactions]})
    return render(request, "chat/arena_battle.html", {"battle": battle, "panes": panes,
                                                      "vote": _vote_context(battle)})


def _vote_context(battle: Battle, errors=None) -> dict:
    battle = arena.refresh(battle)
    return {"battle": battle, "summary": arena.summary(battle), "outcomes": Battle.OUTCOMES.items(),
            "wallet": arena.signer(battle) if battle.status == Battle.Status.ANSWERING and arena.needs_wallet(battle)
            else "",
            "errors": errors or {}}


@login_required
def arena_vote(request, pk):
    """The vote under a battle (GET: the buttons once both answers are in, or the vote and its way to
    the chain; POST: vote)."""
    battle = _own_battle(request, pk)
    errors = None
    if request.method == "POST":
        try:
            battle = arena.vote(request.user, battle, request.POST.get("outcome", ""),
                                request.POST.get("signed_request"))
        except ValidationError as exc:
            errors = exc.message_dict
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
    context = _vote_context(battle, errors)
    response = render(request, "chat/_arena_vote.html", context)
    # Voted, or the names are revealed to a page that showed them hidden (its poll says so): the whole
    # page follows.
    if (request.method == "POST" and errors is None) or (request.GET.get("hidden") and context["summary"]["revealed"]):
        response["HX-Refresh"] = "true"
    return response


@login_required
@require_POST
def arena_abandon(request, pk):
    """Leave a battle without voting (recorded: it counts against the user's later votes)."""
    battle = _own_battle(request, pk)
    try:
        arena.abandon(request.user, battle)
    except ValidationError as exc:
        messages.error(request, " ".join(sum(exc.message_dict.values(), [])))
        return redirect("arena-battle", battle.pk)
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from exc
    messages.success(request, "Battle abandoned: it is recorded, and abandoning many counts against your votes.")
    return redirect("arena")


@login_required
@require_POST
def arena_vote_prepare(request, pk):
    """For a wallet user: the typed data their wallet signs for the vote chosen (JSON)."""
    battle = _own_battle(request, pk)
    try:
        return JsonResponse(arena.prepare_vote(request.user, battle, request.POST.get("outcome", "")))
    except ValidationError as exc:
        return JsonResponse({"errors": exc.message_dict}, status=400)
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from exc
