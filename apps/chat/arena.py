"""Arena mode: blind battles between two models, and the user's vote.

In a context, two running models that answer free prompts are drawn at random, favouring pairs
that have met least; each gets a conversation of its own (`Conversation.arena`: its model's name is
hidden), and the same prompts go to both, answered side by side. The user votes on their first
answers: A better, B better, a tie, or both bad; only then are the names revealed, and the user can
go on with both. An answer that names its own model (Chatbot Arena's rule) makes the vote "not
counted": it is kept, shown and recorded on-chain as voided, and left out of the arena board.

On-chain: once both answers' autoEval calls are confirmed, the oracle opens the battle
(`openBattle`, which attests that the two interactions answered one prompt of one user) and the
user's vote (`vote`), signed by the user like a rating (with the key the site holds for a custodial
user, or by their wallet in the browser), goes with it: both are requests relayed in one atomic
batch (`advance`), so the chain never shows the battle open without its vote, and no direct vote
can come first. `advance` moves a voted battle on; the oracle's worker calls `advance_waiting` on
every pass, so a vote never waits for a page view. A wallet's vote the forwarder cannot take any
more (its nonce used elsewhere, or expired) leaves nothing on-chain; the battle then ends as a lost
vote, counted like an abandon (`LOST`): voting again after the sides' public autoEval events could
be read would not be blind.

Blind until the vote is final: until the battle's `Voted` event is final on-chain (indexed), nothing
the site serves names a side's model (`Conversation.name_hidden`; pages, API, export and socket read
it), answers shown are masked where they name their model (`mask`), and the sides' autoEval calls
(whose public events and evidence name the models) wait in the oracle until the vote is signed
(`holds`). Before the vote each side gets one message, the same for both (`check_turn`, in the
prompt checks that page, API and socket share), and no side can be rated. A user has one unvoted
battle at a time; abandoning one is recorded (`abandon`), and a user who abandoned more than
LLMCHAIN_ARENA_ABANDON_LIMIT in LLMCHAIN_ARENA_ABANDON_DAYS has their votes kept but not counted
(`flagged`, voided on-chain). Only voted battles weigh in the pair draw, and starting a battle has
a rate of its own ("battles").
"""

from __future__ import annotations

import itertools
import random
import re
import secrets
from collections import Counter
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.chain import metatx, outbox, relay, work
from apps.chain.client import ChainError
from apps.chain.keys import oracle_address, relayer_address
from apps.chain.models import ArenaBattle, OutboxItem

from . import limits, ratings
from .accounts import same_person
from .health import running_models
from .models import Battle, Conversation, Interaction, Profile, RegisteredModel

DONE = Interaction.Status.DONE
SIDES = ("a", "b")
VOTED = (Battle.Status.VOTED, Battle.Status.QUEUED, Battle.Status.ONCHAIN)  # a vote was cast
ENDED_UNVOTED = (Battle.Status.ABANDONED, Battle.Status.LOST)  # count against their user
LOST_WORDS = ("Your vote could not be sent: your wallet's signature was no longer valid when the site sent it "
              "({why}). Nothing of this battle was recorded on the chain, and it cannot be voted on again, "
              "since the models could be known by now. It counts like an abandoned battle.")
MASK = "[model name hidden]"


class NoBattle(ValidationError):
    pass


# --- drawing two models --------------------------------------------------------------------------

def candidates(user, context) -> list[RegisteredModel]:
    """Running models of the context that answer free prompts, not the user's own (nor a linked
    account's): a person does not judge their own model, blind or not."""
    return [m for m in running_models(context).exclude(kind=RegisteredModel.Kind.REPLAY).order_by("pk")
            if not same_person(user.id, m.owner_id)]


def pair_counts(context) -> Counter:
    """How many voted battles each pair of models (by pk) has had in the context: unvoted and abandoned
    ones do not count, so no one steers the pairs others get by starting battles."""
    rows = Battle.objects.filter(context=context, status__in=VOTED).values_list(
        "conversation_a__model_id", "conversation_b__model_id")
    return Counter(frozenset(pair) for pair in rows)


