"""Board exports: the same `build_board` as the page, as JSON and as CSV."""

from __future__ import annotations

import csv
import io
import json

from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.chain.ledger import deployment_lambda

from . import boards, weighting


class BoardErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class BoardContextSerializer(serializers.Serializer):
    context_id = serializers.CharField()
    name = serializers.CharField()


class PeerRecordSerializer(serializers.Serializer):
    wins = serializers.IntegerField()
    ties = serializers.IntegerField()
    losses = serializers.IntegerField()


class BoardRowSerializer(serializers.Serializer):
    rank = serializers.IntegerField(allow_null=True, help_text="1 + the ranked models whose whole R band lies above "
                                    "this one's; null when not ranked (too little evidence).")
    tied = serializers.BooleanField(help_text="Another ranked model has the same rank (shown as =rank).")
    model_id = serializers.CharField()
    name = serializers.CharField(help_text="The name in the model's latest metadata record on IPFS, or its short "
                                           "on-chain id when that record cannot be read.")
    url = serializers.CharField(help_text="The model's reputation page.")
    r = serializers.CharField(help_text="R in 1e18 fixed point, as a decimal string.")
    ra = serializers.CharField(help_text="Ra in 1e18 fixed point, as a decimal string.")
    rh = serializers.CharField(help_text="Rh in 1e18 fixed point, as a decimal string.")
    r_decimal = serializers.FloatField(help_text="R / 1e18.")
    ra_decimal = serializers.FloatField(help_text="Ra / 1e18.")
    rh_decimal = serializers.FloatField(help_text="Rh / 1e18.")
    n_auto = serializers.IntegerField()
    n_human = serializers.IntegerField()
    evaluations = serializers.IntegerField(help_text="n_auto + n_human.")
    r_band = serializers.ListField(child=serializers.FloatField(), allow_null=True, min_length=2, max_length=2,
                                   help_text="[low, high]: the 95% bootstrap band of R (see `band`); null with "
                                             "fewer than 2 rated answers.")
    r_band_n = serializers.IntegerField(help_text="Rated answers the band rests on.")
    spark = serializers.ListField(child=serializers.FloatField(), help_text="R over the pair's history, thinned.")
    block_number = serializers.IntegerField(help_text="Block of the last change.")
    changed_at = serializers.DateTimeField(allow_null=True, help_text="Timestamp of that block.")
    debate_elo = serializers.FloatField(allow_null=True, help_text="Bradley–Terry rating on the Elo scale from the "
                                        "debates settled on this site in this context (see `debate`); null without "
                                        "one. Not on-chain.")
    debate_games = serializers.IntegerField(help_text="Settled debates debate_elo rests on.")
    peer_elo = serializers.FloatField(allow_null=True, help_text="Elo in the context's latest peer self-evaluation "
                                      "(each pair of models' answers to the same prompt judged by a third "
                                      "model's answer; see `peer`); null when the model was not in it, and always "
                                      "on the global board. Not on-chain.")
    peer_record = PeerRecordSerializer(allow_null=True, help_text="The comparisons peer_elo rests on; null with it.")
    arena_elo = serializers.FloatField(allow_null=True, help_text="Bradley–Terry strength on the Elo scale from the "
                                       "arena's counted votes on this board (see `arena`); null without battles. "
                                       "Rebuilt from the chain's BattleOpened and Voted events by /verify.")
    arena_ci_low = serializers.FloatField(allow_null=True, help_text="Low end of arena_elo's 95% bootstrap interval.")
    arena_ci_high = serializers.FloatField(allow_null=True, help_text="High end of arena_elo's 95% bootstrap "
                                                                      "interval.")
    arena_rank = serializers.IntegerField(allow_null=True, help_text="1 + the number of models whose interval lies "
                                          "wholly above this one's; null without battles.")
    battles = serializers.IntegerField(help_text="Counted votes this model's answers were in.")
    arena_wins = serializers.IntegerField()
    arena_ties = serializers.IntegerField(help_text="Ties and both-bad votes.")
    arena_losses = serializers.IntegerField()
    arena_win_rate = serializers.FloatField(allow_null=True, help_text="(wins + ties / 2) / battles.")
    style_elo = serializers.FloatField(allow_null=True, help_text="Elo with style control: answer length and Markdown "
                                       "density fitted as covariates; null without battles or without a style fit.")
    style_ci_low = serializers.FloatField(allow_null=True)
    style_ci_high = serializers.FloatField(allow_null=True)
    style_rank = serializers.IntegerField(allow_null=True)
    weighted = serializers.FloatField(allow_null=True, help_text="The weighted score in [0, 1]: people's ratings "
                                      "(Rh) and votes (arena Elo as the chance to beat a model of average "
                                      "strength here) count fully, Ra by its weight in `validity` (see "
                                      "`weighted_text`); null without a rating band or a counted vote.")
    weighted_low = serializers.FloatField(allow_null=True, help_text="Low end of the weighted score's band: the "
                                          "same weighted mean of the signals' interval ends.")
    weighted_high = serializers.FloatField(allow_null=True, help_text="High end of the weighted score's band.")
    weighted_rank = serializers.IntegerField(allow_null=True, help_text="1 + the models whose whole weighted band "
                                             "lies above this one's; null without a weighted score.")
    weighted_tied = serializers.BooleanField(help_text="Another model has the same weighted rank.")


class ColumnValiditySerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="automatic, people or mixed.")
    status = serializers.ChoiceField(choices=[weighting.MEASURED, weighting.NOT_ENOUGH, weighting.REFERENCE,
                                              weighting.NOT_WEIGHED, weighting.NOT_MEASURED],
                                     help_text="measured: checked against people's votes here; "
                                               "not_enough_human_signal: fewer than `min_human` votes to check it "
                                               "against (its figures null); reference: a signal from people; "
                                               "not_weighed, not_measured: counts 0 (see `reason`).")
    weight = serializers.FloatField(help_text="Its weight in the weighted score (people's signals 1).")
    reason = serializers.CharField(required=False, help_text="Why it counts 0.")
    human_signal = serializers.CharField(required=False, help_text="What it was checked against.")
    votes = serializers.IntegerField(required=False, help_text="Counted votes that preferred one answer.")
    votes_without_scores = serializers.IntegerField(required=False, help_text="Of them, votes with an answer "
                                                    "lacking an automatic score or a known text.")
    pairs_non_tie = serializers.IntegerField(required=False, help_text="n: the votes checked.")
    enough = serializers.BooleanField(required=False, help_text="n >= min_human.")
    accuracy_non_tie = serializers.FloatField(required=False, allow_null=True, help_text="Share of the n votes "
                                              "where the voted answer had the higher automatic score.")
    accuracy_ci_low = serializers.FloatField(required=False, allow_null=True, help_text="Its 95% interval (paired "
                                             "bootstrap, lib/weighted.py), low end.")
    accuracy_ci_high = serializers.FloatField(required=False, allow_null=True)
    length_accuracy_non_tie = serializers.FloatField(required=False, allow_null=True, help_text="The same share for "
                                                     "\"the longer answer wins\" on the same votes.")
    margin_over_length = serializers.FloatField(required=False, allow_null=True)
    margin_over_length_ci_low = serializers.FloatField(required=False, allow_null=True)
    margin_over_length_ci_high = serializers.FloatField(required=False, allow_null=True)
    weight_wad = serializers.CharField(required=False, help_text="The weight in 1e18 fixed point "
                                       "(lib.metaeval.validity_factor_wad of the margin's low end).")


class RatingValiditySerializer(serializers.Serializer):
    n = serializers.IntegerField(help_text="Answers here with both a rating from people and an automatic score "
                                 "against references (and a known text).")
    unread = serializers.IntegerField(required=False, help_text="More such answers, left out of these figures "
                                      "until their evidence record, which gives their length, can be read.")
    enough = serializers.BooleanField(help_text="n >= min_human: enough ratings to speak from.")
    spearman = serializers.FloatField(allow_null=True, help_text="Spearman's rank correlation of the automatic "
                                      "score with people's ratings over those answers; null with fewer than 3 or "
                                      "when one side gives every answer the same value.")
    spearman_ci_low = serializers.FloatField(allow_null=True, help_text="Its 95% bootstrap interval (500 "
                                             "resamples of the answers in interaction id order, seed 0; "
                                             "lib/weighted.py rating_validity), low end.")
    spearman_ci_high = serializers.FloatField(allow_null=True)
    length_spearman = serializers.FloatField(allow_null=True, help_text="The same correlation for the answer's "
                                             "length in characters.")


class ValiditySerializer(serializers.Serializer):
    min_human = serializers.IntegerField(help_text="Votes (or ratings) needed before a column is checked against "
                                         "them.")
    text = serializers.CharField(help_text="The automatic score against people's votes here, in one plain line.")
    ratings = RatingValiditySerializer(help_text="The automatic score against people's ratings here. Rebuilt from "
                                       "the chain by /verify.")
    ratings_text = serializers.CharField(help_text="The same, in one plain line.")
    weighted_text = serializers.CharField(help_text="What the weighted score weighs, in one plain line.")
    columns = serializers.DictField(child=ColumnValiditySerializer(), help_text="Per column (r, ra, rh, arena_elo, "
                                    "style_elo, debate_elo, peer_elo). Rebuilt from the chain by /verify.")


