from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", views.account, name="account"),
    path("account/export.json", views.account_export, name="account-export"),
    path("account/wallet/challenge", views.wallet_challenge, name="wallet-challenge"),
    path("account/wallet/link", views.wallet_link, name="wallet-link"),
    path("chat/", views.chat, name="chat"),
    path("chat/models", views.chat_models, name="chat-models"),
    path("chat/builtin-status", views.chat_builtin_status, name="chat-builtin-status"),
    path("chat/new", views.chat_new, name="chat-new"),
    path("chat/suggest", views.chat_suggest, name="chat-suggest"),
    path("chat/conversations", views.chat_conversations, name="chat-conversations"),
    path("chat/<int:pk>/", views.conversation, name="conversation"),
    path("chat/<int:pk>/rename", views.conversation_rename, name="conversation-rename"),
    path("chat/<int:pk>/delete", views.conversation_delete, name="conversation-delete"),
    path("chat/<int:pk>/count", views.conversation_count, name="conversation-count"),
    path("chat/interactions/<int:pk>/rating", views.rating, name="rating"),
    path("chat/interactions/<int:pk>/rating/prepare", views.rating_prepare, name="rating-prepare"),
    path("chat/interactions/<int:pk>/rating/sign-again", views.rating_sign_again, name="rating-sign-again"),
    path("arena/", views.arena_index, name="arena"),
    path("arena/<int:pk>/", views.arena_battle, name="arena-battle"),
    path("arena/<int:pk>/vote", views.arena_vote, name="arena-vote"),
    path("arena/<int:pk>/abandon", views.arena_abandon, name="arena-abandon"),
    path("arena/<int:pk>/vote/prepare", views.arena_vote_prepare, name="arena-vote-prepare"),
    path("models/", views.models_index, name="models"),
    path("models/new", views.model_new, name="model-new"),
    path("models/<int:pk>/", views.model_page, name="model"),
    path("models/<int:pk>/enabled", views.model_toggle, name="model-toggle"),
    path("models/<int:pk>/edit", views.model_edit, name="model-edit"),
]