def draw_pair(user, context, rng: random.Random | None = None) -> tuple[RegisteredModel, RegisteredModel]:
    """Two different models at random, each pair weighted 1 / (1 + its battles so far) so that pairs
    with few battles come up more often; which is A and which is B is random too."""
    rng = rng or random.SystemRandom()
    models = candidates(user, context)
    if len(models) < 2:
        raise NoBattle({"context": [f"The arena needs two running models that answer free prompts in {context.name}; "
                                    f"there {'is' if len(models) == 1 else 'are'} {len(models) or 'none'} now. "
                                    "Try another context."]})
    return pick_pair(models, pair_counts(context), rng)


def pick_pair(models: list, counts: Counter, rng: random.Random) -> tuple:
    """Two of `models` (at least two), each pair weighted 1 / (1 + counts[its pks]), in random order."""
    pairs = list(itertools.combinations(models, 2))
    a, b = rng.choices(pairs, weights=[1 / (1 + counts[frozenset((x.pk, y.pk))]) for x, y in pairs])[0]
    return (a, b) if rng.random() < 0.5 else (b, a)


def unvoted(user) -> Battle | None:
    """The user's battle waiting for their vote (at most one)."""
    return Battle.objects.filter(user=user, status=Battle.Status.ANSWERING).select_related("context").first()


def start_battle(user, context, rng: random.Random | None = None) -> Battle:
    """A new battle: refused while the user has one waiting for their vote (vote on it or abandon it),
    and beyond the "battles" rate."""
    if not getattr(user, "is_authenticated", False):
        raise PermissionError("Log in to use the arena.")
    if unvoted(user) is not None:
        raise NoBattle({"context": ["You have a battle waiting for your vote: vote on it, or abandon it "
                                    "(abandoned battles count against your votes), before starting another."]})
    a, b = draw_pair(user, context, rng)
    wait = limits.take("battles", user.pk)
    if wait is not None:
        raise NoBattle({"context": [f"You have started many battles in a short time: wait {limits.wait_words(wait)}, "
                                    "then start another."]})
    with transaction.atomic():
        sides = [Conversation.objects.create(user=user, model=m, context=context, arena=True,
                                             title=f"Arena · {context.name} · model {label}")
                 for m, label in ((a, "A"), (b, "B"))]
        return Battle.objects.create(user=user, context=context, conversation_a=sides[0], conversation_b=sides[1],
                                     battle_id="0x" + secrets.token_hex(32))


def battle_of(conversation: Conversation) -> Battle | None:
    return Battle.objects.filter(Q(conversation_a=conversation) | Q(conversation_b=conversation)).first()


def abandon(user, battle: Battle) -> Battle:
    """Leave a battle without voting: recorded, and counted against the user's later votes."""
    if battle.user_id != getattr(user, "id", None):
        raise PermissionError("Only the person who had this battle can abandon it.")
    if not Battle.objects.filter(pk=battle.pk, status=Battle.Status.ANSWERING).update(
            status=Battle.Status.ABANDONED, abandoned_at=timezone.now()):
        raise ValidationError({"vote": ["This battle was voted on or abandoned already."]})
    battle.refresh_from_db()
    work.wake_on_commit(ratings.WORKER_CHANNEL)  # its answers' evaluations go on (holds)
    return battle


def _abandon_window_start():
    return timezone.now() - timedelta(days=settings.LLMCHAIN_ARENA_ABANDON_DAYS)


def abandoned_recently(user) -> int:
    """Battles the user abandoned, or whose signed vote was lost, within the window."""
    return Battle.objects.filter(user=user, status__in=ENDED_UNVOTED, abandoned_at__gte=_abandon_window_start()
                                 ).count()


def can_delete(conversation: Conversation) -> bool:
    """An arena side goes with its battle (deleting it deletes the battle): not while the vote is on its
    way, nor while an abandoned battle still counts against its user."""
    battle = conversation.battle
    if battle is None or battle.revealed:
        return True
    return battle.status in ENDED_UNVOTED and (battle.abandoned_at is None or battle.abandoned_at < _abandon_window_start())


