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


class EntryState(models.Model):
    """What carries a BoardEntry forward when its pair changes, without reading the pair's whole
    history again (`entries.refresh`, `lib.boardstats.extend`): how many changes it summarizes and the
    last of them, the R it started from and the human-rated steps its band is recomputed from. One
    per BoardEntry, kept apart so that reading a board never loads the steps."""

    model_id = models.CharField(max_length=66)
    context_id = models.CharField(max_length=66)
    changes = models.BigIntegerField()  # ReputationChange rows summarized
    last_block = models.BigIntegerField()  # the last one's block, log index and interaction
    last_log_index = models.IntegerField()
    last_interaction = models.CharField(max_length=66)
    last_timestamp = models.BigIntegerField(null=True)
    start_r = models.BigIntegerField()  # R of the first change
    steps = models.JSONField(default=list)  # [s, w, thirds, s, w, thirds, ...]: the band's steps, in chain order
    broken = models.BooleanField(default=False)  # a change no rate explains: no band

    class Meta:
        constraints = [models.UniqueConstraint(fields=["context_id", "model_id"], name="one_state_per_entry")]
        indexes = [models.Index(fields=["model_id"], name="entrystate_model")]

    def __str__(self) -> str:
        return f"state of {self.model_id[:10]} in {self.context_id[:10]}: {self.changes} changes"


class BoardState(models.Model):
    """Versions of the boards, for their caches: scope "*" moves when every board may have changed (a
    new context, a reset), a context id's row when that board's entries changed. A rendered board is
    cached under both, so an evaluation re-renders its context's board and the global one only.
    `ratings` moves with what the board's figures of people's ratings rest on (a rating folded, rolled
    back, or its answer's length read): those figures read every rated answer of the board, so they are
    kept per `ratings` rather than per `version`, which every evaluation moves."""

    ALL = "*"

    scope = models.CharField(max_length=66, unique=True, default=ALL)
    version = models.BigIntegerField(default=0)
    ratings = models.BigIntegerField(default=0)


class ArenaEntry(models.Model):
    """One model's line in one board's arena (a context's, or the global one over every context), derived
    from the counted votes (apps.chain ArenaBattle) by `arena_entries.refresh`. Elo on the Bradley–Terry
    scale with its 95% bootstrap interval and the rank that accounts for the intervals; the style-controlled
    columns are None when the board's style fit could not be made (too few votes with both answers known)."""

    model_id = models.CharField(max_length=66)
    context_id = models.CharField(max_length=66)
    elo = models.FloatField()
    ci_low = models.FloatField()
    ci_high = models.FloatField()
    rank = models.IntegerField()  # 1 + models whose lower bound is above this one's upper bound
    battles = models.IntegerField()
    wins = models.IntegerField()
    ties = models.IntegerField()  # ties and both-bad votes
    losses = models.IntegerField()
    win_rate = models.FloatField()  # (wins + ties / 2) / battles
    style_elo = models.FloatField(null=True)
    style_ci_low = models.FloatField(null=True)
    style_ci_high = models.FloatField(null=True)
    style_rank = models.IntegerField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["context_id", "model_id"], name="one_arena_entry_per_pair")]

    def __str__(self) -> str:
        return f"arena {self.model_id[:10]} in {self.context_id[:10]}: {self.elo:.0f}"


class ArenaBoard(models.Model):
    """One board's arena as a whole: what its entries were computed from (votes, seed, bootstrap rounds),
    the pairwise win-rate matrix and the style coefficients. `generation` moves inside the indexer's
    transaction whenever the board's votes change; a refresh records the generation it read as
    `computed_generation`, and never overwrites a newer one: the board is stale while they differ, so a
    vote folded during a refresh is refitted by the next one."""

    context_id = models.CharField(max_length=66, unique=True)
    generation = models.BigIntegerField(default=0)
    computed_generation = models.BigIntegerField(default=0)
    votes = models.IntegerField(default=0)  # counted votes the board rests on
    style_votes = models.IntegerField(default=0)  # of them, those whose two answers' text is known
    last_vote_block = models.BigIntegerField(null=True)
    seed = models.BigIntegerField(null=True)
    bootstrap = models.IntegerField(default=0)
    style_bootstrap = models.IntegerField(default=0)
    ranking = models.JSONField(default=list)  # model ids in board order (best first): the matrix's rows
    win_rates = models.JSONField(default=list)  # [row][column]: (wins + ties / 2) / battles, None without
    coefficients = models.JSONField(default=list)  # the style coefficients with their intervals
    style_problem = models.CharField(max_length=300, blank=True)  # why there are no style-controlled scores
    style_failed = models.IntegerField(default=0)  # style bootstrap rounds left out (no finite fit)
    computed_at = models.DateTimeField(null=True)
    seconds = models.FloatField(null=True)  # how long the last refresh took

    @property
    def stale(self) -> bool:
        return self.generation != self.computed_generation

    def __str__(self) -> str:
        return f"arena of {self.context_id[:10]}: {self.votes} votes{' (stale)' if self.stale else ''}"


class AnswerStyle(models.Model):
    """The style of one answer in a battle, measured once: its length in characters and its Markdown
    density (lib.arena.markdown_density), from the chat's answer or the evidence record on IPFS."""

    class Source(models.TextChoices):
        CHAT = "chat"
        EVIDENCE = "evidence"

    interaction_id = models.CharField(max_length=66, unique=True)
    length = models.IntegerField()
    markdown = models.FloatField()
    source = models.CharField(max_length=16, choices=Source.choices)

    def __str__(self) -> str:
        return f"{self.interaction_id[:10]}: {self.length} characters, {self.markdown:.1f} Markdown per 1000"
