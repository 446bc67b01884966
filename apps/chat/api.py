"""The JSON API: thin views over the same domain functions as the pages and the chat socket.

Each view validates the input's types, calls one domain function, and renders; the domain's
PermissionError becomes 403 and its ValidationError 400 with its field errors.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef, Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.extensions import OpenApiViewExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.views import APIView

from apps.chain.models import Context, LedgerModel

from . import accounts, conversations, ratings, registry
from .gateway import Gateway
from .limits import current_token, retry_after, token_expiry
from .pagination import paginate
from .health import models_for, running_models
from .models import Conversation, Interaction, Rating, RegisteredModel
from .serializers import (ContextSerializer, RenameSerializer, ConversationDetailSerializer, ConversationSerializer,
                          EnabledSerializer, ErrorSerializer, EvidenceSerializer, FailedAnswerSerializer,
                          InteractionSerializer, ModelFieldsSerializer, ModelSerializer, NewConversationSerializer,
                          PromptSerializer, RatingInSerializer, RatingSerializer)
from lib.reputation import GLOBAL_CONTEXT_ID

FIELD_ERRORS = OpenApiResponse(
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
    description="Field errors: {field: [messages]}.")
FORBIDDEN = OpenApiResponse(ErrorSerializer, description="Not allowed; `detail` says why.")
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such object among yours.")
ERROR = OpenApiResponse(ErrorSerializer, description="`detail` says what went wrong.")


def _field_errors(exc: ValidationError) -> Response:
    return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)


def _models():
    """Registered models, each with whether the ledger has indexed it."""
    return (RegisteredModel.objects.prefetch_related("contexts")
            .annotate(onchain=Exists(LedgerModel.objects.filter(model_id=OuterRef("model_id")))))


def _interactions():
    return Interaction.objects.select_related("evaluation")


# --- Contexts and models -----------------------------------------------------------------------

class ContextList(generics.ListAPIView):
    """The contexts models are evaluated in."""

    permission_classes = [AllowAny]
    serializer_class = ContextSerializer
    queryset = Context.objects.exclude(context_id=GLOBAL_CONTEXT_ID).order_by("name")


class WritesLimited:
    """Only a view's writes count against its `throttle_scope` (settings.LLMCHAIN_RATES): reading a
    list is free, starting what costs the site is not."""

    def get_throttles(self):
        return [] if self.request.method in SAFE_METHODS else super().get_throttles()


class ModelList(WritesLimited, APIView):
    throttle_scope = "models"

    @extend_schema(
        summary="List registered models",
        parameters=[
            OpenApiParameter("context", str, description="Only models serving this context id (0x...); a model "
                             "that lists no contexts serves them all."),
            OpenApiParameter("running", bool, description="1: only models that are enabled and healthy."),
        ],
        responses={200: ModelSerializer(many=True), 400: FIELD_ERRORS})
    def get(self, request):
        context = None
        if request.query_params.get("context"):
            context = Context.objects.filter(context_id=request.query_params["context"]).first()
            if context is None:
                return Response({"context": ["No context has this id."]}, status=status.HTTP_400_BAD_REQUEST)
        if request.query_params.get("running", "").lower() in ("1", "true", "yes"):
            ids = running_models(context).values("pk")
        elif context is not None:
            ids = models_for(context).values("pk")
        else:
            ids = None
        models = _models() if ids is None else _models().filter(pk__in=ids)
        return paginate(self, request, models, ModelSerializer)

    @extend_schema(
        summary="Register a model (developers only)",
        description="Tests the endpoint first (its model list, the model's name there, the API key, a one-token "
                    "completion): when a step fails, 400 with `endpoint` saying why in the endpoint's own words, "
                    "and nothing is saved. Then stores the metadata on IPFS and queues addModel from the "
                    "developer's address.",
        request=ModelFieldsSerializer,
        responses={201: ModelSerializer, 400: FIELD_ERRORS, 403: FORBIDDEN})
    def post(self, request):
        fields = ModelFieldsSerializer(data=request.data)
        fields.is_valid(raise_exception=True)
        try:
            registry.check_endpoint(request.user, fields.to_fields())
            model = registry.register_model(request.user, fields.to_fields())
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
        except ValidationError as exc:
            return _field_errors(exc)
        return Response(ModelSerializer(_models().get(pk=model.pk)).data, status=status.HTTP_201_CREATED)


class ModelDetail(APIView):
    @extend_schema(summary="One registered model", responses={200: ModelSerializer, 404: NOT_FOUND})
    def get(self, request, pk: int):
        return Response(ModelSerializer(get_object_or_404(_models(), pk=pk)).data)

    @extend_schema(summary="Take a model offline or bring it back (its owner only)", request=EnabledSerializer,
                   responses={200: ModelSerializer, 400: FIELD_ERRORS, 403: FORBIDDEN, 404: NOT_FOUND})
    def patch(self, request, pk: int):
        model = get_object_or_404(RegisteredModel, pk=pk)
        change = EnabledSerializer(data=request.data)
        change.is_valid(raise_exception=True)
        try:
            registry.set_enabled(request.user, model, change.validated_data["enabled"])
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
        return Response(ModelSerializer(_models().get(pk=pk)).data)


# --- Conversations --------------------------------------------------------------------------

class ConversationList(WritesLimited, APIView):
    permission_classes = [IsAuthenticated]
    throttle_scope = "conversations"

    @extend_schema(summary="Your conversations, latest first", responses={200: ConversationSerializer(many=True)},
                   parameters=[OpenApiParameter("q", str, description="only those whose name, model, context or "
                                                                      "any message holds this text")])
    def get(self, request):
        mine = conversations.search_conversations(request.user, request.query_params.get("q", ""))
        return paginate(self, request, mine, ConversationSerializer)

    @extend_schema(summary="Start a conversation with a running model in a context",
                   request=NewConversationSerializer,
                   responses={201: ConversationDetailSerializer, 400: FIELD_ERRORS})
    def post(self, request):
        choice = NewConversationSerializer(data=request.data)
        choice.is_valid(raise_exception=True)
        try:
            conversation = conversations.start_conversation(
                request.user, choice.validated_data["model"], choice.validated_data["context"])
        except ValidationError as exc:
            return _field_errors(exc)
        return Response(ConversationDetailSerializer(conversation).data, status=status.HTTP_201_CREATED)


def _own_conversation(request, pk: int) -> Conversation:
    """Someone else's conversation is as good as missing: 404, not 403."""
    return get_object_or_404(Conversation.objects.select_related("model", "context").prefetch_related(
        Prefetch("interactions", queryset=_interactions())), pk=pk, user=request.user)


