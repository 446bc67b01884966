from django.apps import AppConfig
from django.conf import settings
from django.core import checks

REFIT_MODES = ("after-fold", "worker")


def check_arena_settings(app_configs=None, **kwargs):
    errors = []
    if settings.LLMCHAIN_ARENA_REFIT not in REFIT_MODES:
        errors.append(checks.Error(f"LLMCHAIN_ARENA_REFIT must be one of {', '.join(REFIT_MODES)}, not "
                                   f"{settings.LLMCHAIN_ARENA_REFIT!r}", id="leaderboard.E001"))
    for name in ("LLMCHAIN_ARENA_BOOTSTRAP", "LLMCHAIN_ARENA_STYLE_BOOTSTRAP"):
        if getattr(settings, name) < 0:
            errors.append(checks.Error(f"{name} cannot be negative", id="leaderboard.E002"))
    return errors


class LeaderboardConfig(AppConfig):
    name = "apps.leaderboard"
    label = "leaderboard"

    def ready(self) -> None:
        from apps.chain import indexer, signals

        checks.register(check_arena_settings)

        from . import arena_entries, entries

        indexer.folded.connect(entries.on_folded, dispatch_uid="leaderboard-refresh")
        indexer.cleared.connect(entries.on_cleared, dispatch_uid="leaderboard-clear")
        indexer.folded.connect(arena_entries.on_folded, dispatch_uid="leaderboard-arena")
        indexer.cleared.connect(arena_entries.on_cleared, dispatch_uid="leaderboard-arena-clear")
        signals.boards_changed.connect(entries.on_boards_changed, dispatch_uid="leaderboard-bump")
