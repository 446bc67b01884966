"""The expert queue's page: one disagreement at a time, answered with a verdict or skipped.

The page reads only: it shows the item the expert would be handed (`queue.peek_item`) and, as soon
as it is shown, asks with an htmx POST for the item to be held for them (`hold`); a verdict sent
without that hold takes the item as it is recorded."""

from __future__ import annotations

import math
from itertools import groupby
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from .. import queue

VERDICT_WORDS = {"1": "Submission 1 is better", "2": "Submission 2 is better", "0": "Neither is better"}
SKIPPED = "annotate_skipped"  # session key: the items this expert skipped in this session


def _filters(data) -> dict[str, str]:
    return {name: data.get(name, "") for name in ("scenario", "criterion") if data.get(name, "")}


def _skipped(request) -> list[int]:
    return request.session.get(SKIPPED, [])


def _forbidden(request):
    return render(request, "annotate/forbidden.html", status=403)


def _page(request, filters: dict[str, str], error: str = "", status: int = 200):
    scenario, criterion = filters.get("scenario"), filters.get("criterion")
    item = queue.peek_item(request.user, scenario, criterion, skipped=_skipped(request))
    rounds = []
    if item is not None:
        turns = item.debate.turns.all()
        rounds = [(n, list(group)) for n, group in groupby(turns, key=lambda t: t.round)]
    scenarios, criteria = queue.filter_choices()
    return render(request, "annotate/queue.html", {
        "item": item, "debate": item.debate if item else None, "rounds": rounds,
        **_hold_context(item, request.user),
        "filters": filters, "scenarios": scenarios, "criteria": criteria,
        "progress": queue.progress(request.user, scenario, criterion),
        "skipped": len(_skipped(request)), "agreement": queue.agreement_by_scenario(),
        "note_max": queue.NOTE_MAX_CHARS,
        "error": error, "note": request.POST.get("note", "") if error else "",
    }, status=status)


def _hold_context(item, expert) -> dict:
    """What the line on the item's hold says: held (for how many more minutes), or not yet."""
    held = item is not None and queue.held_for(item, expert)
    minutes = math.ceil((item.claim_expires_at - timezone.now()).total_seconds() / 60) if held else None
    return {"held": held, "hold_minutes": minutes}


def _url(filters: dict[str, str]) -> str:
    url = reverse("annotate")
    return f"{url}?{urlencode(filters)}" if filters else url


def _back(filters: dict[str, str]):
    return redirect(_url(filters))


@login_required
def queue_page(request):
    if not queue.is_expert(request.user):
        return _forbidden(request)
    return _page(request, _filters(request.GET))


@login_required
@require_POST
def hold(request, pk: int):
    """Hold the item shown for the expert (the page asks as soon as it shows it): for htmx, the line
    that says so, or why not; otherwise back to the page."""
    filters = _filters(request.POST)
    try:
        if pk in _skipped(request):  # a hold asked for late, after the expert skipped the item
            raise queue.NotYourClaim("You skipped this item.")
        item = queue.hold(request.user, pk)
    except queue.NotAnExpert:
        return _forbidden(request)
    except queue.QueueError as exc:
        if not request.htmx:
            messages.error(request, str(exc))
            return _back(filters)
        # htmx swaps only 2xx answers: the refusal comes as 200 to it.
        return render(request, "annotate/_hold.html", {"hold_error": str(exc), "next_url": _url(filters)})
    if not request.htmx:
        return _back(filters)
    return render(request, "annotate/_hold.html", {"item": item, **_hold_context(item, request.user)})


@login_required
@require_POST
def answer(request, pk: int):
    filters = _filters(request.POST)
    try:
        queue.submit(request.user, pk, request.POST.get("verdict"), request.POST.get("note", ""))
    except queue.NotAnExpert:
        return _forbidden(request)
    except (queue.InvalidVerdict, queue.NoteTooLong) as exc:
        return _page(request, filters, str(exc), status=400)
    except queue.QueueError as exc:  # the claim is gone or the verdict was already given
        return _page(request, filters, str(exc), status=409)
    said = VERDICT_WORDS.get(request.POST.get("verdict"), "your verdict")
    messages.success(request, f"Saved: “{said}” on item {pk}{' with your note' if request.POST.get('note') else ''}. "
                              "Here is the next one.")
    return _back(filters)


@login_required
@require_POST
def skip(request, pk: int):
    filters = _filters(request.POST)
    try:
        queue.skip(request.user, pk)
    except queue.NotAnExpert:
        return _forbidden(request)
    except queue.QueueError as exc:
        return _page(request, filters, str(exc), status=409)
    request.session[SKIPPED] = list(dict.fromkeys([*_skipped(request), pk]))
    return _back(filters)


@login_required
@require_POST
def clear_skips(request):
    if not queue.is_expert(request.user):
        return _forbidden(request)
    request.session.pop(SKIPPED, None)
    return _back(_filters(request.POST))