class ArenaCoefficientSerializer(serializers.Serializer):
    feature = serializers.CharField(help_text="length or markdown.")
    value = serializers.FloatField(allow_null=True, help_text="Log-odds of winning per root mean square of the "
                                   "feature's normalized difference; null when it was 0 on every vote.")
    ci_low = serializers.FloatField(allow_null=True)
    ci_high = serializers.FloatField(allow_null=True)


class ArenaSerializer(serializers.Serializer):
    text = serializers.CharField(help_text="What the arena columns mean, in plain words.")
    votes = serializers.IntegerField(help_text="Counted votes the board's arena rests on.")
    style_votes = serializers.IntegerField(help_text="Of them, the votes whose two answers' texts are known: the "
                                                     "style fit's.")
    bootstrap = serializers.IntegerField(help_text="Bootstrap rounds of the arena_elo intervals.")
    style_bootstrap = serializers.IntegerField(help_text="Bootstrap rounds of the style_elo intervals.")
    seed = serializers.IntegerField(allow_null=True, help_text="The bootstraps' seed: sha256 of 'llmchain-arena:"
                                    "<context id>:<votes>:<last vote block>', first 8 bytes, shifted right by 1.")
    last_vote_block = serializers.IntegerField(allow_null=True)
    stale = serializers.BooleanField(help_text="Votes were indexed since the last refit (which follows at once).")
    computed_at = serializers.DateTimeField(allow_null=True)
    matrix_url = serializers.CharField(help_text="The pairwise win-rate matrix, as JSON.")
    style_coefficients = ArenaCoefficientSerializer(many=True)
    style_problem = serializers.CharField(help_text="Why there are no style-controlled scores; empty when there are.")
    style_bootstrap_failed = serializers.IntegerField(help_text="Style bootstrap rounds left out of the intervals: "
                                                      "on that resample the votes were explained by style alone.")


class BoardSerializer(serializers.Serializer):
    context = BoardContextSerializer()
    generated_at = serializers.DateTimeField()
    sort = serializers.ChoiceField(choices=boards.SORT_KEYS)
    dir = serializers.ChoiceField(choices=boards.DIRECTIONS)
    min_evaluations = serializers.IntegerField(help_text="Evaluations (automatic + human) needed to be ranked.")
    min_rated = serializers.IntegerField(help_text="Answers rated by people needed to be ranked.")
    rule = serializers.CharField()
    order = serializers.CharField(help_text="What orders the board and how sure it is, in one sentence.")
    band = serializers.CharField(help_text="How the R band is computed, in plain words.")
    debate = serializers.CharField(help_text="What debate_elo is, in plain words.")
    peer = serializers.CharField(help_text="What peer_elo is and when it was computed, in plain words.")
    peer_computed_at = serializers.DateTimeField(allow_null=True, help_text="When the context's latest peer "
                                                 "self-evaluation ran; null when none has.")
    arena_text = serializers.CharField(help_text="What the arena columns mean, in plain words.")
    arena = ArenaSerializer(allow_null=True, help_text="The board's arena as a whole; null before its first vote.")
    validity = ValiditySerializer(help_text="How far each column agrees with people here, and its weight in the "
                                  "weighted score.")
    ranked = BoardRowSerializer(many=True)
    provisional = BoardRowSerializer(many=True, help_text="Models not ranked: fewer than min_evaluations "
                                     "evaluations or fewer than min_rated rated answers.")


def row_data(row: boards.BoardRow) -> dict:
    """A row as the JSON shows it: made once per row (kept in `row.memo`, as the rows of one version of a
    board are shared by all its views); the caller must not change it."""
    data = row.memo.get("json")
    if data is None:
        data = row.memo["json"] = _row_data(row)
    return data


def _row_data(row: boards.BoardRow) -> dict:
    return {"rank": row.rank, "tied": row.tied, "model_id": row.model_id, "name": row.name,
            "url": row.url, "r": str(row.r), "ra": str(row.ra), "rh": str(row.rh),
            "r_decimal": boards.wad_float(row.r), "ra_decimal": boards.wad_float(row.ra),
            "rh_decimal": boards.wad_float(row.rh), "n_auto": row.n_auto, "n_human": row.n_human,
            "evaluations": row.evaluations,
            "r_band": None if row.band_lo is None else [row.band_lo, row.band_hi], "r_band_n": row.band_n,
            "spark": list(row.spark), "block_number": row.block_number,
            "changed_at": row.changed_at.isoformat() if row.changed_at else None,
            "debate_elo": row.debate_elo, "debate_games": row.debate_games, "peer_elo": row.peer_elo,
            "peer_record": None if row.peer_record is None else dict(zip(("wins", "ties", "losses"), row.peer_record)),
            **{key: getattr(row, key) for key in boards.ARENA_FIELDS},
            **{key: getattr(row, key) for key in WEIGHTED_FIELDS}}


