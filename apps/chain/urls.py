from django.urls import path

from . import views

urlpatterns = [
    path("evidence/<str:cid>/", views.evidence_page, name="evidence"),
    path("evidence/<str:cid>/raw", views.evidence_raw, name="evidence-raw"),
    path("api/evidence/<str:cid>", views.evidence_api, name="api-evidence"),
    path("chain/status", views.chain_status, name="chain-status"),
]
