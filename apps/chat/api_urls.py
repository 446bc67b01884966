"""The JSON API under /api/ (llmchain_site/urls.py includes it); the schema is at /api/schema."""

from django.urls import path

from . import api

urlpatterns = [
    path("token", api.TokenView.as_view(), name="api-token"),
    path("contexts", api.ContextList.as_view(), name="api-contexts"),
    path("models", api.ModelList.as_view(), name="api-models"),
    path("models/<int:pk>", api.ModelDetail.as_view(), name="api-model"),
    path("conversations", api.ConversationList.as_view(), name="api-conversations"),
    path("conversations/<int:pk>", api.ConversationDetail.as_view(), name="api-conversation"),
    path("conversations/<int:pk>/messages", api.ConversationMessages.as_view(), name="api-conversation-messages"),
    path("interactions/<int:pk>", api.InteractionDetail.as_view(), name="api-interaction"),
    path("interactions/<int:pk>/rating", api.InteractionRating.as_view(), name="api-interaction-rating"),
]
