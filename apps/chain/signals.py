"""Signals the apps above the chain app send to the ones above them, so that no app imports a
higher one (docs/architecture.md, "Layers").

`boards_changed(contexts=set of context ids, rated=set of context ids)`: something a board shows but does not fold from the
chain changed (a debate's outcome, a saved peer-rating run, a meta-evaluation run attached to a
context, an answer's length read from its evidence record after its evaluation was folded). Sent inside the writer's transaction; the leaderboard moves those boards' versions once it
commits, so their caches re-render; `rated` (optional): the contexts among them whose figures of people's
ratings changed (an answer's length read for a rated answer).

`name_models(model_ids=set of on-chain model ids)`: asked by pages of the chain app that show model
ids (the evidence page); each receiver returns {model id: name} for the models it knows (the chat
app, from its registry).
"""

from django.dispatch import Signal

boards_changed = Signal()
name_models = Signal()


def model_names(model_ids) -> dict[str, str]:
    """{model id: name} from every app that knows some of `model_ids`."""
    names: dict[str, str] = {}
    for _, found in name_models.send(sender=None, model_ids=set(model_ids)):
        names.update(found or {})
    return names