# --- blind until the vote is final ----------------------------------------------------------------

def hidden_sides():
    """The arena conversations whose battle's vote is not final on-chain yet."""
    final = ArenaBattle.objects.filter(outcome__isnull=False).values("battle_id")
    return Conversation.objects.filter(arena=True).exclude(
        Q(battle_as_a__battle_id__in=final) | Q(battle_as_b__battle_id__in=final))


def model_names(model: RegisteredModel) -> set[str]:
    """What names a model: its registered name, the name without its size or version suffix
    ("lighthouse-3b" -> "lighthouse"), its name at its endpoint, its provider, and its on-chain id;
    names shorter than four letters are left out (too many false alarms)."""
    names = {model.name, re.split(r"[-_ ](?:v?\d|\d+b\b)", model.name, maxsplit=1)[0], model.provider,
             model.endpoint_model, model.model_id}
    return {n for n in (x.strip() for x in names if x) if len(n) >= 4}


def _name_pattern(model: RegisteredModel, edge: str = r"[\w-]") -> re.Pattern | None:
    names = sorted(model_names(model), key=len, reverse=True)
    if not names:
        return None
    return re.compile(rf"(?<!{edge})(?:" + "|".join(map(re.escape, names)) + rf")(?!{edge})", re.IGNORECASE)


def mask(model: RegisteredModel, text: str) -> str:
    """`text` with every name of `model` replaced by MASK (what a hidden side shows); a name joined to
    a word by a hyphen ("harbour-7b-instruct") is masked too."""
    pattern = _name_pattern(model, edge=r"\w")
    return text if pattern is None or not text else pattern.sub(MASK, text)


def shown_so_far(model: RegisteredModel, text: str) -> str:
    """What a hidden side streams of an answer still coming: masked, and without its last unfinished
    word (a name may be only half there)."""
    cut = max(text.rfind(" "), text.rfind("\n"))
    return mask(model, text[:cut + 1] if cut >= 0 else "")


def holds(interaction: Interaction) -> bool:
    """Whether the interaction's autoEval must wait: an arena side's answer before its battle's vote
    is signed (its public event and evidence name the model)."""
    battle = interaction.conversation.battle
    return battle is not None and battle.status == Battle.Status.ANSWERING


def check_turn(conversation: Conversation, prompt: str) -> None:
    """Before the vote is final, an arena side takes one message, the battle's, the same for both sides
    (a failed or stopped answer may be asked again); ValidationError otherwise."""
    battle = battle_of(conversation) if conversation.arena else None  # as it is now, not as first read
    if battle is None or battle.revealed:
        return
    if battle.status == Battle.Status.ABANDONED:
        raise ValidationError({"prompt": ["You abandoned this battle: start a new one in the arena."]})
    if battle.status == Battle.Status.LOST:
        raise ValidationError({"prompt": ["Your vote on this battle was lost: start a new one in the arena."]})
    if battle.status != Battle.Status.ANSWERING:
        raise ValidationError({"prompt": ["Your vote is on its way to the chain: you can go on with both models "
                                          "once it is recorded there (the names are shown then)."]})
    taken = conversation.interactions.filter(status__in=[DONE, Interaction.Status.STREAMING])
    if taken.exists():
        raise ValidationError({"prompt": ["One message per battle until you have voted: say which answer is "
                                          "better first."]})
    if battle.prompt and prompt != battle.prompt:
        raise ValidationError({"prompt": ["Both models answer the same message in a battle: send the one the other "
                                          "model got."]})


def claim_prompt(conversation: Conversation, prompt: str) -> None:
    """Record the battle's one message (the first side asked sets it, atomically), or refuse another."""
    battle = conversation.battle
    if battle is None or battle.revealed:
        return
    Battle.objects.filter(pk=battle.pk, prompt="").update(prompt=prompt)
    battle.prompt = Battle.objects.filter(pk=battle.pk).values_list("prompt", flat=True).get()
    if battle.prompt != prompt:
        raise ValidationError({"prompt": ["Both models answer the same message in a battle: send the one the other "
                                          "model got."]})


