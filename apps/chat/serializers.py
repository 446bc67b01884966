"""The API's shapes: what comes in (type checks only; the rules live in the domain) and what goes out.

Nothing here ever reads or writes an API key back: `api_key` is write-only, and the model's
endpoint (URL, name at the endpoint, encrypted key) is not part of any output.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.chain.models import Context

from .models import COMMENT_MAX, REASON_TAGS, Conversation, Interaction, Rating, RegisteredModel
from .registry import ModelFields
from lib.reputation import GLOBAL_CONTEXT_ID


class ContextSerializer(serializers.ModelSerializer):
    class Meta:
        model = Context
        fields = ["context_id", "name"]


class ModelSerializer(serializers.ModelSerializer):
    """A registered model as anyone may see it (no endpoint, no key)."""

    contexts = ContextSerializer(many=True, read_only=True)
    running = serializers.BooleanField(read_only=True, help_text="Enabled by its owner and healthy.")
    onchain = serializers.BooleanField(read_only=True, help_text="The ledger has indexed its addModel.")

    class Meta:
        model = RegisteredModel
        fields = ["id", "name", "provider", "kind", "description", "licence", "parameters", "contexts",
                  "model_id", "metadata_cid", "running", "enabled", "healthy", "health_checked_at", "onchain"]
        read_only_fields = fields


class ModelFieldsSerializer(serializers.Serializer):
    """A registration, as registry.ModelFields; register_model validates the values."""

    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    provider = serializers.CharField(allow_blank=True, trim_whitespace=False)
    endpoint_url = serializers.CharField(default="", allow_blank=True, trim_whitespace=False,
                                         help_text="The endpoint's base URL, e.g. http://host:8000/v1.")
    endpoint_model = serializers.CharField(default="", allow_blank=True, trim_whitespace=False,
                                           help_text="The model's name at the endpoint (as /v1/models lists it).")
    api_key = serializers.CharField(default="", allow_blank=True, trim_whitespace=False, write_only=True,
                                    style={"input_type": "password"},
                                    help_text="Stored encrypted; never shown again.")
    description = serializers.CharField(default="", allow_blank=True, trim_whitespace=False)
    licence = serializers.CharField(default="", allow_blank=True, trim_whitespace=False)
    parameters = serializers.CharField(default="", allow_blank=True, trim_whitespace=False)
    contexts = serializers.ListField(child=serializers.CharField(), default=list,
                                     help_text="Context ids (0x...); none means every context.")
    kind = serializers.ChoiceField(choices=RegisteredModel.Kind.choices, default=RegisteredModel.Kind.OPENAI)

    def to_fields(self) -> ModelFields:
        data = self.validated_data
        return ModelFields(**{**data, "contexts": tuple(data["contexts"])})


class EnabledSerializer(serializers.Serializer):
    enabled = serializers.BooleanField()


class EvaluationSerializer(serializers.Serializer):
    """The oracle's job of an interaction (`interaction.evaluation`; chat does not import the oracle).
    An answer no other model answered has no automatic score: `has_reference` false, `sa` and `wa`
    null, and `note` says so."""

    status = serializers.CharField(read_only=True, help_text="queued, asking, scored, pinned, submitted, "
                                                             "onchain or failed")
    has_reference = serializers.BooleanField(
        read_only=True, allow_null=True,
        help_text="null until scored; then whether any other model answered (only then is there an automatic score)")
    sa = serializers.SerializerMethodField(
        help_text="S_a in 1e18 fixed point, as on-chain; \"\" until scored, null without a reference")
    wa = serializers.SerializerMethodField(
        help_text="w_a in 1e18 fixed point, as on-chain; \"\" until scored, null without a reference")
    note = serializers.SerializerMethodField(help_text="\"no automatic score: no other model answered\", or null")
    evidence_cid = serializers.CharField(read_only=True)

    def get_sa(self, job) -> str | None:
        return None if job.has_reference is False else job.sa  # "" until scored

    def get_wa(self, job) -> str | None:
        return None if job.has_reference is False else job.wa

    def get_note(self, job) -> str | None:
        return job.NO_SCORE if job.has_reference is False else None


class RatingInSerializer(serializers.Serializer):
    """The questionnaire: each item 1..5 (1 and 5 mean what the page says)."""

    reliability = serializers.IntegerField(help_text="1 = wrong or made up, 5 = fully correct")
    completeness = serializers.IntegerField(help_text="1 = misses most of it, 5 = covers all of it")
    utility = serializers.IntegerField(help_text="1 = useless, 5 = exactly what I needed")
    familiarity = serializers.IntegerField(help_text="your familiarity with the topic: 1 = none, 5 = expert")
    trust = serializers.IntegerField(help_text="your trust in the model: 1 = none, 5 = complete")
    uncertainty = serializers.IntegerField(help_text="your uncertainty about this rating: 1 = very sure, 5 = very unsure")
    tags = serializers.ListField(child=serializers.ChoiceField(choices=REASON_TAGS), required=False,
                                 help_text="optional reasons; kept on the site, not sent to the chain")
    comment = serializers.CharField(required=False, allow_blank=True, max_length=COMMENT_MAX,
                                    help_text="optional comment; kept on the site, not sent to the chain")


class RatingSerializer(serializers.ModelSerializer):
    hum_tx = serializers.CharField(source="hum_item.transaction.tx_hash", default=None, read_only=True)
    update_tx = serializers.CharField(source="update_item.transaction.tx_hash", default=None, read_only=True)

    class Meta:
        model = Rating
        fields = ["reliability", "completeness", "utility", "familiarity", "trust", "uncertainty", "tags", "comment",
                  "status", "error", "hum_tx", "update_tx", "created_at"]
        read_only_fields = fields


class InteractionSerializer(serializers.ModelSerializer):
    """One turn. On an arena side whose battle's vote is not final on-chain yet, the answer and error
    have the model's names masked and the evaluation withholds its evidence CID (it names the model)."""

    answer = serializers.CharField(source="shown_answer", read_only=True)
    error = serializers.CharField(source="shown_error", read_only=True)
    evaluation = serializers.SerializerMethodField(
        help_text="The oracle's automatic evaluation; null until the answer is done.")

    @extend_schema_field(EvaluationSerializer(allow_null=True))
    def get_evaluation(self, interaction) -> dict | None:
        job = getattr(interaction, "evaluation", None)
        if job is None:
            return None
        data = EvaluationSerializer(job).data
        if interaction.conversation.name_hidden:
            data["evidence_cid"] = ""
        return data

    class Meta:
        model = Interaction
        fields = ["id", "conversation", "interaction_id", "prompt", "answer", "status", "error", "finish_reason",
                  "created_at", "finished_at", "evaluation"]
        read_only_fields = fields


