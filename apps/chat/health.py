"""Connectivity checks (the paper's oracle pings): a model that fails them leaves the running
list, and comes back as soon as it answers again."""

from __future__ import annotations

import asyncio

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from apps.chain.models import Reputation

from .gateway import Gateway, GatewayError
from .models import RegisteredModel
from .providers import endpoint_of


async def _check(gateway: Gateway, model: RegisteredModel) -> str:
    try:
        await gateway.check(endpoint_of(model))
    except GatewayError as exc:
        return exc.detail  # shown to the model's owner only
    return ""


def run_checks(gateway: Gateway | None = None, names: list[str] | None = None) -> dict[str, str]:
    """Check every enabled endpoint model (or those named) at once; returns {name: error or ""}."""
    gateway = gateway or Gateway(retries=0)
    models = RegisteredModel.objects.filter(enabled=True, kind=RegisteredModel.Kind.OPENAI)
    models = list(models if names is None else models.filter(name__in=names))

    async def check_all():
        return await asyncio.gather(*(_check(gateway, m) for m in models))

    errors = asyncio.run(check_all()) if models else []
    threshold = settings.LLMCHAIN_HEALTH_FAILURES
    now = timezone.now()
    for model, error in zip(models, errors):
        failures = model.health_failures + 1 if error else 0
        RegisteredModel.objects.filter(pk=model.pk).update(
            healthy=failures < threshold, health_failures=failures, health_error=error[:2000],
            health_checked_at=now)
    return {m.name: e for m, e in zip(models, errors)}



def models_for(context, qs=None):
    """Models meant for `context`: those listing it, and those listing none (meant for all)."""
    qs = RegisteredModel.objects.all() if qs is None else qs
    return qs.filter(Q(contexts=context) | Q(contexts=None)).distinct()


def running_models(context=None):
    qs = RegisteredModel.objects.filter(enabled=True, healthy=True, suspended_at__isnull=True)
    return models_for(context, qs) if context is not None else qs


def rank_by_r(models, context) -> list[RegisteredModel]:
    """`models` best R in `context` first; models without a reputation there last, by name."""
    models = list(models)
    r = dict(Reputation.objects.filter(context_id=context.context_id, model_id__in=[m.model_id for m in models])
             .values_list("model_id", "r"))
    return sorted(models, key=lambda m: (-r.get(m.model_id, -1), m.name))


def chat_choices(context) -> list[RegisteredModel]:
    """The running models of `context` as the chat offers them: first the models that answer free
    prompts, best R in the context first (unranked ones after, by name), then the replay models, which
    answer only their recorded questions. The first one is the default; a replay model never is."""
    return sorted(rank_by_r(running_models(context), context), key=lambda m: m.kind == RegisteredModel.Kind.REPLAY)
