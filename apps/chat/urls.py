from django.contrib.auth import views as auth_views
from django.urls import path

from .views.accounts import LoginView, account, account_export, signup
from .views.arena import arena_abandon, arena_battle, arena_index, arena_vote, arena_vote_prepare
from .views.chat import chat, chat_builtin_status, chat_models, chat_new, chat_suggest
from .views.conversations import (
    chat_conversations,
    conversation,
    conversation_count,
    conversation_delete,
    conversation_rename,
)
from .views.ratings import rating, rating_prepare, rating_sign_again
from .views.registry import model_edit, model_new, model_page, model_toggle, models_index
from .views.wallets import wallet_challenge, wallet_link

urlpatterns = [
    path("signup/", signup, name="signup"),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", account, name="account"),
    path("account/export.json", account_export, name="account-export"),
    path("account/wallet/challenge", wallet_challenge, name="wallet-challenge"),
    path("account/wallet/link", wallet_link, name="wallet-link"),
    path("chat/", chat, name="chat"),
    path("chat/models", chat_models, name="chat-models"),
    path("chat/builtin-status", chat_builtin_status, name="chat-builtin-status"),
    path("chat/new", chat_new, name="chat-new"),
    path("chat/suggest", chat_suggest, name="chat-suggest"),
    path("chat/conversations", chat_conversations, name="chat-conversations"),
    path("chat/<int:pk>/", conversation, name="conversation"),
    path("chat/<int:pk>/rename", conversation_rename, name="conversation-rename"),
    path("chat/<int:pk>/delete", conversation_delete, name="conversation-delete"),
    path("chat/<int:pk>/count", conversation_count, name="conversation-count"),
    path("chat/interactions/<int:pk>/rating", rating, name="rating"),
    path("chat/interactions/<int:pk>/rating/prepare", rating_prepare, name="rating-prepare"),
    path("chat/interactions/<int:pk>/rating/sign-again", rating_sign_again, name="rating-sign-again"),
    path("arena/", arena_index, name="arena"),
    path("arena/<int:pk>/", arena_battle, name="arena-battle"),
    path("arena/<int:pk>/vote", arena_vote, name="arena-vote"),
    path("arena/<int:pk>/abandon", arena_abandon, name="arena-abandon"),
    path("arena/<int:pk>/vote/prepare", arena_vote_prepare, name="arena-vote-prepare"),
    path("models/", models_index, name="models"),
    path("models/new", model_new, name="model-new"),
    path("models/<int:pk>/", model_page, name="model"),
    path("models/<int:pk>/enabled", model_toggle, name="model-toggle"),
    path("models/<int:pk>/edit", model_edit, name="model-edit"),
]