# --- the vote -------------------------------------------------------------------------------------

def first_answers(battle: Battle) -> tuple[Interaction | None, Interaction | None]:
    """The answer on each side the vote is about: its first finished answer (a side has at most one
    before the vote), else its latest attempt."""
    out = []
    for c in (battle.conversation_a, battle.conversation_b):
        turns = Interaction.objects.filter(conversation=c).order_by("created_at", "pk")
        out.append(turns.filter(status=DONE).first() or turns.last())
    return tuple(out)


def ready_to_vote(battle: Battle) -> bool:
    a, b = first_answers(battle)
    return a is not None and b is not None and a.status == DONE and b.status == DONE


def names_itself(model: RegisteredModel, text: str) -> bool:
    """Whether an answer names its own model (`model_names`), as a whole word, any case."""
    pattern = _name_pattern(model)
    return pattern is not None and pattern.search(text) is not None


def _check_vote(user, battle: Battle, outcome: str) -> tuple[Interaction, Interaction]:
    if battle.user_id != getattr(user, "id", None):
        raise PermissionError("Only the person who had this battle can vote on it.")
    if battle.status == Battle.Status.ABANDONED:
        raise ValidationError({"vote": ["You abandoned this battle: it takes no vote."]})
    if battle.status == Battle.Status.LOST:
        raise ValidationError({"vote": ["Your vote on this battle was lost: it takes no vote again."]})
    if battle.status != Battle.Status.ANSWERING:
        raise ValidationError({"vote": ["You already voted on this battle: one vote per battle."]})
    if outcome not in Battle.OUTCOMES:
        raise ValidationError({"vote": [f"Choose one of: {', '.join(Battle.OUTCOMES.values())}."]})
    if not ready_to_vote(battle):
        raise ValidationError({"vote": ["Both answers must be complete before you vote."]})
    return first_answers(battle)


def signer(battle: Battle) -> str:
    """Who signs the vote: the user the oracle named for the battle's answers (their wallet, if linked
    before they were scored), else the user's address now."""
    a, _ = first_answers(battle)
    return ratings.signer_of(a) if a is not None else Profile.objects.get(user_id=battle.user_id).rating_address


def needs_wallet(battle: Battle) -> bool:
    return relay.enabled() and ratings.key_kind(signer(battle)) == "wallet"


def _payload(battle: Battle, outcome: str) -> dict:
    return outbox.check_call("vote", {"battleId": battle.battle_id, "outcome": outbox.VOTE_OUTCOMES[outcome]})


def prepare_vote(user, battle: Battle, outcome: str) -> dict:
    """What a wallet user's browser asks the wallet to sign for this vote (as for a rating)."""
    _check_vote(user, battle, outcome)
    address = signer(battle)
    request = relay.unsigned(address, "vote", _payload(battle, outcome), ratings.wallet_nonce(user, address))
    return {"address": address, "typedData": relay.message(request), "request": metatx.to_json(request)}


def vote(user, battle: Battle, outcome: str, signed_request=None) -> Battle:
    """Record the vote (once), whether it counts, and send it on its way."""
    a, b = _check_vote(user, battle, outcome)
    address = signer(battle)
    request = None
    if needs_wallet(battle):
        request = ratings.checked_request("vote", address, _payload(battle, outcome), signed_request, field="vote")
        check_deadline(request)
    named = "".join(side for side, i in zip(SIDES, (a, b)) if names_itself(i.conversation.model, i.answer))
    flagged = abandoned_recently(user) > settings.LLMCHAIN_ARENA_ABANDON_LIMIT
    updated = Battle.objects.filter(pk=battle.pk, status=Battle.Status.ANSWERING).update(
        status=Battle.Status.VOTED, outcome=outcome, self_named=named, flagged=flagged, signer=address,
        request=request, voted_at=timezone.now())
    if not updated:  # another tab voted meanwhile
        raise ValidationError({"vote": ["You already voted on this battle: one vote per battle."]})
    battle.refresh_from_db()
    # The worker releases the answers' evaluations, held until now, and sends the vote after them
    # (`advance`): a vote never waits on the chain.
    work.wake_on_commit(ratings.WORKER_CHANNEL)
    return battle


