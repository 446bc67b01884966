"""What the chat app tells the apps built on it, so that it never imports them.

`interaction_finished(interaction, reference_pool)`: an answer was saved as done, sent inside the
transaction that saves it; the oracle creates the interaction's evaluation job in the same
transaction (a crash keeps both or neither). `reference_pool` is "running" (the context's running
models answer as references) or "replay" (replay models only: the MT-Bench replay).
"""

from django.dispatch import Signal

interaction_finished = Signal()
