"""Board exports: the same `build_board` as the page, as JSON and as CSV."""

from __future__ import annotations

import csv
import io

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from . import boards


class BoardErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class BoardContextSerializer(serializers.Serializer):
    context_id = serializers.CharField()
    name = serializers.CharField()


class BoardRowSerializer(serializers.Serializer):
    rank = serializers.IntegerField(allow_null=True, help_text="Position by R (ties by name); null when provisional.")
    model_id = serializers.CharField()
    name = serializers.CharField(help_text="The registry's name, or the short on-chain id of an unregistered model.")
    registered = serializers.BooleanField()
    url = serializers.CharField(allow_null=True, help_text="The model's page, when registered.")
    r = serializers.CharField(help_text="R in 1e18 fixed point, as a decimal string.")
    ra = serializers.CharField(help_text="Ra in 1e18 fixed point, as a decimal string.")
    rh = serializers.CharField(help_text="Rh in 1e18 fixed point, as a decimal string.")
    r_decimal = serializers.FloatField(help_text="R / 1e18.")
    ra_decimal = serializers.FloatField(help_text="Ra / 1e18.")
    rh_decimal = serializers.FloatField(help_text="Rh / 1e18.")
    n_auto = serializers.IntegerField()
    n_human = serializers.IntegerField()
    evaluations = serializers.IntegerField(help_text="n_auto + n_human.")
    block_number = serializers.IntegerField(help_text="Block of the last change.")


class BoardSerializer(serializers.Serializer):
    context = BoardContextSerializer()
    generated_at = serializers.DateTimeField()
    sort = serializers.ChoiceField(choices=boards.SORT_KEYS)
    dir = serializers.ChoiceField(choices=boards.DIRECTIONS)
    min_evaluations = serializers.IntegerField(help_text="Evaluations (automatic + human) needed to be ranked.")
    rule = serializers.CharField()
    ranked = BoardRowSerializer(many=True)
    provisional = BoardRowSerializer(many=True, help_text="Models with fewer than min_evaluations evaluations.")


def row_data(row: boards.BoardRow) -> dict:
    return {"rank": row.rank, "model_id": row.model_id, "name": row.name, "registered": row.registered_pk is not None,
            "url": row.url, "r": str(row.r), "ra": str(row.ra), "rh": str(row.rh),
            "r_decimal": boards.wad_float(row.r), "ra_decimal": boards.wad_float(row.ra),
            "rh_decimal": boards.wad_float(row.rh), "n_auto": row.n_auto, "n_human": row.n_human,
            "evaluations": row.evaluations, "block_number": row.block_number}


def board_data(board: boards.Board) -> dict:
    return {"context": {"context_id": board.context_id, "name": board.context_name},
            "generated_at": board.generated_at.isoformat(), "sort": board.sort, "dir": board.direction,
            "min_evaluations": board.min_evaluations, "rule": board.rule,
            "ranked": [row_data(r) for r in board.ranked], "provisional": [row_data(r) for r in board.provisional]}


PARAMETERS = [
    OpenApiParameter("context_id", str, OpenApiParameter.PATH, description="The context id: 0x + 64 hex digits."),
    OpenApiParameter("sort", str, enum=list(boards.SORT_KEYS), description="Column to order by (default r)."),
    OpenApiParameter("dir", str, enum=list(boards.DIRECTIONS),
                     description="asc or desc (default desc; asc for name). Ties are broken by name."),
]
ERRORS = {400: OpenApiResponse(BoardErrorSerializer, description="Malformed context id, sort or dir."),
          404: OpenApiResponse(BoardErrorSerializer, description="No context indexed under this id.")}


class _BoardView(APIView):
    permission_classes = [AllowAny]

    def board_or_error(self, request, context_id):
        try:
            return boards.build_board(context_id, request.query_params.get("sort"), request.query_params.get("dir"),
                                      strict=True), None
        except boards.BoardError as exc:
            return None, Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except boards.UnknownContext as exc:
            return None, Response({"detail": str(exc)}, status=status.HTTP_404_NOT_FOUND)


class BoardDetail(_BoardView):
    @extend_schema(summary="A context's reputation board", operation_id="board_retrieve", parameters=PARAMETERS,
                   responses={200: BoardSerializer, **ERRORS})
    def get(self, request, context_id):
        board, error = self.board_or_error(request, context_id)
        return error or Response(board_data(board))


class BoardCsv(_BoardView):
    @extend_schema(summary="A context's reputation board as CSV", operation_id="board_csv", parameters=PARAMETERS,
                   description="One header row, then one row per model: ranked first, then provisional "
                               "(status column), each list in the requested order.",
                   responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="The board as CSV."),
                              **{(code, "application/json"): r for code, r in ERRORS.items()}})
    def get(self, request, context_id):
        board, error = self.board_or_error(request, context_id)
        if error:
            return error
        buffer = io.StringIO()
        csv.writer(buffer).writerows(boards.csv_rows(board))
        response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="board-{board.context_id[:10]}.csv"'
        return response
