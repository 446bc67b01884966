"""/api/metaeval/<id>: one saved meta-evaluation run as JSON (in the OpenAPI schema)."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from .models import MetaEvalRun


class MetaEvalRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField(help_text='"pairs": verdicts on pairs of answers against human preferences; '
                                           '"scores": scores correlated with human scores.')
    evaluator = serializers.CharField(help_text="The evaluator spec the command was given.")
    evaluator_params = serializers.DictField(help_text="The evaluator's parameters, as it reported them.")
    source = serializers.CharField(help_text="The file's path as given to the command.")
    source_sha256 = serializers.CharField(help_text="SHA-256 of the file's bytes when the run read it.")
    label = serializers.CharField(help_text="What the data is, in words (may be empty).")
    context_id = serializers.CharField(help_text="The board context the run speaks for (empty for none).")
    command = serializers.CharField(help_text="The command line that reproduces the figures.")
    seconds = serializers.FloatField()
    created_at = serializers.DateTimeField()
    result = serializers.DictField(help_text="The JSON the command printed as its last line: every figure.")


class MetaEvalRunDetail(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(summary="A saved meta-evaluation run", operation_id="metaeval_run_retrieve",
                   responses={200: MetaEvalRunSerializer, 404: OpenApiResponse(description="No such run.")})
    def get(self, request, pk: int):
        run = MetaEvalRun.objects.filter(pk=pk).first()
        if run is None:
            raise Http404(f"No meta-evaluation run {pk}.")
        return Response(MetaEvalRunSerializer(run).data)
