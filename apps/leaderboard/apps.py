from django.apps import AppConfig


class LeaderboardConfig(AppConfig):
    name = "apps.leaderboard"
    label = "leaderboard"
