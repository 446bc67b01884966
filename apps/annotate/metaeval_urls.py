from django.urls import path

from . import metaeval_views

urlpatterns = [
    path("metaeval/", metaeval_views.run_list, name="metaeval-runs"),
    path("metaeval/<int:pk>/", metaeval_views.run_detail, name="metaeval-run"),
    path("api/metaeval/<int:pk>", metaeval_views.MetaEvalRunDetail.as_view(), name="api-metaeval-run"),
]
