from django.urls import path

from . import report_views, views

urlpatterns = [
    path("", views.queue_page, name="annotate"),
    path("items/<int:pk>/verdict", views.answer, name="annotate-verdict"),
    path("items/<int:pk>/skip", views.skip, name="annotate-skip"),
    path("skips/clear", views.clear_skips, name="annotate-clear-skips"),
    path("report/", report_views.report, name="metaeval-report"),
]