def check_deadline(request: dict) -> None:
    """Refuse a wallet's vote that would expire before the site can relay it: it goes out, with the
    battle's openBattle, only after both answers' autoEval are final (LLMCHAIN_ARENA_VOTE_MIN_DEADLINE_S)."""
    need = settings.LLMCHAIN_ARENA_VOTE_MIN_DEADLINE_S
    if metatx.from_json(request).deadline < relay.chain_now() + need:
        hours = need / 3600
        raise ValidationError({"vote": [f"Your wallet's signature must stay valid for at least "
                                        f"{hours:g} hour{'s' if hours != 1 else ''}: the vote is sent once both "
                                        "answers are recorded on the chain. Sign it again without shortening it."]})


# --- on-chain -------------------------------------------------------------------------------------

def advance(battle: Battle) -> bool:
    """Queue openBattle and the vote once both answers' autoEval calls are confirmed; False while they
    are not. Relayed (the usual case): both as requests, the oracle's and the user's, in one atomic
    group, sent in one batch that lands whole or not at all; without a forwarder, openBattle from the
    oracle and the vote after it."""
    if battle.status != Battle.Status.VOTED:
        return False
    a, b = first_answers(battle)
    autos = [ratings.auto_item(i) for i in (a, b)]
    if any(item is None or item.status != OutboxItem.Status.CONFIRMED for item in autos):
        return False
    opening = {"battleId": battle.battle_id, "interactionA": a.interaction_id, "interactionB": b.interaction_id,
               "voided": not battle.counted}
    if not relay.enabled():
        return _advance_direct(battle, opening)
    blocker = _vote_blocker(battle, autos)
    if blocker is None:
        return False  # the chain cannot be read now: next pass
    if blocker:
        Battle.objects.filter(pk=battle.pk, status=Battle.Status.VOTED).update(
            status=Battle.Status.FAILED, error=f"Your vote could not be recorded: {blocker}.")
        battle.refresh_from_db()
        return False
    oracle = oracle_address(battle.battle_id)
    together = {"relayer": relayer_address(oracle), "atomic_group": f"battle:{battle.battle_id}"}
    payload = _payload(battle, battle.outcome)
    try:
        with transaction.atomic():
            opened = outbox.enqueue_signed("openBattle", oracle, opening, **together)
            if battle.request is not None:
                voted = outbox.enqueue("vote", battle.signer, payload, request=metatx.from_json(battle.request),
                                       **together)
            else:
                voted = outbox.enqueue_signed("vote", battle.signer, payload, **together)
            Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.QUEUED, open_item=opened, vote_item=voted)
    except outbox.Unreachable:
        return False
    except outbox.InvalidCall as exc:  # a wallet's request that expired (or lost its nonce) meanwhile
        if battle.request is None:
            raise
        lose(battle, str(exc))
        return False
    battle.refresh_from_db()
    return True


def _advance_direct(battle: Battle, opening: dict) -> bool:
    """Without a forwarder: openBattle from the oracle, the user's vote from their own key after it."""
    with transaction.atomic():
        opened = outbox.enqueue("openBattle", oracle_address(battle.battle_id), opening)
        voted = outbox.enqueue("vote", battle.signer, _payload(battle, battle.outcome), depends_on=opened)
        Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.QUEUED, open_item=opened, vote_item=voted)
    battle.refresh_from_db()
    return True


def _vote_blocker(battle: Battle, autos: list[OutboxItem]) -> str | None:
    """What would make the vote revert once its battle is open (relay.vote_blocker, and both answers
    named for its signer), in words; "" when nothing does; None when the chain cannot be read."""
    if any(item.payload["user"] != battle.signer for item in autos):
        return "the answers were recorded for another address than the one that signed the vote"
    try:
        return relay.vote_blocker(battle.signer, [item.payload["modelId"] for item in autos])
    except (ChainError, ValueError):
        return None


