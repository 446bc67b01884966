"""The chat app's pages, one module per area: sign-up, login and the account (`accounts`), linking a
wallet (`wallets`), the chat page (`chat`), conversations (`conversations`), the rating under an
answer (`ratings`), the model registry (`registry`), the blind arena (`arena`); what several share
is in `_common`. `apps/chat/urls.py` imports each view from its module."""
