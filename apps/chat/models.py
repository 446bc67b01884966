"""The user and LLM layers: accounts' chain identities, the model registry, conversations."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.chain.models import ArenaBattle, OutboxItem


class Profile(models.Model):
    """A site account's chain identity: its own address (the key is in chain.SigningKey)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    address = models.CharField(max_length=42, unique=True)
    is_developer = models.BooleanField(default=False)
    is_expert = models.BooleanField(default=False)
    # The site's own accounts (the built-in model's owner, the replay's user...): never log in.
    is_service = models.BooleanField(default=False)
    # An admin's links between accounts of one person: ratings of a model owned by any of them
    # are refused (a person does not rate their own model).
    same_person_as = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="linked_profiles",
                                       help_text="Another account of the same person (set by an admin).")
    suspended_at = models.DateTimeField(null=True, blank=True)
    suspension_reason = models.CharField(max_length=300, blank=True)
    # Whether the user lets their prompts, answers and ratings into the public dataset (never their
    # name); asked at sign-up, changed on their account page.
    share_prompts = models.BooleanField(default=False)
    share_prompts_changed_at = models.DateTimeField(null=True, blank=True)
    # A wallet the user linked (they proved they hold its key by signing a sign-in message): their
    # later answers are recorded under it and rated with requests their wallet signs, in the browser;
    # the site holds no key for it. "" for a custodial user.
    wallet_address = models.CharField(max_length=42, blank=True, default="")
    wallet_linked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["wallet_address"], condition=~models.Q(wallet_address=""),
                                               name="one_account_per_wallet")]

    def __str__(self) -> str:
        return f"{self.user} {self.address}"

    @property
    def rating_address(self) -> str:
        """The address the oracle names as the user of new interactions, which rates them: the linked
        wallet's, else the one whose key the site holds."""
        return self.wallet_address or self.address


class RegisteredModel(models.Model):
    """A model in the registry: how to reach it, and its identity on-chain and on IPFS."""

    class Kind(models.TextChoices):
        OPENAI = "openai-chat", "OpenAI-compatible endpoint"
        REPLAY = "replay", "Replay of recorded answers"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="models")
    name = models.CharField(max_length=100, unique=True)
    provider = models.CharField(max_length=200)
    description = models.TextField(blank=True, max_length=5000)
    licence = models.CharField(max_length=200, blank=True)
    parameters = models.CharField(max_length=100, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.OPENAI)
    endpoint_url = models.URLField(max_length=500, blank=True)
    endpoint_model = models.CharField(max_length=200, blank=True)  # the model's name at the endpoint
    api_key_encrypted = models.BinaryField(null=True, blank=True, editable=False)
    contexts = models.ManyToManyField("chain.Context", blank=True, related_name="models")
    is_judge = models.BooleanField(default=False)
    # Whether its endpoint honours response_format with a JSON schema, probed once when it first
    # judges (apps/chat/gateway.py structured_support); None: not probed yet.
    structured_output = models.BooleanField(null=True, blank=True)
    # On-chain id: the sha2-256 digest of the first metadata CID, so the model's identity is
    # the CID of its details (the paper); edits publish new CIDs under the same id.
    model_id = models.CharField(max_length=66, unique=True)
    metadata_cid = models.CharField(max_length=100)
    metadata_revision = models.PositiveIntegerField(default=0)  # edits published so far
    enabled = models.BooleanField(default=True)  # the owner's switch
    # The operator's switch, above the owner's: a suspended model is offline whatever its owner does.
    suspended_at = models.DateTimeField(null=True, blank=True)
    suspension_reason = models.CharField(max_length=300, blank=True)
    healthy = models.BooleanField(default=True)  # the last health checks' verdict
    health_failures = models.PositiveIntegerField(default=0)
    health_checked_at = models.DateTimeField(null=True, blank=True)
    health_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def running(self) -> bool:
        return self.enabled and self.healthy and self.suspended_at is None


