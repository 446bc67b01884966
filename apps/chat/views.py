"""Pages: sign-up, chat, the model registry."""

from __future__ import annotations

import json
from functools import wraps

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Exists, OuterRef
from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render, resolve_url
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from apps.chain import outbox, relay
from apps.chain.models import ArenaBattle, Context, LedgerModel
from lib.reputation import GLOBAL_CONTEXT_ID

from . import accounts, arena, builtin, conversations, export, limits, ratings, registry, wallet
from .health import chat_choices
from .models import COMMENT_MAX, QUESTIONNAIRE, REASON_TAGS, Battle, Conversation, Interaction, Rating, RegisteredModel
from .replay import replay_questions
from .suggest import suggest



# What a turn's page shows of each interaction, fetched with it.
TURN_RELATED = ("evaluation__outbox_item__transaction", "rating__hum_item__transaction",
                "rating__update_item__transaction")


def _contexts():
    return list(Context.objects.exclude(context_id=GLOBAL_CONTEXT_ID).order_by("name"))


def signup(request):
    """Sign-up as LLMCHAIN_SIGNUP allows: open, by invitation, or closed; LLMCHAIN_RATES["signups"] per address."""
    mode = settings.LLMCHAIN_SIGNUP
    errors, status = {}, 200
    if mode == "closed":
        return render(request, "registration/signup.html", {"mode": mode}, status=403)
    if request.method == "POST":
        wait = limits.take("signups", limits.client_ip(request))
        if wait is not None:
            errors = {"form": [f"Too many sign-ups from your address: try again in {limits.wait_words(wait)}."]}
            return limits.retry_after(render(request, "registration/signup.html", {
                "errors": errors, "mode": mode, "username": request.POST.get("username", "")}, status=429), wait)
        try:
            user = accounts.sign_up(request.POST.get("username", ""), request.POST.get("password", ""),
                                    invitation=request.POST.get("invitation", "") if mode == "invite" else None,
                                    share_prompts=request.POST.get("share_prompts") == "1")
        except ValidationError as exc:
            errors, status = exc.message_dict, 400
        else:
            login(request, user, backend="apps.chat.limits.AccountBackend")
            return redirect("chat")
    return render(request, "registration/signup.html", {
        "errors": errors, "username": request.POST.get("username", ""), "mode": mode,
        "invitation": request.POST.get("invitation", request.GET.get("invitation", ""))}, status=status)


class LoginView(auth_views.LoginView):
    """Django's login, saying plainly when the account is suspended, and landing each role where its work is."""

    form_class = accounts.LoginForm

    def get_default_redirect_url(self):
        return resolve_url(accounts.landing_page(self.request.user))


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


def _conversation_list(request) -> dict:
    query = request.GET.get("q", "")
    found = conversations.search_conversations(request.user, query)
    return {"conversations": found[:50], "count": found.count(), "q": query}


@login_required
def chat_conversations(request):
    """The conversation list, searched (htmx swaps it as the user types)."""
    return render(request, "chat/_conversations.html", _conversation_list(request))


def _own(request, pk) -> Conversation:
    conv = get_object_or_404(Conversation.objects.select_related("model", "context"), pk=pk)
    if conv.user_id != request.user.id:
        raise PermissionDenied("This is not your conversation.")
    return conv


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


@login_required
def chat_models(request):
    """The running models of a context (htmx swaps the select when the context changes)."""
    context = Context.objects.filter(context_id=request.GET.get("context", "")).first()
    return render(request, "chat/_model_select.html", {"models": chat_choices(context) if context else []})


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
        rating = ratings.refresh(rating)
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
            "did": ratings.what_it_did(interaction, onchain, moves) if rating is not None else "",
            "unfolded": bool(errors) or unfolded == interaction.pk}


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


