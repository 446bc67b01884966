"""The rating under an answer: the questionnaire, its progress to the chain, and a wallet user's
typed data to sign (and sign again). `rating_context` is what the box shows, on every page with answers."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from apps.chain import relay

from .. import ratings
from ..models import COMMENT_MAX, QUESTIONNAIRE, REASON_TAGS, Interaction, Rating


class NotRateable(Exception):
    pass


def not_rateable(view):
    """A hidden arena side's answer: a plain note instead of the rating form."""
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except NotRateable:
            return HttpResponse(format_html('<p class="note">{}</p>', ratings.BATTLE_NOT_FINAL), status=400)
    return wrapped


def latest_unrated(conversation, interactions=None) -> int | None:
    """The pk of the conversation's latest answer that is not rated yet: the one whose questionnaire shows
    open (the others fold behind "Rate this answer"). `interactions`: the conversation's turns, already read."""
    if interactions is not None:
        return max((i.pk for i in interactions if i.status == Interaction.Status.DONE
                    and getattr(i, "rating", None) is None), default=None)
    return (conversation.interactions.filter(status=Interaction.Status.DONE, rating__isnull=True)
            .order_by("-pk").values_list("pk", flat=True).first())


def rating_context(interaction, errors=None, preview=None, facts: ratings.TurnFacts | None = None,
                   unfolded: int | None | bool = True) -> dict:
    """What the rating box under an answer shows; `facts` read once for a page of turns (else for this one).
    `unfolded`: the pk of the answer whose questionnaire shows open, or True to work it out (latest_unrated)."""
    facts = facts or ratings.turn_facts([interaction])
    rating = getattr(interaction, "rating", None)
    if unfolded is True:
        unfolded = latest_unrated(interaction.conversation) if rating is None and not errors else None
    if rating is not None:
        rating = ratings.refresh(rating, facts.onchain)
    onchain = facts.onchain.get(interaction.interaction_id)
    moves = facts.moves.get(interaction.interaction_id, []) if rating is not None else []
    signer = rating.signer if rating is not None and rating.signer else facts.signer_of(interaction)
    key_kind = facts.key_kind(signer)
    return {"i": interaction, "job": getattr(interaction, "evaluation", None), "rating": rating,
            "questionnaire": [(field, item, facts.prefill.get(field) if rating is None else None)
                              for field, item in QUESTIONNAIRE.items()],
            "scale": range(1, 6), "errors": errors or {}, "reasons": REASON_TAGS, "comment_max": COMMENT_MAX,
            "preview": preview, "onchain": onchain, "moves": moves,
            # Who signs (signed) the rating, with which kind of key; a wallet user's form is signed in the browser.
            "signer": signer, "key_kind": key_kind,
            "wallet": rating is None and relay.enabled() and key_kind == "wallet",
            "sign_again": rating is not None and ratings.can_sign_again(rating, key_kind),
            "did": ratings.what_it_did(interaction, onchain, moves, first=interaction.interaction_id in facts.firsts)
            if rating is not None else "",
            "unfolded": bool(errors) or unfolded == interaction.pk}


def _own_interaction(request, pk) -> Interaction:
    """One of the user's answers that can be rated: an arena side's only once its vote is final
    on-chain (its rating form, signer and evaluation would give the model away), else 400."""
    interaction = get_object_or_404(Interaction.objects.select_related(
        "conversation__user__profile", "conversation__model", "conversation__context"), pk=pk)
    if interaction.conversation.user_id != request.user.id:
        raise PermissionDenied("Only the person who had this conversation can rate its answers.")
    if interaction.conversation.name_hidden:
        raise NotRateable()
    return interaction


@login_required
@not_rateable
def rating(request, pk):
    """The questionnaire under an answer (GET: the form or the rating's progress; POST: submit)."""
    interaction = _own_interaction(request, pk)
    errors, status = None, 200
    if request.method == "POST":
        try:
            ratings.submit_rating(request.user, interaction, request.POST)
        except ValidationError as exc:
            # htmx swaps only 2xx answers: the form with its errors (or the rating another tab sent
            # meanwhile, with why this one was not saved) comes as 200 to it, 400 to a plain POST.
            errors, status = exc.message_dict, 200 if request.htmx else 400
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
        interaction = Interaction.objects.get(pk=pk)
    preview = None
    if getattr(interaction, "rating", None) is None:
        preview = ratings.weight_preview(ratings.signer_of(interaction))
    return render(request, "chat/_rating.html", rating_context(interaction, errors, preview), status=status)


@login_required
@require_POST
@not_rateable
def rating_prepare(request, pk):
    """For a wallet user: the typed data their wallet signs for the rating in the form (JSON), or what
    is wrong with the form (400, the same messages as sending it)."""
    interaction = _own_interaction(request, pk)
    rating = getattr(interaction, "rating", None)
    try:
        if rating is not None and ratings.can_sign_again(ratings.refresh(rating)):
            return JsonResponse(ratings.prepare_again(request.user, rating))
        return JsonResponse(ratings.prepare(request.user, interaction, request.POST))
    except ValidationError as exc:
        return JsonResponse({"errors": exc.message_dict}, status=400)
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from exc


@login_required
@require_POST
@not_rateable
def rating_sign_again(request, pk):
    """A wallet user's newly signed request for a rating whose first one could not be relayed."""
    interaction = _own_interaction(request, pk)
    errors = None
    try:
        ratings.sign_again(request.user, ratings.refresh(get_object_or_404(Rating, interaction=interaction)),
                           request.POST.get("signed_request"))
    except ValidationError as exc:
        errors = exc.message_dict
    interaction = Interaction.objects.get(pk=pk)
    return render(request, "chat/_rating.html", rating_context(interaction, errors), status=200 if request.htmx
                  or not errors else 400)
