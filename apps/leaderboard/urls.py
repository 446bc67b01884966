from django.urls import path

from . import api, views

urlpatterns = [
    path("", views.board, name="board"),
    path("api/boards/", api.BoardIndex.as_view(), name="api-boards"),
    path("api/boards/<str:context_id>.csv", api.BoardCsv.as_view(), name="api-board-csv"),
    path("api/boards/<str:context_id>", api.BoardDetail.as_view(), name="api-board"),
]

from . import model_page, verify_views  # noqa: E402

urlpatterns += [
    path("reputation/<str:model_id>/", model_page.model_reputation, name="model-reputation"),
    path("verify/", verify_views.verify, name="board-verify"),
]
