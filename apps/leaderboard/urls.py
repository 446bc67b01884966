from django.urls import path

from . import api, views

urlpatterns = [
    path("", views.board, name="board"),
    path("api/boards/<str:context_id>.csv", api.BoardCsv.as_view(), name="api-board-csv"),
    path("api/boards/<str:context_id>", api.BoardDetail.as_view(), name="api-board"),
]