WEIGHTED_FIELDS = ("weighted", "weighted_low", "weighted_high", "weighted_rank", "weighted_tied")


def validity_data(board: boards.Board) -> dict:
    return {"min_human": weighting.MIN_HUMAN, "text": board.votes_text, "ratings": board.ratings,
            "ratings_text": board.ratings_text, "weighted_text": board.weighted_text, "columns": board.validity,
            "column_lines": [{"column": header, "line": line} for header, line in board.column_lines]}


def arena_data(summary: boards.ArenaSummary | None, context_id: str) -> dict | None:
    if summary is None:
        return None
    return {"text": summary.text, "votes": summary.votes, "style_votes": summary.style_votes,
            "bootstrap": summary.bootstrap, "style_bootstrap": summary.style_bootstrap, "seed": summary.seed,
            "last_vote_block": summary.last_vote_block, "stale": summary.stale,
            "computed_at": summary.computed_at.isoformat() if summary.computed_at else None,
            "matrix_url": reverse("api-board-arena", args=[context_id]),
            "style_coefficients": list(summary.coefficients), "style_problem": summary.style_problem,
            "style_bootstrap_failed": summary.style_failed}


def board_data(board: boards.Board) -> dict:
    return {**_board_head(board), "ranked": [row_data(r) for r in board.ranked],
            "provisional": [row_data(r) for r in board.provisional]}


def _board_head(board: boards.Board) -> dict:
    """What the board's JSON says besides its rows."""
    lam = deployment_lambda()  # the Reputation contract's lambda of F_D (1e18 per minute), read once
    return {"context": {"context_id": board.context_id, "name": board.context_name},
            "generated_at": board.generated_at.isoformat(), "sort": board.sort, "dir": board.direction,
            "min_evaluations": board.min_evaluations, "min_rated": board.min_rated, "rule": board.rule,
            "order": board.order_text, "band": boards.BAND_TEXT,
            "lambda_per_minute": boards.format_lambda(lam[0]), "weight": boards.weight_text(lam[0]),
            "debate": boards.DEBATE_TEXT, "peer": board.peer_text,
            "peer_computed_at": board.peer_computed_at.isoformat() if board.peer_computed_at else None,
            "arena_text": board.arena_text, "arena": arena_data(board.arena, board.context_id),
            "validity": validity_data(board)}


def board_json(board: boards.Board) -> bytes:
    """json.dumps(board_data(board)) in its compact form, byte for byte, with each row's JSON encoded once
    per row (kept in `row.memo`, shared by the board's 26 orders) and joined in this board's order."""
    rows = {key: "[" + ",".join(_row_json(r) for r in getattr(board, key)) + "]" for key in ("ranked", "provisional")}
    head = json.dumps(_board_head(board), separators=(",", ":"))
    return (head[:-1] + "".join(f',"{key}":{text}' for key, text in rows.items()) + "}").encode()


def _row_json(row: boards.BoardRow) -> str:
    text = row.memo.get("json_text")
    if text is None:
        text = row.memo["json_text"] = json.dumps(row_data(row), separators=(",", ":"))
    return text


PARAMETERS = [
    OpenApiParameter("context_id", str, OpenApiParameter.PATH, description="The context id: 0x + 64 hex digits."),
    OpenApiParameter("sort", str, enum=list(boards.SORT_KEYS), description="Column to order by (default r)."),
    OpenApiParameter("dir", str, enum=list(boards.DIRECTIONS),
                     description="asc or desc (default desc; asc for name). Ties are broken by name."),
]
ERRORS = {400: OpenApiResponse(BoardErrorSerializer, description="Malformed context id, sort or dir."),
          404: OpenApiResponse(BoardErrorSerializer, description="No context indexed under this id.")}