@login_required
def conversation(request, pk):
    conv = get_object_or_404(Conversation.objects.select_related("model", "context"), pk=pk)
    if conv.user_id != request.user.id:
        raise PermissionDenied("This is not your conversation.")
    if conv.arena and conv.name_hidden:  # a side of a battle not voted on: its page would name the model
        return redirect("arena-battle", arena.battle_of(conv).pk)
    interactions = list(conv.interactions.select_related(*TURN_RELATED))
    preview = ratings.weight_preview(request.user.profile.rating_address) if any(
        i.status == "done" and getattr(i, "rating", None) is None for i in interactions) else None
    facts = ratings.turn_facts(interactions)
    unfolded = latest_unrated(conv, interactions)
    turns = [(i, rating_context(i, preview=preview, facts=facts, unfolded=unfolded)) for i in interactions]
    return render(request, "chat/conversation.html", {"conversation": conv, "turns": turns,
                                                      "questions": replay_questions(conv)})


def models_index(request):
    models = list(RegisteredModel.objects.select_related("owner").prefetch_related("contexts"))
    for m in models:
        m.starting = builtin.starting(m)
    profile = accounts.profile_of(request.user)
    return render(request, "chat/models.html", {"models": models, "can_register": bool(profile and profile.is_developer)})


def _fields_from(post) -> registry.ModelFields:
    return registry.ModelFields(
        name=post.get("name", ""), provider=post.get("provider", ""), endpoint_url=post.get("endpoint_url", ""),
        endpoint_model=post.get("endpoint_model", ""), api_key=post.get("api_key", ""),
        description=post.get("description", ""), licence=post.get("licence", ""),
        parameters=post.get("parameters", ""), contexts=tuple(post.getlist("contexts")))


def _submit(request, save, instance=None):
    """A registration or an edit from the form: try the endpoint first, then save, unless the
    developer only asked for the test. Returns (the saved model or None, what the endpoint test
    found or None, field errors, status)."""
    fields, test = _fields_from(request.POST), None
    try:
        test = registry.check_endpoint(request.user, fields, instance=instance)
        if request.POST.get("action") == "test":
            return None, test, {}, 200
        return save(fields), test, {}, 200
    except registry.EndpointTestFailed as exc:
        return None, exc.test, exc.message_dict, 400
    except ValidationError as exc:
        return None, test, exc.message_dict, 400
    except PermissionError as exc:
        return None, test, {"form": [str(exc)]}, 403


def _saved(request, model, test, what: str):
    messages.success(request, f"{model.name} {what}. The endpoint test passed: {'; '.join(test.passed)}."
                     if test.passed else f"{model.name} {what}.")
    return redirect("model", model.pk)


@login_required
def model_new(request):
    profile = accounts.profile_of(request.user)
    if profile is None or not profile.is_developer:
        return render(request, "chat/model_form.html", {"forbidden": True}, status=403)
    test, errors, status = None, {}, 200
    if request.method == "POST":
        model, test, errors, status = _submit(request, lambda fields: registry.register_model(request.user, fields))
        if model is not None:
            return _saved(request, model, test, "is registered; it will be recorded on the chain in a moment")
    return render(request, "chat/model_form.html", {
        "errors": errors, "values": request.POST, "contexts": _contexts(), "test": test,
        "selected": request.POST.getlist("contexts")}, status=status)


@login_required
def model_edit(request, pk):
    model = get_object_or_404(RegisteredModel.objects.prefetch_related("contexts"), pk=pk)
    if model.owner_id != request.user.id:
        raise PermissionDenied("Only the model's owner can edit it.")
    test, errors, status = None, {}, 200
    values = request.POST if request.method == "POST" else {
        "name": model.name, "provider": model.provider, "endpoint_url": model.endpoint_url,
        "endpoint_model": model.endpoint_model, "parameters": model.parameters, "licence": model.licence,
        "description": model.description}
    if request.method == "POST":
        updated, test, errors, status = _submit(
            request, lambda fields: registry.update_model(request.user, model, fields), instance=model)
        if updated is not None:
            return _saved(request, updated, test, "is saved")
    selected = request.POST.getlist("contexts") if request.method == "POST" else [
        c.context_id for c in model.contexts.all()]
    return render(request, "chat/model_form.html", {"errors": errors, "values": values, "contexts": _contexts(),
                                                    "selected": selected, "model": model, "test": test},
                  status=status)