def lose(battle: Battle, why: str) -> None:
    """End a voted battle whose signed vote cannot be used and of which nothing is on-chain: a lost
    vote, counted like an abandon; it takes no vote again."""
    Battle.objects.filter(pk=battle.pk, status__in=[Battle.Status.VOTED, Battle.Status.QUEUED]).update(
        status=Battle.Status.LOST, abandoned_at=timezone.now(), error=LOST_WORDS.format(why=why.rstrip(".")))
    battle.refresh_from_db()


def advance_waiting(limit: int = 200) -> int:
    """Move on every voted battle whose answers are on-chain now (called by the oracle's worker)."""
    moved = 0
    for battle in Battle.objects.filter(status=Battle.Status.VOTED).order_by("voted_at")[:limit]:
        moved += advance(battle)
    return moved


def refresh(battle: Battle) -> Battle:
    """The battle with its status as the outbox and the indexed chain have it now, in memory: pages
    call it and write nothing; `settle_battles` (the worker) writes it."""
    if battle.status == Battle.Status.QUEUED:
        items = [battle.open_item, battle.vote_item]
        failed = next((i for i in items if i is not None and i.status == OutboxItem.Status.FAILED), None)
        if failed is not None and _lost(battle):
            battle.status, battle.error = Battle.Status.LOST, LOST_WORDS.format(why=battle.vote_item.failure_words)
            battle.abandoned_at = battle.abandoned_at or timezone.now()
        elif failed is not None:
            battle.status, battle.error = Battle.Status.FAILED, f"Your vote could not be recorded: {failed.failure_words}."
        elif ArenaBattle.objects.filter(battle_id=battle.battle_id, outcome__isnull=False).exists():
            battle.status = Battle.Status.ONCHAIN
    return battle


def _lost(battle: Battle) -> bool:
    """Whether a queued battle's vote was lost for good with nothing of the battle on-chain: its wallet's
    request failed in a way only a new signature cures (a new, unblind vote: refused), and openBattle
    (sent only with it) is not in."""
    vote, opened = battle.vote_item, battle.open_item
    return (vote is not None and vote.needs_new_signature and battle.request is not None
            and (opened is None or opened.status != OutboxItem.Status.CONFIRMED))


def settle_battles(limit: int = 500) -> int:
    """Write what `refresh` finds for queued battles (the oracle's worker): how many changed."""
    moved = 0
    for battle in Battle.objects.filter(status=Battle.Status.QUEUED).select_related(
            "open_item", "vote_item").order_by("pk")[:limit]:
        refresh(battle)
        if battle.status != Battle.Status.QUEUED:
            moved += Battle.objects.filter(pk=battle.pk, status=Battle.Status.QUEUED).update(
                status=battle.status, error=battle.error, abandoned_at=battle.abandoned_at)
    return moved


def summary(battle: Battle) -> dict:
    """What the battle page shows about the vote: the names only once the vote is final on-chain."""
    voted = battle.status != Battle.Status.ANSWERING
    out = {"voted": voted, "status": battle.status, "outcome": Battle.OUTCOMES.get(battle.outcome, ""),
           "counted": battle.counted, "flagged": battle.flagged, "error": battle.error,
           "abandoned": battle.status == Battle.Status.ABANDONED, "revealed": battle.read_revealed(),
           "ready": ready_to_vote(battle) if not voted else True,
           "self_named": [f"model {s.upper()}" for s in battle.self_named]}
    if battle.revealed:
        out["names"] = {side: c.model.name for side, c in zip(SIDES, (battle.conversation_a, battle.conversation_b))}
        out["self_named"] = [out["names"][s] for s in battle.self_named]
        out["onchain"] = ArenaBattle.objects.filter(battle_id=battle.battle_id).first()
    return out