class ConversationDetail(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(summary="One of your conversations, with its interactions",
                   responses={200: ConversationDetailSerializer, 404: NOT_FOUND})
    def get(self, request, pk: int):
        return Response(ConversationDetailSerializer(_own_conversation(request, pk)).data)

    @extend_schema(summary="Rename one of your conversations", request=RenameSerializer,
                   responses={200: ConversationSerializer, 400: FIELD_ERRORS, 404: NOT_FOUND})
    def patch(self, request, pk: int):
        conversation = _own_conversation(request, pk)
        change = RenameSerializer(data=request.data)
        change.is_valid(raise_exception=True)
        try:
            conversations.rename_conversation(request.user, conversation, change.validated_data["title"])
        except ValidationError as exc:
            return _field_errors(exc)
        return Response(ConversationSerializer(conversation).data)

    @extend_schema(summary="Delete one of your conversations", description=conversations.DELETION_NOTE + (
        " Refused (400) while an answer's evaluation or rating is still on its way to the chain."),
        responses={204: None, 400: FIELD_ERRORS, 404: NOT_FOUND})
    def delete(self, request, pk: int):
        try:
            conversations.delete_conversation(request.user, _own_conversation(request, pk))
        except ValidationError as exc:
            return _field_errors(exc)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConversationMessages(APIView):
    """Ask the conversation's model and wait for the whole answer (the chat socket streams it)."""

    permission_classes = [IsAuthenticated]
    throttle_scope = "prompts"

    @extend_schema(summary="Send a message and get the model's whole answer",
                   request=PromptSerializer,
                   responses={201: InteractionSerializer, 400: FIELD_ERRORS, 404: NOT_FOUND,
                              502: OpenApiResponse(FailedAnswerSerializer,
                                                   description="The model's endpoint failed; the interaction "
                                                               "is saved as failed and is not evaluated.")})
    def post(self, request, pk: int):
        conversation = _own_conversation(request, pk)
        message = PromptSerializer(data=request.data)
        message.is_valid(raise_exception=True)
        try:
            prompt = conversations.check_prompt(request.user, conversation, message.validated_data["prompt"])
            async_to_sync(conversations.check_fits)(conversation, prompt, gateway=self.gateway())
            interaction = conversations.begin_interaction(request.user, conversation, message.validated_data["prompt"])
        except ValidationError as exc:
            return _field_errors(exc)
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
        error = async_to_sync(conversations.answer)(interaction, conversation.model, gateway=self.gateway())
        done = _interactions().get(pk=interaction.pk)
        if error is not None:
            detail = done.blind(str(error))  # a hidden arena side's model is not named
            return Response({"detail": detail, "interaction": InteractionSerializer(done).data},
                            status=status.HTTP_502_BAD_GATEWAY)
        return Response(InteractionSerializer(done).data, status=status.HTTP_201_CREATED)

    def gateway(self) -> Gateway:
        """The client for endpoint models (tests put a fake endpoint behind it)."""
        return Gateway()


class InteractionDetail(generics.RetrieveAPIView):
    """One of your interactions: the prompt, the answer, and its evaluation so far."""

    permission_classes = [IsAuthenticated]
    serializer_class = InteractionSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return Interaction.objects.none()
        return _interactions().filter(conversation__user=self.request.user)


class InteractionRating(WritesLimited, APIView):
    """The questionnaire of one of your interactions: GET its rating and progress, POST it once."""

    permission_classes = [IsAuthenticated]
    throttle_scope = "ratings"

    def _interaction(self, request, pk: int) -> Interaction:
        return get_object_or_404(_interactions().select_related("conversation__user__profile"),
                                 pk=pk, conversation__user=request.user)

    @extend_schema(responses={200: RatingSerializer, 404: NOT_FOUND})
    def get(self, request, pk: int):
        interaction = self._interaction(request, pk)
        rating = get_object_or_404(Rating.objects.select_related("hum_item__transaction", "update_item__transaction"),
                                   interaction=interaction)
        return Response(RatingSerializer(ratings.refresh(rating)).data)

    @extend_schema(request=RatingInSerializer, responses={201: RatingSerializer, 400: FIELD_ERRORS, 404: NOT_FOUND})
    def post(self, request, pk: int):
        interaction = self._interaction(request, pk)
        try:
            rating = ratings.submit_rating(request.user, interaction, request.data)
        except ValidationError as exc:
            return _field_errors(exc)
        return Response(RatingSerializer(rating).data, status=status.HTTP_201_CREATED)


# --- The ledger's evidence API (apps/chain/views.evidence_api), described for the schema -------

class EvidenceApiSchema(OpenApiViewExtension):
    target_class = "apps.chain.views.evidence_api"

    def view_replacement(self):
        return extend_schema(
            summary="A blob by CID, verified against its CID",
            responses={200: EvidenceSerializer, 400: ERROR, 404: ERROR, 502: ERROR, 503: ERROR})(self.target)


# --- Tokens ----------------------------------------------------------------------------------

class TokenView(ObtainAuthToken):
    """POST /api/token: a token for a user name and password (limited per address, and locked out
    after repeated failures); an expired one is replaced."""

    throttle_scope = "tokens"
    throttle_classes = [ScopedRateThrottle]  # ObtainAuthToken has none of its own

    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        if not serializer.is_valid():
            # django-axes marks the request it was given (this one) when the name is locked out here.
            if getattr(request, "axes_locked_out", False):
                minutes = round(settings.AXES_COOLOFF_TIME * 60)
                return retry_after(Response({"detail": "Too many failed logins for this user name from your address: "
                                                       f"try again in {minutes} minutes. Nothing was changed."},
                                            status=status.HTTP_429_TOO_MANY_REQUESTS), minutes * 60)
            given = request.data if hasattr(request.data, "get") else {}
            if accounts.is_suspended_login(given.get("username"), given.get("password")):
                return Response({"detail": accounts.SUSPENDED_LOGIN}, status=status.HTTP_403_FORBIDDEN)
            return Response(serializer.errors, status=status.HTTP_400_BAD_REQUEST)
        token = current_token(serializer.validated_data["user"])
        return Response({"token": token.key, "expires": token_expiry(token).isoformat()})
