"""Human evaluation (paper Sec. IV-B2, IV-C): the questionnaire under an answer, then humEval from
the user's own address and updateReputation, through the outbox."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from apps.chain import outbox
from apps.chain.client import ChainError
from apps.chain.ledger import default_ledger, deployment_lambda
from apps.chain.models import Interaction as LedgerInteraction
from apps.chain.models import OutboxItem, ReputationChange
from lib.reputation import GLOBAL_CONTEXT_ID, decay_factor, likert_ok, minutes_since

from .accounts import same_person
from .models import COMMENT_MAX, QUESTIONNAIRE, REASON_TAGS, Interaction, Rating

log = logging.getLogger(__name__)


OWN_MODEL = ("You own this model (or an account linked to yours does): ratings of one's own models are not "
             "taken, so this one was not saved. Your chats with it are still evaluated automatically.")
# Said when a second tab (or window, or device) sends a rating for an answer rated meanwhile.
ALREADY_RATED = ("This answer was already rated, perhaps in another tab or window: a rating is final, so the "
                 "one you just sent was not saved. The rating that counts is shown here.")


def check_rating(user, interaction: Interaction, answers: dict) -> dict[str, int]:
    """Authorise and validate; PermissionError or ValidationError, nothing changes."""
    if not getattr(user, "is_authenticated", False) or interaction.conversation.user_id != user.id:
        raise PermissionError("Only the person who had this conversation can rate its answers.")
    if same_person(user.id, interaction.conversation.model.owner_id):
        raise ValidationError({"form": [OWN_MODEL]})
    if interaction.status != Interaction.Status.DONE:
        raise ValidationError({"form": ["Only a finished answer can be rated."]})
    if Rating.objects.filter(interaction=interaction).exists():
        raise ValidationError({"form": [ALREADY_RATED]})
    clean, errors = {}, {}
    for field in QUESTIONNAIRE:
        raw = answers.get(field)
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = None
        if value is None or str(raw).strip() != str(value) or not likert_ok(value):
            errors[field] = ["Choose an answer from 1 to 5."]
        else:
            clean[field] = value
    tags = answers.getlist("tags") if hasattr(answers, "getlist") else answers.get("tags") or []
    allowed = dict(REASON_TAGS)
    if not isinstance(tags, list) or not all(isinstance(t, str) and t in allowed for t in tags):
        errors["tags"] = [f"Pick reasons among: {', '.join(allowed)}."]
    comment = answers.get("comment") or ""
    if not isinstance(comment, str) or len(comment) > COMMENT_MAX:
        errors["comment"] = [f"Write at most {COMMENT_MAX:,} characters."]
    if errors:
        raise ValidationError(errors)
    return {**clean, "tags": list(dict.fromkeys(tags)), "comment": comment.strip()}


def prefill(user, interaction: Interaction) -> dict[str, int]:
    """Familiarity and trust as the user last answered them: familiarity with the topic from their last
    rating in this context, trust in the model from their last rating of this model. Shown as
    prefilled; the user confirms or changes them."""
    conversation = interaction.conversation
    mine = Rating.objects.filter(user=user).order_by("-created_at", "-id")
    found = {}
    in_context = mine.filter(interaction__conversation__context_id=conversation.context_id).first()
    if in_context is not None:
        found["familiarity"] = in_context.familiarity
    of_model = mine.filter(interaction__conversation__model_id=conversation.model_id).first()
    if of_model is not None:
        found["trust"] = of_model.trust
    return found


def submit_rating(user, interaction: Interaction, answers: dict) -> Rating:
    """Save the rating and queue it on-chain now, or as soon as the interaction's autoEval is."""
    clean = check_rating(user, interaction, answers)
    try:
        with transaction.atomic():
            rating = Rating.objects.create(interaction=interaction, user=user, **clean)
            queue_rating(rating)
    except IntegrityError:  # two submissions at once: the first wins
        raise ValidationError({"form": [ALREADY_RATED]}) from None
    return rating


def queue_rating(rating: Rating) -> bool:
    """humEval (from the user's address, after autoEval), then updateReputation; False while waiting."""
    interaction = rating.interaction
    # The oracle's autoEval call, by its idempotency key: queued once the answer is scored.
    auto = OutboxItem.objects.filter(key=outbox.idempotency_key(
        "autoEval", {"interactionId": interaction.interaction_id})).first()
    if auto is None or rating.status != Rating.Status.WAITING:
        return False
    address = interaction.conversation.user.profile.address
    hum = outbox.enqueue("humEval", address, {"interactionId": interaction.interaction_id, **rating.answers()},
                         depends_on=auto)
    update = outbox.enqueue("updateReputation", address, {"interactionId": interaction.interaction_id},
                            depends_on=hum)
    Rating.objects.filter(pk=rating.pk).update(hum_item=hum, update_item=update, status=Rating.Status.QUEUED)
    rating.hum_item, rating.update_item, rating.status = hum, update, Rating.Status.QUEUED
    return True


