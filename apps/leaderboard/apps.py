from django.apps import AppConfig


class LeaderboardConfig(AppConfig):
    name = "apps.leaderboard"
    label = "leaderboard"

    def ready(self) -> None:
        from apps.chain import indexer, signals

        from . import entries

        indexer.folded.connect(entries.on_folded, dispatch_uid="leaderboard-refresh")
        indexer.cleared.connect(entries.on_cleared, dispatch_uid="leaderboard-clear")
        signals.boards_changed.connect(entries.on_boards_changed, dispatch_uid="leaderboard-bump")