class ConversationSerializer(serializers.ModelSerializer):
    """A conversation; an arena side's model is null and named "Model A" or "B" until its battle's
    vote is final on-chain."""

    model = serializers.SerializerMethodField(help_text="The model's id; null on a hidden arena side.")
    model_name = serializers.CharField(source="model_label", read_only=True)
    context = serializers.SlugRelatedField(slug_field="context_id", read_only=True)
    context_name = serializers.CharField(source="context.name", read_only=True)

    class Meta:
        model = Conversation
        fields = ["id", "title", "model", "model_name", "context", "context_name", "created_at", "updated_at"]
        read_only_fields = fields

    def get_model(self, conversation) -> int | None:
        return None if conversation.name_hidden else conversation.model_id


class ConversationDetailSerializer(ConversationSerializer):
    interactions = InteractionSerializer(many=True, read_only=True)

    class Meta(ConversationSerializer.Meta):
        fields = ConversationSerializer.Meta.fields + ["interactions"]
        read_only_fields = fields


class NewConversationSerializer(serializers.Serializer):
    model = serializers.PrimaryKeyRelatedField(queryset=RegisteredModel.objects.all(),
                                               help_text="A registered model's id.")
    context = serializers.SlugRelatedField(slug_field="context_id",
                                           queryset=Context.objects.exclude(context_id=GLOBAL_CONTEXT_ID),
                                           help_text="A context id (0x...), as /api/contexts lists them.")


class RenameSerializer(serializers.Serializer):
    title = serializers.CharField(allow_blank=True, trim_whitespace=False, help_text="The conversation's new name.")


class PromptSerializer(serializers.Serializer):
    prompt = serializers.CharField(allow_blank=True, trim_whitespace=False)


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class FailedAnswerSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="Why the model did not answer.")
    interaction = InteractionSerializer()


class EvidenceSerializer(serializers.Serializer):
    """What apps.chain.views.describe says about a blob."""

    cid = serializers.CharField()
    size = serializers.IntegerField()
    schema = serializers.CharField(allow_null=True, help_text="The record's schema, when the blob is a record.")
    record = serializers.JSONField(allow_null=True, help_text="The parsed record.")
    text = serializers.CharField(allow_null=True, help_text="The blob as text, when it is not a record.")
    problem = serializers.CharField(allow_blank=True, help_text="Why the blob is not a record.")
