"""Signals the apps above the chain app send to the ones above them, so that no app imports a
higher one (README, "Architecture").

`boards_changed(contexts=set of context ids)`: something a board shows but does not fold from the
chain changed (a debate's outcome, a saved peer-rating run, a meta-evaluation run attached to a
context). Sent inside the writer's transaction; the leaderboard moves those boards' versions once it
commits, so their caches re-render.
"""

from django.dispatch import Signal

boards_changed = Signal()
