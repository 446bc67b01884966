from django.urls import path

from . import api
from .views.arena import arena_matrix
from .views.board import board
from .views.dataset import dataset, dataset_jsonl
from .views.how import how_computed
from .views.model import model_reputation
from .views.replay import replay_line
from .views.verify import verify

urlpatterns = [
    path("", board, name="board"),
    path("api/boards/", api.BoardIndex.as_view(), name="api-boards"),
    path("api/boards/<str:context_id>.csv", api.BoardCsv.as_view(), name="api-board-csv"),
    path("api/boards/<str:context_id>", api.BoardDetail.as_view(), name="api-board"),
    path("api/boards/<str:context_id>/arena", api.BoardArena.as_view(), name="api-board-arena"),
    path("boards/arena-matrix", arena_matrix, name="arena-matrix"),
    path("reputation/<str:model_id>/", model_reputation, name="model-reputation"),
    path("verify/", verify, name="board-verify"),
    path("how/", how_computed, name="how-computed"),
    path("dataset/", dataset, name="dataset"),
    path("dataset/export.jsonl", dataset_jsonl, name="dataset-jsonl"),
    path("boards/replay-progress", replay_line, name="replay-progress"),
]