def model_page(request, pk):
    model = get_object_or_404(RegisteredModel.objects.prefetch_related("contexts"), pk=pk)
    onchain = LedgerModel.objects.filter(model_id=model.model_id).first()
    queued = outbox.item_for("addModel", {"modelId": model.model_id})
    model.starting = builtin.starting(model)
    return render(request, "chat/model.html", {"model": model, "onchain": onchain, "queued": queued,
                                               "is_owner": request.user.id == model.owner_id})


@login_required
@require_POST
def model_toggle(request, pk):
    model = get_object_or_404(RegisteredModel, pk=pk)
    try:
        registry.set_enabled(request.user, model, request.POST.get("enabled") == "1")
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from exc
    return redirect("model", model.pk)


@login_required
def account(request):
    """The user's account: whether their prompts go into the public dataset, and their data to take away."""
    profile = accounts.profile_of(request.user)
    if request.method == "POST" and profile is not None:
        share = request.POST.get("share_prompts") == "1"
        if accounts.set_share_prompts(request.user, share):
            messages.success(request, "Your prompts, answers and ratings now go into the public dataset (without your "
                                      "name)." if share else "Your prompts, answers and ratings are no longer shared: "
                                      "the next public export leaves them out.")
        return redirect("account")
    return render(request, "chat/account.html", {"profile": profile})


@login_required
@require_POST
def wallet_challenge(request):
    """The sign-in message (EIP-4361) the user's wallet signs to prove it holds the address."""
    try:
        message = wallet.challenge(request.session, user=request.user, address=request.POST.get("address", ""),
                                   domain=request.get_host(), uri=request.build_absolute_uri("/account/"))
    except ValidationError as exc:
        return JsonResponse({"errors": exc.message_dict}, status=400)
    return JsonResponse({"message": message})


@login_required
@require_POST
def wallet_link(request):
    """Link the address that signed the sign-in message; its registration is queued."""
    try:
        profile = wallet.link(request.session, request.user, request.POST.get("message", ""),
                              request.POST.get("signature", ""))
    except ValidationError as exc:
        return JsonResponse({"errors": exc.message_dict}, status=400)
    messages.success(request, f"Your wallet {profile.wallet_address} is linked: your next answers are recorded "
                              "under it, and your wallet signs their ratings.")
    return JsonResponse({"address": profile.wallet_address})


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


@login_required
def account_export(request):
    """Everything the user gave, as one JSON file to download."""
    body = json.dumps(export.user_data(request.user), indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="llmchain-{request.user.username}.json"'
    return response



# --- the arena ------------------------------------------------------------------------------------

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
        "context", "conversation_a__model", "conversation_b__model").annotate(final=Exists(ArenaBattle.objects.filter(
            battle_id=OuterRef("battle_id"), outcome__isnull=False))).order_by("-created_at")[:20])
    for b in battles:
        b._revealed = b.final
    response = render(request, "chat/arena.html", {"contexts": contexts, "context": context, "errors": errors,
                                                   "battles": battles,
                                                   # the newest: no battle starts while one waits for its vote
                                                   "unvoted": battles[0] if battles and battles[0].status == Battle.Status.ANSWERING else None,
                                                   "abandon_limit": settings.LLMCHAIN_ARENA_ABANDON_LIMIT,
                                                   "abandon_days": f"{settings.LLMCHAIN_ARENA_ABANDON_DAYS:g}"},
                      status=status)
    return limits.retry_after(response, 60) if status == 429 else response


def _own_battle(request, pk) -> Battle:
    battle = get_object_or_404(Battle.objects.select_related(
        "context", "conversation_a__model", "conversation_b__model"), pk=pk)
    if battle.user_id != request.user.id:
        raise PermissionDenied("This is not your battle.")
    return battle


@login_required
def arena_battle(request, pk):
    battle = _own_battle(request, pk)
    panes = []
    for side, conversation in zip(("A", "B"), (battle.conversation_a, battle.conversation_b)):
        conversation._battle = battle  # its sides know their battle: no query each to find it
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
