"""The model registry: the list of models, a model's page, registering and editing one (its endpoint
tried first), and turning it on or off."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.chain import outbox
from apps.chain.models import LedgerModel

from .. import accounts, builtin, registry
from ..models import RegisteredModel
from ._common import _contexts


def models_index(request):
    models = list(RegisteredModel.objects.select_related("owner").prefetch_related("contexts"))
    for m in models:
        m.starting = builtin.starting(m)
    profile = accounts.profile_of(request.user)
    return render(request, "chat/models.html", {"models": models, "can_register": bool(profile and profile.is_developer)})


def model_page(request, pk):
    model = get_object_or_404(RegisteredModel.objects.prefetch_related("contexts"), pk=pk)
    onchain = LedgerModel.objects.filter(model_id=model.model_id).first()
    queued = outbox.item_for("addModel", {"modelId": model.model_id})
    model.starting = builtin.starting(model)
    return render(request, "chat/model.html", {"model": model, "onchain": onchain, "queued": queued,
                                               "is_owner": request.user.id == model.owner_id})


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


@login_required
@require_POST
def model_toggle(request, pk):
    model = get_object_or_404(RegisteredModel, pk=pk)
    try:
        registry.set_enabled(request.user, model, request.POST.get("enabled") == "1")
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from exc
    return redirect("model", model.pk)