class ReplayAnswer(models.Model):
    """A recorded answer a replay model gives to one turn of one known question."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="replay_answers")
    question_id = models.CharField(max_length=64)
    turn = models.PositiveSmallIntegerField()  # 1-based
    prompt_key = models.CharField(max_length=64, db_index=True)  # hash of the normalised prompt
    previous_key = models.CharField(max_length=64, blank=True)  # hash of the previous user turn
    prompt = models.TextField(blank=True)  # the question as asked: the chat offers it to pick
    category = models.CharField(max_length=64, blank=True)  # MT-Bench's category: the context it is offered in
    text = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "question_id", "turn"], name="one_answer_per_turn")]


class Conversation(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    model = models.ForeignKey(RegisteredModel, on_delete=models.PROTECT, related_name="conversations")
    context = models.ForeignKey("chain.Context", on_delete=models.PROTECT, related_name="conversations")
    title = models.CharField(max_length=200)
    # One side of an arena battle: its model's name stays hidden until the user has voted.
    arena = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title

    @property
    def battle(self) -> Battle | None:
        """The arena battle this conversation is a side of (None for an ordinary conversation). A side
        reached from its battle (`battle.conversation_a`) knows it without a query: Django keeps the
        battle on the side's reverse one-to-one accessor then."""
        if not self.arena:
            return None
        for accessor in ("battle_as_a", "battle_as_b"):
            if getattr(Conversation, accessor).is_cached(self):
                try:
                    return getattr(self, accessor)
                except Battle.DoesNotExist:  # known not to be this side
                    continue
        if "_battle" not in self.__dict__:
            self._battle = Battle.objects.filter(models.Q(conversation_a=self) | models.Q(conversation_b=self)).first()
        return self._battle

    @property
    def name_hidden(self) -> bool:
        """An arena side whose battle's vote is not final on-chain yet: nothing served names its model."""
        battle = self.battle
        return battle is not None and not battle.revealed

    @property
    def side(self) -> str:
        """"A" or "B" for an arena side, "" otherwise."""
        battle = self.battle
        return "" if battle is None else ("A" if battle.conversation_a_id == self.pk else "B")

    @property
    def model_label(self) -> str:
        """What the site calls this conversation's model: its name, or "Model A" or "B" while it is hidden."""
        return f"Model {self.side}" if self.name_hidden else self.model.name


class Interaction(models.Model):
    """One prompt and the model's answer: what the oracle scores and the user rates."""

    class Status(models.TextChoices):
        STREAMING = "streaming"
        DONE = "done"
        FAILED = "failed"  # the model did not answer; nothing is evaluated
        STOPPED = "stopped"  # the user stopped it: what came is kept, and it is not evaluated (not a whole answer)

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="interactions")
    interaction_id = models.CharField(max_length=66, unique=True)  # the on-chain id
    prompt = models.TextField(max_length=20_000)
    answer = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STREAMING)
    error = models.TextField(blank=True)
    # Why the endpoint ended the answer ("stop", "length": cut at the token limit, ...; "" unknown).
    finish_reason = models.CharField(max_length=32, blank=True)
    # Regenerated or edited: the first turn this one asks again. Both are kept (and each evaluated);
    # the model's history holds the latest attempt only.
    replaces = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.interaction_id

    @property
    def shown_answer(self) -> str:
        """The answer as the site shows it: on a hidden arena side, with its model's names masked."""
        return self.blind(self.answer)

    @property
    def shown_error(self) -> str:
        return self.blind(self.error)

    def blind(self, text: str) -> str:
        """`text` with the model's names masked while this is a hidden arena side."""
        conversation = self.conversation
        if not text or not conversation.name_hidden:
            return text
        from .arena import mask  # arena builds on these models

        return mask(conversation.model, text)

    @property
    def cut_at_limit(self) -> bool:
        return self.finish_reason == "length"

    @property
    def answer_token_limit(self) -> int:
        return settings.LLMCHAIN_ANSWER_MAX_TOKENS