class _BoardView(APIView):
    """Public and read-only: no authentication to run, and the body comes from the boards' cache."""

    permission_classes = [AllowAny]
    authentication_classes = []
    kind = ""
    content_type = ""

    def body(self, board: boards.Board) -> bytes:
        raise NotImplementedError

    def respond(self, context_id: str, body: bytes) -> HttpResponse:
        return HttpResponse(body, content_type=self.content_type)

    def get(self, request, context_id):
        try:
            context_id = boards.parse_context_id(context_id)
            sort, direction = boards.parse_sort(request.query_params.get("sort"), request.query_params.get("dir"),
                                                strict=True)

            shown = boards.standing(context_id, within=boards.reuse_within())  # as the page (views/board.py)
            version = shown.version

            def produce():
                board = boards.board_from(shown, sort, direction)
                return {"context_id": board.context_id, "body": self.body(board)}

            cached = boards.cached(self.kind, context_id, sort, direction, produce, version=version)
        except boards.BoardError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except boards.UnknownContext as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_404_NOT_FOUND)
        response = self.respond(cached["context_id"], cached["body"])
        if version:
            response[boards.VERSION_HEADER] = version
        return response


class BoardDetail(_BoardView):
    kind = "json"
    content_type = "application/json"

    def body(self, board):
        return board_json(board)

    @extend_schema(summary="A context's reputation board", operation_id="board_retrieve", parameters=PARAMETERS,
                   responses={200: BoardSerializer, **ERRORS})
    def get(self, request, context_id):
        return super().get(request, context_id)


class BoardCsv(_BoardView):
    kind = "csv"
    content_type = "text/csv; charset=utf-8"

    def body(self, board):
        buffer = io.StringIO()
        csv.writer(buffer).writerows(boards.csv_rows(board))
        return buffer.getvalue().encode()

    def respond(self, context_id, body):
        response = HttpResponse(body, content_type=self.content_type)
        response["Content-Disposition"] = f'attachment; filename="board-{context_id[:10]}.csv"'
        return response

    @extend_schema(summary="A context's reputation board as CSV", operation_id="board_csv", parameters=PARAMETERS,
                   description="One header row, then one row per model: ranked first, then provisional "
                               "(status column), each list in the requested order.",
                   responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="The board as CSV."),
                              **{(code, "application/json"): r for code, r in ERRORS.items()}})
    def get(self, request, context_id):
        return super().get(request, context_id)


class ArenaModelSerializer(serializers.Serializer):
    model_id = serializers.CharField()
    name = serializers.CharField()


class ArenaMatrixSerializer(serializers.Serializer):
    context = BoardContextSerializer()
    votes = serializers.IntegerField(help_text="Counted votes the matrix rests on.")
    models = ArenaModelSerializer(many=True, help_text="Best first by Arena Elo: the rows and the columns.")
    win_rates = serializers.ListField(child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
                                      help_text="[row][column]: the row model's (wins + ties / 2) / battles against "
                                                "the column model; null where they never met (and on the diagonal).")


def matrix_data(board: boards.Board) -> dict:
    a = board.arena
    return {"context": {"context_id": board.context_id, "name": board.context_name}, "votes": a.votes if a else 0,
            "models": [{"model_id": m, "name": name} for m, name in a.models] if a else [],
            "win_rates": [list(r) for r in a.win_rates] if a else []}


class BoardArena(_BoardView):
    kind = "arena-json"
    content_type = "application/json"

    def body(self, board):
        return json.dumps(matrix_data(board), separators=(",", ":")).encode()

    @extend_schema(summary="A board's pairwise arena win rates", operation_id="board_arena_matrix",
                   parameters=PARAMETERS[:1], responses={200: ArenaMatrixSerializer, **ERRORS})
    def get(self, request, context_id):
        return super().get(request, context_id)


class BoardIndexItemSerializer(serializers.Serializer):
    context_id = serializers.CharField()
    name = serializers.CharField()
    models = serializers.IntegerField(help_text="Models with a REP in this context.")
    url = serializers.CharField(help_text="The board's JSON.")
    csv_url = serializers.CharField(help_text="The board's CSV.")


class BoardIndexSerializer(serializers.Serializer):
    boards = BoardIndexItemSerializer(many=True, help_text="The global board first, then the contexts by name.")


def index_data() -> dict:
    return {"boards": [{"context_id": cid, "name": name, "models": models, "url": reverse("api-board", args=[cid]),
                        "csv_url": reverse("api-board-csv", args=[cid])} for cid, name, models in boards.board_index()]}


class BoardIndex(APIView):
    """Every board this site serves: a visitor verifying the site checks each of them."""

    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(summary="The boards this site serves", operation_id="board_list",
                   responses={200: BoardIndexSerializer})
    def get(self, request):
        return HttpResponse(json.dumps(index_data(), separators=(",", ":")), content_type="application/json")
