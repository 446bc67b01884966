from django.urls import path

from . import api
from .views import judging, metaeval, queue, report

urlpatterns = [
    path("annotate/", queue.queue_page, name="annotate"),
    path("annotate/items/<int:pk>/hold", queue.hold, name="annotate-hold"),
    path("annotate/items/<int:pk>/verdict", queue.answer, name="annotate-verdict"),
    path("annotate/items/<int:pk>/skip", queue.skip, name="annotate-skip"),
    path("annotate/skips/clear", queue.clear_skips, name="annotate-clear-skips"),
    path("annotate/report/", report.report, name="metaeval-report"),
    path("metaeval/", metaeval.run_list, name="metaeval-runs"),
    path("metaeval/<int:pk>/", metaeval.run_detail, name="metaeval-run"),
    path("boards/<str:context_id>/validity", metaeval.board_validity, name="board-validity"),
    path("models/<int:pk>/judging", metaeval.judge_qualification, name="model-judging"),
    path("models/<int:pk>/judging/roles", judging.judge_roles, name="model-judging-roles"),
    path("api/metaeval/<int:pk>", api.MetaEvalRunDetail.as_view(), name="api-metaeval-run"),
]