def queue_waiting(interaction: Interaction) -> None:
    """Called by the oracle right after it queues autoEval."""
    rating = Rating.objects.filter(interaction=interaction, status=Rating.Status.WAITING).first()
    if rating is not None:
        queue_rating(rating)


def refresh(rating: Rating) -> Rating:
    """Bring the status in line with the outbox."""
    if rating.status == Rating.Status.QUEUED:
        items = [rating.hum_item, rating.update_item]
        if any(i.status == OutboxItem.Status.FAILED for i in items):
            failed = next(i for i in items if i.status == OutboxItem.Status.FAILED)
            rating.status, rating.error = Rating.Status.FAILED, f"{failed.function} refused: {failed.last_error}"
        elif all(i.status == OutboxItem.Status.CONFIRMED for i in items) and LedgerInteraction.objects.filter(
                interaction_id=rating.interaction.interaction_id).exclude(reputation_tx="").exists():
            rating.status = Rating.Status.ONCHAIN  # confirmed and indexed: the page can show the moves
        Rating.objects.filter(pk=rating.pk).update(status=rating.status, error=rating.error)
    return rating


def weight_preview(address: str) -> dict | None:
    """What D and FD a rating sent now would get (block timestamps; None if the chain is away)."""
    try:
        ledger = default_ledger()
        now = int(ledger.client.request("eth_getBlockByNumber", ["latest", False])["timestamp"], 16)
        last, = ledger.view("reputation", "lastHumanEvalAt", address)
        first = not last
        if first:
            last, = ledger.view("identity", "registeredAt", address)
        lam, _ = deployment_lambda()  # as the contract will use it (read once per deployment)
    except (ChainError, FileNotFoundError, ValueError) as exc:
        log.info("no weight preview: %s", exc)
        return None
    if not last:
        return None
    d = minutes_since(now - int(last))
    return {"minutes": d / 10**18, "fd": decay_factor(d, lam) / 10**18, "first": first,
            "full_fd": decay_factor(minutes_since(86_400), lam) / 10**18, "lambda": lam / 10**18}


def _previous(row: ReputationChange) -> ReputationChange | None:
    return ReputationChange.objects.filter(model_id=row.model_id, context_id=row.context_id).filter(
        Q(block_number__lt=row.block_number) | Q(block_number=row.block_number, log_index__lt=row.log_index)
    ).order_by("-block_number", "-log_index").first()


def what_it_did(interaction: Interaction, onchain, moves: list[dict]) -> str:
    """What a rating on-chain did, in words a newcomer understands (its weight, and how far it moved
    the model's R in the context), or "" until it is known."""
    if onchain is None or onchain.wh is None or not moves or not moves[0]["done"]:
        return ""
    weight, minutes = onchain.wh / 10**18, onchain.d_minutes / 10**18
    move = moves[0]
    before, after = move["r"]
    model = interaction.conversation.model.name
    if minutes < 60:
        why = f"it came {minutes:.0f} minutes after your previous rating, and ratings in quick succession count for less"
    else:
        why = "your familiarity, trust and certainty set it, and time since your previous rating raises it up to a day"
    moved = (f"moved {model}'s reputation R in {move['context']} from {before / 10**18:.4f} to {after / 10**18:.4f} "
             f"({(after - before) / 10**18:+.4f})" if before is not None else
             f"set {model}'s first reputation R in {move['context']} at {after / 10**18:.4f}")
    return (f"Your rating counted for {weight:.3f} of a full rating ({why}), and {moved}. Many ratings together move "
            f"R more; one rating moves it a little.")


def reputation_moves(interaction: Interaction) -> list[dict]:
    """(Ra, Rh, R) of the model in the context and globally just before this interaction's human
    evaluation and after its updateReputation, from the indexed ReputationUpdated events."""
    conv = interaction.conversation
    moves = []
    for context_id, label in ((conv.context.context_id, conv.context.name), (GLOBAL_CONTEXT_ID, "global")):
        changes = list(ReputationChange.objects.filter(interaction_id=interaction.interaction_id,
                                                       model_id=conv.model.model_id, context_id=context_id)
                       .order_by("block_number", "log_index"))
        human = [c for c in changes if c.n_human > ((p := _previous(c)) and p.n_human or 0)]
        if not human:
            continue
        before, after = _previous(human[0]), changes[-1]
        moves.append({"context": label, "human_tx": human[0].tx_hash, "update_tx": after.tx_hash,
                      "done": after.tx_hash != human[0].tx_hash,
                      **{k: (getattr(before, k) if before else None, getattr(after, k)) for k in ("ra", "rh", "r")}})
    return moves