class Rating(models.Model):
    """The questionnaire a user answered about one answer they had (the paper's human evaluation).

    It waits until the interaction is on-chain (its autoEval queued), then humEval is queued from
    the user's own address and updateReputation after it.
    """

    class Status(models.TextChoices):
        WAITING = "waiting"  # the interaction's autoEval is not queued yet
        QUEUED = "queued"  # humEval and updateReputation are in the outbox
        ONCHAIN = "onchain"  # both confirmed
        FAILED = "failed"

    interaction = models.OneToOneField(Interaction, on_delete=models.CASCADE, related_name="rating")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ratings")
    reliability = models.PositiveSmallIntegerField()
    completeness = models.PositiveSmallIntegerField()
    utility = models.PositiveSmallIntegerField()
    familiarity = models.PositiveSmallIntegerField()
    trust = models.PositiveSmallIntegerField()
    uncertainty = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.WAITING)
    hum_item = models.ForeignKey("chain.OutboxItem", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    update_item = models.ForeignKey("chain.OutboxItem", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    error = models.TextField(blank=True)  # what the rater reads when it failed
    failure = models.CharField(max_length=16, choices=OutboxItem.Failure.choices, blank=True)  # why, as code compares it
    # Why, in the rater's words (optional; kept on the site, never sent to the chain).
    tags = models.JSONField(default=list, blank=True)  # values of REASON_TAGS
    comment = models.TextField(blank=True, max_length=1000)
    # Who signs the rating's humEval (the interaction's user on-chain), and, for a wallet user, the
    # request their wallet signed (metatx.to_json), kept until it is queued.
    signer = models.CharField(max_length=42, blank=True)
    request = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def answers(self) -> dict[str, int]:
        return {f: getattr(self, f) for f in QUESTIONNAIRE}


# The questionnaire (paper Sec. IV-B2): each item 1..5, with what each end means.
QUESTIONNAIRE = {
    "reliability": ("How reliable is this answer: is it correct and free of made-up facts?",
                    "1 = wrong or made up", "5 = fully correct"),
    "completeness": ("How complete is it: does it cover everything the question asked?",
                     "1 = misses most of it", "5 = covers all of it"),
    "utility": ("How useful is it to you?", "1 = useless", "5 = exactly what I needed"),
    "familiarity": ("How familiar are you with the topic?", "1 = not at all", "5 = I am an expert"),
    "trust": ("How much do you trust this model in general?", "1 = not at all", "5 = completely"),
    "uncertainty": ("How unsure are you of your own rating?", "1 = very sure", "5 = very unsure"),
}


class Invitation(models.Model):
    """A sign-up an admin allows when LLMCHAIN_SIGNUP is "invite": its code, used once."""

    code = models.CharField(max_length=64, unique=True, editable=False)
    note = models.CharField(max_length=200, blank=True, help_text="Who it is for (shown to admins only).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="invitations_made")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    used_by = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="invitation")
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"invitation {self.code[:6]}… ({self.note or 'no note'})"

    def save(self, *args, **kwargs):
        if not self.code:
            import secrets
            self.code = secrets.token_urlsafe(18)
        super().save(*args, **kwargs)


# Optional reasons a rater may tick (value, label); kept with the rating, off-chain.
REASON_TAGS = (
    ("accurate", "Accurate"),
    ("made-up", "Made-up facts"),
    ("incomplete", "Incomplete"),
    ("off-topic", "Off topic"),
    ("clear", "Clear and well explained"),
    ("hard-to-read", "Hard to read"),
    ("unsafe", "Unsafe or harmful"),
)
COMMENT_MAX = 1000


class BattleQuerySet(models.QuerySet):
    def with_revealed(self) -> BattleQuerySet:
        """Each battle read with whether its vote is final on-chain, in the same query: `revealed`
        asks nothing more."""
        return self.annotate(vote_final=models.Exists(ArenaBattle.objects.filter(
            battle_id=models.OuterRef("battle_id"), outcome__isnull=False)))


class Battle(models.Model):
    """An arena battle: two running models drawn at random answer the same prompts side
    by side, their names hidden; the user votes on the first answers (A better, B better, tie, both
    bad), and the names are revealed. The vote goes on-chain once both answers are: the battle is
    opened (openBattle, signed by the oracle) and the user's vote (signed by them) cast in one relayed,
    atomic transaction."""

    class Status(models.TextChoices):
        ANSWERING = "answering"  # no vote yet
        VOTED = "voted"  # the vote is saved; waiting for both answers to be on-chain
        QUEUED = "queued"  # openBattle and vote are in the outbox
        ONCHAIN = "onchain"
        FAILED = "failed"
        ABANDONED = "abandoned"  # left without a vote: it counts against its user (arena.ABANDON_*)
        # The wallet's signed vote could not be used (its nonce was used elsewhere, or it expired) and
        # nothing of the battle reached the chain: ended, and counted like an abandon.
        LOST = "lost"

    OUTCOMES = {"a": "A is better", "b": "B is better", "tie": "It's a tie", "bad": "Both are bad"}

    objects = BattleQuerySet.as_manager()

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="battles")
    context = models.ForeignKey("chain.Context", on_delete=models.PROTECT, related_name="battles")
    conversation_a = models.OneToOneField(Conversation, on_delete=models.CASCADE, related_name="battle_as_a")
    conversation_b = models.OneToOneField(Conversation, on_delete=models.CASCADE, related_name="battle_as_b")
    battle_id = models.CharField(max_length=66, unique=True)  # the on-chain id
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ANSWERING)
    outcome = models.CharField(max_length=8, blank=True)  # a key of OUTCOMES
    # Which answers named their own model ("a", "b", "ab"): such a vote is kept and shown, not counted.
    self_named = models.CharField(max_length=2, blank=True)
    signer = models.CharField(max_length=42, blank=True)
    request = models.JSONField(null=True, blank=True)  # a wallet user's signed vote, until it is queued
    open_item = models.ForeignKey("chain.OutboxItem", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    vote_item = models.ForeignKey("chain.OutboxItem", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    error = models.TextField(blank=True)
    # The one message both sides answer before the vote (set by the first side asked).
    prompt = models.TextField(blank=True)
    # The vote came after its user had abandoned too many battles (arena.ABANDON_LIMIT): kept, not counted.
    flagged = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    voted_at = models.DateTimeField(null=True, blank=True)
    abandoned_at = models.DateTimeField(null=True, blank=True, db_index=True)

    def __str__(self) -> str:
        return f"battle {self.pk} {self.status}"

    @property
    def counted(self) -> bool:
        return not self.self_named and not self.flagged

    @property
    def revealed(self) -> bool:
        """Whether its vote is final on-chain (the indexer folds only final blocks): only then are the
        models named. Read once (`Battle.objects.with_revealed()` reads it with the battle);
        `read_revealed` reads it again."""
        if getattr(self, "vote_final", None) is None:
            return self.read_revealed()
        return self.vote_final

    def read_revealed(self) -> bool:
        """`revealed` as the indexed chain has it now."""
        self.vote_final = ArenaBattle.objects.filter(battle_id=self.battle_id, outcome__isnull=False).exists()
        return self.vote_final
