"""The leaderboard's pages: the board (`board`), a model's reputation (`model`), the board checked
against the chain (`verify`). The JSON and CSV exports are in `apps.leaderboard.api`."""
