"""The model registry: developers register models; metadata goes to IPFS, the id on-chain."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from urllib.parse import urlparse

import httpx
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.chain import outbox
from apps.chain.evidence import default_store
from apps.chain.models import Context, OutboxItem
from lib import outbound, records
from lib.cid import parse as parse_cid
from lib.ids import hex32

from .accounts import profile_of
from .gateway import Endpoint, EndpointTest, Gateway
from .models import RegisteredModel
from .providers import decrypt_api_key, encrypt_api_key
from .roles import role_dependency

NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.: ")
# Trying an endpoint holds the developer's request: a dead host fails within seconds, and a slow
# model gets half a minute for one token.
ENDPOINT_TEST_TIMEOUT = httpx.Timeout(connect=5.0, read=30.0, write=10.0, pool=5.0)


@dataclass
class ModelFields:
    name: str
    provider: str
    endpoint_url: str = ""
    endpoint_model: str = ""
    api_key: str = ""
    description: str = ""
    licence: str = ""
    parameters: str = ""
    contexts: tuple[str, ...] = ()  # context ids (0x...)
    kind: str = RegisteredModel.Kind.OPENAI


def check_endpoint_url(url: str) -> str:
    """An http(s) base URL with a host, no credentials, query or fragment, at an address the outbound
    guard lets this site call (lib/outbound.py); the error says what is wrong."""
    parsed = urlparse(url or "")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValidationError({"endpoint_url": ["Give the endpoint's base URL, e.g. http://host:8000/v1."]})
    if parsed.username or parsed.password:
        raise ValidationError({"endpoint_url": ["Put credentials in the API key field, not in the URL."]})
    try:
        parsed.port
    except ValueError:
        raise ValidationError({"endpoint_url": ["The port is not a number from 1 to 65535."]}) from None
    host = parsed.hostname
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if "." not in host and host != "localhost":
            raise ValidationError({"endpoint_url": [f"{host!r} is not a full host name."]}) from None
    try:
        # No DNS here: a name is checked, and pinned, each time the site connects to it.
        outbound.check_url(url, settings.LLMCHAIN_OUTBOUND_ALLOW, endpoint=True, lookup=False)
    except outbound.OutboundRefused as exc:
        raise ValidationError({"endpoint_url": [f"Refused: {exc}."]}) from None
    return url.rstrip("/")


def check_fields(user, fields: ModelFields, *, instance: RegisteredModel | None = None) -> list[Context]:
    """Authorise and validate; raises PermissionError or ValidationError, changes nothing."""
    profile = profile_of(user)
    if profile is None or not profile.is_developer:
        raise PermissionError("Only accounts with the developer role can register models.")
    if instance is not None and instance.owner_id != user.id:
        raise PermissionError("Only the model's owner can change it.")
    errors: dict[str, list[str]] = {}
    name = (fields.name or "").strip()
    if not name:
        errors["name"] = ["Give the model a name."]
    elif len(name) > 100 or not set(name) <= NAME_CHARS:
        errors["name"] = ["Use at most 100 letters, digits, spaces and - _ . : only."]
    elif RegisteredModel.objects.filter(name__iexact=name).exclude(pk=getattr(instance, "pk", None)).exists():
        errors["name"] = [f"A model named {name!r} is already registered."]
    if not (fields.provider or "").strip():
        errors["provider"] = ["Say who provides the model."]
    if fields.kind == RegisteredModel.Kind.OPENAI:
        try:
            check_endpoint_url(fields.endpoint_url)
        except ValidationError as exc:
            errors.update(exc.message_dict)
        if not (fields.endpoint_model or "").strip():
            errors["endpoint_model"] = ["Give the model's name at the endpoint (as /v1/models lists it)."]
    for key, limit in (("description", 5000), ("licence", 200), ("parameters", 100), ("endpoint_model", 200),
                       ("provider", 200), ("api_key", 500)):
        if len(getattr(fields, key) or "") > limit:
            errors[key] = [f"At most {limit} characters."]
    contexts = list(Context.objects.filter(context_id__in=list(fields.contexts)))
    if len(contexts) != len(set(fields.contexts)):
        errors["contexts"] = ["Pick contexts from the list."]
    if errors:
        raise ValidationError(errors)
    return contexts


class EndpointTestFailed(ValidationError):
    """The endpoint a registration names failed its test; `test` holds what passed and why it stopped."""

    def __init__(self, test: EndpointTest):
        super().__init__({"endpoint": [f"Nothing was saved: {test.failure}."]})
        self.test = test


def check_endpoint(user, fields: ModelFields, *, instance: RegisteredModel | None = None) -> EndpointTest:
    """Authorise and validate as check_fields does, then try the endpoint the fields name through
    the gateway (its model list, the model's name there, the API key, a one-token completion).

    Changes nothing. Raises EndpointTestFailed (a ValidationError under "endpoint") when a step
    fails; returns what passed. On an edit, an empty API key means the stored one. A model with no
    endpoint (a replay) has nothing to try.
    """
    kind = instance.kind if instance is not None else fields.kind
    check_fields(user, replace(fields, kind=kind), instance=instance)
    if kind != RegisteredModel.Kind.OPENAI:
        return EndpointTest(())
    api_key = fields.api_key or (decrypt_api_key(instance.api_key_encrypted) if instance is not None else "")
    endpoint = Endpoint(check_endpoint_url(fields.endpoint_url), fields.endpoint_model.strip(), api_key)
    test = async_to_sync(Gateway(timeout=ENDPOINT_TEST_TIMEOUT, retries=0).test_endpoint)(endpoint)
    if not test.ok:
        raise EndpointTestFailed(test)
    return test


def _metadata(owner_address: str, fields: ModelFields, contexts: list[Context]) -> dict:
    return records.model_metadata(
        name=fields.name.strip(), provider=fields.provider.strip(), owner=owner_address,
        endpoint_kind=fields.kind, parameters=fields.parameters.strip(), licence=fields.licence.strip(),
        description=fields.description.strip(), model_name=fields.endpoint_model.strip(),
        contexts=[c.name for c in contexts])


def register_model(user, fields: ModelFields) -> RegisteredModel:
    """Store the metadata on IPFS and queue addModel from the developer's own address."""
    contexts = check_fields(user, fields)
    profile = profile_of(user)
    cid = default_store().put(records.canonical(_metadata(profile.address, fields, contexts)))
    model_id = hex32(parse_cid(cid).raw_digest)
    with transaction.atomic():
        if RegisteredModel.objects.filter(model_id=model_id).exists():
            raise ValidationError({"name": ["This exact model is already registered."]})
        model = RegisteredModel.objects.create(
            owner=user, name=fields.name.strip(), provider=fields.provider.strip(),
            description=fields.description.strip(), licence=fields.licence.strip(),
            parameters=fields.parameters.strip(), kind=fields.kind, endpoint_url=fields.endpoint_url.rstrip("/"),
            endpoint_model=fields.endpoint_model.strip(), api_key_encrypted=encrypt_api_key(fields.api_key),
            model_id=model_id, metadata_cid=cid)
        model.contexts.set(contexts)
        outbox.enqueue("addModel", profile.address, {"modelId": model_id, "metadataCid": cid},
                       depends_on=role_dependency(profile.address, "developer"))
    return model



def update_model(user, model: RegisteredModel, fields: ModelFields) -> RegisteredModel:
    """Publish edited metadata: a new CID on IPFS, announced on-chain under the same model id.

    An empty API key keeps the stored one. Updates are chained in the outbox so they land in order.
    """
    fields.kind = model.kind
    contexts = check_fields(user, fields, instance=model)
    profile = profile_of(user)
    cid = default_store().put(records.canonical(_metadata(profile.address, fields, contexts)))
    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
        if cid == model.metadata_cid:  # nothing public changed: nothing to publish
            if fields.api_key:
                model.api_key_encrypted = encrypt_api_key(fields.api_key)
                model.save(update_fields=["api_key_encrypted"])
            return model
        previous = outbox.items_for("updateModelMetadata", {"modelId": model.model_id}).last() or \
            outbox.item_for("addModel", {"modelId": model.model_id})
        revision = model.metadata_revision + 1
        outbox.enqueue("updateModelMetadata", profile.address, {"modelId": model.model_id, "metadataCid": cid},
                       revision=revision,
                       depends_on=previous if previous and previous.status != OutboxItem.Status.CONFIRMED
                       else role_dependency(profile.address, "developer"))
        model.name, model.provider = fields.name.strip(), fields.provider.strip()
        model.description, model.licence = fields.description.strip(), fields.licence.strip()
        model.parameters, model.endpoint_model = fields.parameters.strip(), fields.endpoint_model.strip()
        model.endpoint_url = fields.endpoint_url.rstrip("/")
        if fields.api_key:
            model.api_key_encrypted = encrypt_api_key(fields.api_key)
        model.metadata_cid, model.metadata_revision, model.updated_at = cid, revision, timezone.now()
        model.save()
        model.contexts.set(contexts)
    return model


def set_enabled(user, model: RegisteredModel, enabled: bool) -> None:
    if model.owner_id != user.id:
        raise PermissionError("Only the model's owner can take it offline or bring it back.")
    if enabled and RegisteredModel.objects.filter(pk=model.pk).exclude(suspended_at=None).exists():
        raise PermissionError("The site's operator has suspended this model; only they can bring it back. "
                              "It stays offline.")
    RegisteredModel.objects.filter(pk=model.pk).update(enabled=enabled, updated_at=timezone.now())
