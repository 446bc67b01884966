import pytest


@pytest.fixture(autouse=True)
def _no_votes_held_from_another_test():
    """The arena keeps each context's votes in memory between refits (arena_entries); a test's database
    is rolled back behind its back, so no test starts with what another one left."""
    from apps.leaderboard import arena_entries

    arena_entries.forget_votes()
    yield
    arena_entries.forget_votes()
