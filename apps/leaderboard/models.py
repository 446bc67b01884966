"""The boards' own table: one row per (model, context) with everything a board row shows.

It is derived from the indexed chain tables by `entries.refresh`, which the indexer calls inside
the transaction that folds each chunk, so a board request reads one indexed query and never
recomputes anything.
"""

from __future__ import annotations

from django.db import models


class BoardEntry(models.Model):
    model_id = models.CharField(max_length=66)
    context_id = models.CharField(max_length=66)
    name = models.CharField(max_length=200)  # from the model's latest metadata record on IPFS
    ra = models.BigIntegerField()  # REP in 1e18 fixed point, as last emitted
    rh = models.BigIntegerField()
    r = models.BigIntegerField()
    n_auto = models.BigIntegerField()
    n_human = models.BigIntegerField()
    block_number = models.BigIntegerField()  # of the last change
    changed_at = models.DateTimeField(null=True)  # that block's timestamp
    spark = models.JSONField(default=list)  # R over the pair's history, thinned
    history = models.JSONField(default=dict)  # {"i", "ra", "rh", "r"}: the model page's chart
    band_lo = models.FloatField(null=True)  # bootstrap band on R (lib/boardstats.py); None: too few ratings
    band_hi = models.FloatField(null=True)
    band_n = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["context_id", "model_id"], name="one_entry_per_pair")]
        indexes = [models.Index(fields=["model_id"])]

    def __str__(self) -> str:
        return f"{self.name} in {self.context_id[:10]}"


class BoardState(models.Model):
    """Versions of the boards, for their caches: scope "*" moves when every board may have changed (a
    new context, a reset), a context id's row when that board's entries changed. A rendered board is
    cached under both, so an evaluation re-renders its context's board and the global one only."""

    ALL = "*"

    scope = models.CharField(max_length=66, unique=True, default=ALL)
    version = models.BigIntegerField(default=0)
