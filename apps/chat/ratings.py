"""Human evaluation (paper Sec. IV-B2, IV-C): the questionnaire under an answer, then humEval from
the user's own address and updateReputation, through the outbox."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Q, Subquery

from apps.chain import metatx, outbox, relay, work
from apps.chain.client import ChainError
from apps.chain.health import chain_now
from apps.chain.keys import relayer_address
from apps.chain.ledger import deployment_lambda
from apps.chain.models import LedgerInteraction, OutboxItem, Registration, ReputationChange, SigningKey
from lib.reputation import GLOBAL_CONTEXT_ID, decay_factor, likert_ok, minutes_since

from .accounts import same_person
from .models import COMMENT_MAX, QUESTIONNAIRE, REASON_TAGS, Interaction, Profile, Rating

log = logging.getLogger(__name__)


OWN_MODEL = ("You own this model (or an account linked to yours does): ratings of one's own models are not "
             "taken, so this one was not saved. Your chats with it are still evaluated automatically.")
# Said when a second tab (or window, or device) sends a rating for an answer rated meanwhile.
ALREADY_RATED = ("This answer was already rated, perhaps in another tab or window: a rating is final, so the "
                 "one you just sent was not saved. The rating that counts is shown here.")


BATTLE_NOT_FINAL = ("The answers of an arena battle can be rated once your vote is recorded on the chain (the names "
                    "are shown then).")


def check_rating(user, interaction: Interaction, answers: dict) -> dict[str, int]:
    """Authorise and validate; PermissionError or ValidationError, nothing changes."""
    if not getattr(user, "is_authenticated", False) or interaction.conversation.user_id != user.id:
        raise PermissionError("Only the person who had this conversation can rate its answers.")
    if interaction.conversation.name_hidden:
        raise ValidationError({"form": [BATTLE_NOT_FINAL]})
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


WALLET_NEEDED = ("Your wallet signs this in your browser: allow this page's script and your wallet, then send it "
                 "again.")
F = OutboxItem.Failure


def _cannot_use_signature(why: str) -> str:
    return f"Your wallet's signature could not be used ({why}): sign the rating again."
# The oracle's worker queues saved ratings and votes (apps/oracle/worker.py): woken when one is saved.
WORKER_CHANNEL = "oracle-jobs"


def auto_item(interaction: Interaction) -> OutboxItem | None:
    """The oracle's autoEval call, by its idempotency key: queued once the answer is scored."""
    return outbox.item_for("autoEval", {"interactionId": interaction.interaction_id})


def signer_of(interaction: Interaction) -> str:
    """Who signs the rating: the user the oracle named on-chain (or will name, from the profile)."""
    auto = auto_item(interaction)
    if auto is not None:
        return auto.payload["user"]
    return Profile.objects.get(user_id=interaction.conversation.user_id).rating_address  # as linked now


def key_kind(address: str) -> str:
    """"site" when the site holds the address's key (custodial), "wallet" when only its owner does."""
    return "site" if relay.is_custodial(address) else "wallet"


def needs_wallet(interaction: Interaction) -> bool:
    """Whether the rating must be signed in the browser: relayed ratings of an address whose key the
    site does not hold."""
    return relay.enabled() and key_kind(signer_of(interaction)) == "wallet"


def wallet_nonce(user, signer: str) -> int:
    """The wallet's next forwarder nonce, counting requests it signed for ratings and arena votes not
    queued yet."""
    from .models import Battle

    waiting = [r["nonce"] for r in Rating.objects.filter(user=user, signer=signer, status=Rating.Status.WAITING)
               .exclude(request=None).values_list("request", flat=True)]
    waiting += [r["nonce"] for r in Battle.objects.filter(user=user, signer=signer, status=Battle.Status.VOTED)
                .exclude(request=None).values_list("request", flat=True)]
    return max([relay.next_nonce(signer, read_chain=True), *(n + 1 for n in waiting)])


def prepare(user, interaction: Interaction, answers: dict) -> dict:
    """What a wallet user's browser asks the wallet to sign for this rating: the typed data of the
    humEval request (eth_signTypedData_v4) and the request itself. ValidationError as for sending."""
    clean = check_rating(user, interaction, answers)
    signer = signer_of(interaction)
    payload = outbox.check_call("humEval", {"interactionId": interaction.interaction_id,
                                            **{f: clean[f] for f in QUESTIONNAIRE}})
    try:
        request = relay.unsigned(signer, "humEval", payload, wallet_nonce(user, signer))
    except (ChainError, ValueError) as exc:
        log.info("cannot prepare a wallet rating: %s", exc)
        raise ValidationError({"form": ["The chain cannot be reached to prepare your signature: try again in a "
                                        "moment."]}) from exc
    return {"address": signer, "typedData": relay.message(request), "request": metatx.to_json(request)}


def checked_request(function: str, signer: str, payload: dict, raw, field: str = "form") -> dict:
    """The wallet-signed request sent with a form (JSON), checked against this very call (a rating's
    humEval, an arena vote): ValidationError on `field` when it is missing, unreadable or not right."""
    if not raw:
        raise ValidationError({field: [WALLET_NEEDED]})
    try:
        request = metatx.from_json(json.loads(raw) if isinstance(raw, str) else raw)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValidationError({field: ["The signed request could not be read: send it again."]}) from exc
    try:
        outbox.check_request(function, signer, payload, request)
    except outbox.InvalidCall as exc:
        raise ValidationError({field: [f"Your wallet's signature was not accepted: {exc}."]}) from exc
    return metatx.to_json(request)


def _signed_request(interaction: Interaction, signer: str, clean: dict, raw) -> dict:
    """The wallet-signed request sent with the rating form, checked against this very rating."""
    payload = outbox.check_call("humEval", {"interactionId": interaction.interaction_id,
                                            **{f: clean[f] for f in QUESTIONNAIRE}})
    return checked_request("humEval", signer, payload, raw)


def submit_rating(user, interaction: Interaction, answers: dict) -> Rating:
    """Save the rating, and only that: the oracle's worker queues it on-chain (`queue_waiting_ratings`)
    as soon as the interaction's autoEval is, so that sending a rating never waits on the chain
    (signing a relayed request reads the forwarder's nonce and the chain's clock). A wallet user's
    rating comes with the request their wallet signed (`signed_request`)."""
    clean = check_rating(user, interaction, answers)
    signer = signer_of(interaction)
    request = _signed_request(interaction, signer, clean, answers.get("signed_request")) if needs_wallet(
        interaction) else None
    try:
        with transaction.atomic():
            rating = Rating.objects.create(interaction=interaction, user=user, signer=signer, request=request,
                                           **clean)
            work.wake_on_commit(WORKER_CHANNEL)
    except IntegrityError:  # two submissions at once: the first wins
        raise ValidationError({"form": [ALREADY_RATED]}) from None
    return rating


def queue_rating(rating: Rating) -> bool:
    """humEval (signed by the interaction's user, after autoEval), then updateReputation; False while
    waiting. Relayed (the default with a forwarder): the request is signed with the key the site holds
    for a custodial user, or is the one a wallet user's wallet signed, and the relayer sends it and
    updateReputation, in batches. Direct otherwise: both from the user's address."""
    interaction = rating.interaction
    auto = auto_item(interaction)
    if auto is None or rating.status != Rating.Status.WAITING:
        return False
    address = auto.payload["user"]
    payload = {"interactionId": interaction.interaction_id, **rating.answers()}
    if rating.request is not None:
        try:
            hum = outbox.enqueue("humEval", address, payload, depends_on=auto,
                                 request=metatx.from_json(rating.request))
        except outbox.InvalidCall as exc:  # expired while the answer was scored, or its nonce taken
            rating.status, rating.error = Rating.Status.FAILED, _cannot_use_signature(str(exc))
            rating.failure = F.NONCE_USED if isinstance(exc, outbox.NonceTaken) else F.UNUSABLE
            Rating.objects.filter(pk=rating.pk).update(status=rating.status, error=rating.error, failure=rating.failure)
            return False
        sender = relayer_address(address)
    elif relay.enabled():
        # Signed with the key the site holds for the user (off-chain, no gas), relayed in a batch;
        # updateReputation, open to anyone, is the relayer's, batched too.
        hum = outbox.enqueue_signed("humEval", address, payload, depends_on=auto)
        sender = relayer_address(address)
    else:
        hum = outbox.enqueue("humEval", address, payload, depends_on=auto)
        sender = address
    update = outbox.enqueue("updateReputation", sender, {"interactionId": interaction.interaction_id},
                            depends_on=hum)
    Rating.objects.filter(pk=rating.pk).update(hum_item=hum, update_item=update, status=Rating.Status.QUEUED)
    rating.hum_item, rating.update_item, rating.status = hum, update, Rating.Status.QUEUED
    return True


def can_sign_again(rating: Rating, kind: str | None = None) -> bool:
    """A wallet user's rating whose signed request could not be relayed (it expired, or its nonce was
    used): the wallet may sign it again (`kind`: the signer's key kind, when known)."""
    return rating.status == Rating.Status.FAILED and rating.failure in OutboxItem.CURED_BY_SIGNING and (
        kind or key_kind(rating.signer or signer_of(rating.interaction))) == "wallet"


def prepare_again(user, rating: Rating) -> dict:
    if rating.user_id != user.id or not can_sign_again(rating):
        raise ValidationError({"form": ["This rating cannot be signed again."]})
    signer = rating.signer
    payload = outbox.check_call("humEval", {"interactionId": rating.interaction.interaction_id, **rating.answers()})
    request = relay.unsigned(signer, "humEval", payload, wallet_nonce(user, signer))
    return {"address": signer, "typedData": relay.message(request), "request": metatx.to_json(request)}


def sign_again(user, rating: Rating, raw) -> Rating:
    """Put a wallet user's newly signed request in place of the one that could not be relayed, and send
    it (with its updateReputation) again."""
    if rating.user_id != user.id or not can_sign_again(rating):
        raise ValidationError({"form": ["This rating cannot be signed again."]})
    request = _signed_request(rating.interaction, rating.signer, rating.answers(), raw)
    with transaction.atomic():
        if rating.hum_item_id is None:
            Rating.objects.filter(pk=rating.pk).update(request=request, status=Rating.Status.WAITING, error="",
                                                       failure="")
            rating.refresh_from_db()
            queue_rating(rating)
        else:
            fresh = metatx.from_json(request)
            try:
                with transaction.atomic():
                    OutboxItem.objects.filter(pk=rating.hum_item_id, status=OutboxItem.Status.FAILED).update(
                        status=OutboxItem.Status.PENDING, request=request, relay_nonce=fresh.nonce, attempts=0,
                        failure="", last_error="", transaction=None)
            except IntegrityError as exc:
                raise ValidationError({"form": ["Another signed rating holds this nonce: sign again."]}) from exc
            OutboxItem.objects.filter(pk=rating.update_item_id, status=OutboxItem.Status.FAILED).update(
                status=OutboxItem.Status.PENDING, attempts=0, failure="", last_error="")
            Rating.objects.filter(pk=rating.pk).update(request=request, status=Rating.Status.QUEUED, error="",
                                                       failure="")
    rating.refresh_from_db()
    return rating


def queue_waiting(interaction: Interaction) -> None:
    """Called by the oracle right after it queues autoEval."""
    rating = Rating.objects.filter(interaction=interaction, status=Rating.Status.WAITING).first()
    if rating is not None:
        queue_rating(rating)


def refresh(rating: Rating, indexed: Mapping[str, LedgerInteraction] | None = None) -> Rating:
    """The rating with its status as the outbox and the indexed chain have it now, in memory: pages
    call it and write nothing; `settle_ratings` (the worker) writes it. `indexed`: the indexed rows of
    a page's (or a batch's) interactions by interaction id, read once for all of them
    (`TurnFacts.onchain`); without it, this rating's row is read when it is needed."""
    if rating.status == Rating.Status.QUEUED:
        items = [rating.hum_item, rating.update_item]
        if any(i.status == OutboxItem.Status.FAILED for i in items):
            failed = next(i for i in items if i.status == OutboxItem.Status.FAILED)
            rating.status, rating.failure = Rating.Status.FAILED, failed.failure
            if failed is rating.hum_item and failed.needs_new_signature:
                rating.error = _cannot_use_signature(failed.failure_words)
            else:
                rating.error = f"Your rating could not be recorded on the chain: {failed.failure_words}."
        elif all(i.status == OutboxItem.Status.CONFIRMED for i in items) and _reputation_indexed(rating, indexed):
            rating.status = Rating.Status.ONCHAIN  # confirmed and indexed: the page can show the moves
    return rating


def _reputation_indexed(rating: Rating, indexed: Mapping[str, LedgerInteraction] | None) -> bool:
    """Whether the indexer has seen the rating's updateReputation."""
    interaction_id = rating.interaction.interaction_id
    if indexed is None:
        return LedgerInteraction.objects.filter(interaction_id=interaction_id).exclude(reputation_tx="").exists()
    row = indexed.get(interaction_id)
    return row is not None and bool(row.reputation_tx)


def queue_waiting_ratings(limit: int = 200) -> int:
    """Queue every saved rating whose interaction's autoEval is queued now (the oracle's worker, on
    every pass): how many went out."""
    moved = 0
    for rating in Rating.objects.filter(status=Rating.Status.WAITING).select_related(
            "interaction").order_by("pk")[:limit]:
        try:
            with transaction.atomic():
                moved += queue_rating(rating)
        except ChainError as exc:  # signing reads the chain: the rating waits for the next pass
            log.info("rating %s waits for the chain: %s", rating.pk, exc)
    return moved


def settle_ratings(limit: int = 500) -> int:
    """Write what `refresh` finds for queued ratings (the oracle's worker, on every pass): how many
    changed."""
    moved = 0
    done = Q(hum_item__status=OutboxItem.Status.FAILED) | Q(
        update_item__status__in=[OutboxItem.Status.FAILED, OutboxItem.Status.CONFIRMED])
    batch = list(Rating.objects.filter(done, status=Rating.Status.QUEUED).select_related(
        "interaction", "hum_item", "update_item").order_by("pk")[:limit])
    indexed = {row.interaction_id: row for row in LedgerInteraction.objects.filter(
        interaction_id__in=[r.interaction.interaction_id for r in batch]).exclude(reputation_tx="")}
    for rating in batch:
        refresh(rating, indexed)
        if rating.status != Rating.Status.QUEUED:
            moved += Rating.objects.filter(pk=rating.pk, status=Rating.Status.QUEUED).update(
                status=rating.status, error=rating.error, failure=rating.failure)
    return moved


def weight_preview(address: str) -> dict | None:
    """What D and FD a rating sent now would get, from the indexed tables (the previous rating's block
    time, or the registration's) and the chain's clock as last probed: no call to the node. None
    before the address is registered on-chain."""
    previous = (LedgerInteraction.objects.filter(user__iexact=address).exclude(human_tx="")
                .order_by("-human_block").values_list("human_tx", flat=True).first())
    last = None
    if previous:
        last = ReputationChange.objects.filter(tx_hash=previous).values_list("timestamp", flat=True).first()
    first = not previous
    if first:
        last = Registration.objects.filter(address__iexact=address).values_list("registered_at", flat=True).first()
    if not last:
        return None
    lam, _ = deployment_lambda()  # as the contract will use it (read once per deployment)
    d = minutes_since(max(chain_now() - int(last), 0))
    return {"minutes": d / 10**18, "fd": decay_factor(d, lam) / 10**18, "first": first,
            "full_fd": decay_factor(minutes_since(86_400), lam) / 10**18, "lambda": lam / 10**18}


def move_parts(onchain, before: int, after: int) -> tuple[float, float]:
    """(the rating's part, the automatic score's part) of a move of R from `before` to `after` (1e18).
    updateReputation moves R towards S = 2/3 * S_h + 1/3 * S_a (S_h alone without an automatic score), so
    the move splits as the two terms of S - R = 2/3 * (S_h - R) + 1/3 * (S_a - R) do; the parts add up to
    the move."""
    move = (after - before) / 10**18
    if not getattr(onchain, "has_reference", False) or onchain.sh is None:
        return move, 0.0
    r, sh, sa = before / 10**18, int(onchain.sh) / 10**18, int(onchain.sa) / 10**18
    rating, auto = 2 * (sh - r), sa - r
    if rating + auto == 0:
        return 0.0, 0.0
    return move * rating / (rating + auto), move * auto / (rating + auto)


def what_it_did(interaction: Interaction, onchain, moves: list[dict], first: bool = False) -> str:
    """What a rating on-chain did, in words a newcomer understands: its weight, how far the model's
    reputation in the context moved, and how much of that move came from the rating and how much from
    the automatic score that was folded in with it; "" until it is known."""
    if onchain is None or onchain.wh is None or not moves or not moves[0]["done"]:
        return ""
    weight, minutes = onchain.wh / 10**18, onchain.d_minutes / 10**18
    move = moves[0]
    before, after = move["r"]
    model = interaction.conversation.model.name
    if first and minutes < LedgerInteraction.QUICK_SUCCESSION_MINUTES:
        why = (f"it is your first, {minutes:.0f} minutes after you signed up, and a rating this soon after "
               f"signing up counts for less, as do ratings close together")
    elif minutes < LedgerInteraction.QUICK_SUCCESSION_MINUTES:
        why = f"it came {minutes:.0f} minutes after your previous rating, and ratings close together count for less"
    else:
        since = "you signed up" if first else "your previous rating"
        why = f"your familiarity, trust and certainty set it, and time since {since} raises it up to a day"
    if before is None:
        moved = f"set {model}'s first reputation in {move['context']} at {after / 10**18:.4f}"
        credit = ""
    elif round(abs(after - before) / 10**18, 4) == 0:  # a split of a move too small to show says nothing
        moved = (f"left {model}'s reputation in {move['context']} at {after / 10**18:.4f}: a rating of this weight "
                 f"moves it by less than 0.0001")
        credit = ""
    else:
        moved = (f"moved {model}'s reputation in {move['context']} from {before / 10**18:.4f} to "
                 f"{after / 10**18:.4f} ({(after - before) / 10**18:+.4f})")
        rating_part, auto_part = move_parts(onchain, before, after)
        credit = (": all of it from your rating (this answer has no automatic score)"
                  if not getattr(onchain, "has_reference", False) else
                  f": {rating_part:+.4f} from your rating and {auto_part:+.4f} from the automatic score, which "
                  f"compares the answer with other models' answers and is counted in when someone rates")
    return f"Your rating counted for {weight:.3f} of a full rating ({why}). It {moved}{credit}."


def reputation_moves(interaction: Interaction) -> list[dict]:
    """(Ra, Rh, R) of the model in the context and globally just before this interaction's human
    evaluation and after its updateReputation, from the indexed ReputationUpdated events."""
    return moves_of([interaction]).get(interaction.interaction_id, [])


def moves_of(interactions: list[Interaction]) -> dict[str, list[dict]]:
    """`reputation_moves` of interactions of one conversation, in one query: each indexed change comes
    with the one before it of the same model and context (a correlated subquery), so that a page
    costs the same whatever its number of rated turns."""
    if not interactions:
        return {}
    conv = interactions[0].conversation
    labels = {conv.context.context_id: conv.context.name, GLOBAL_CONTEXT_ID: "global"}
    earlier = ReputationChange.objects.filter(model_id=OuterRef("model_id"), context_id=OuterRef("context_id")).filter(
        Q(block_number__lt=OuterRef("block_number"))
        | Q(block_number=OuterRef("block_number"), log_index__lt=OuterRef("log_index"))
    ).order_by("-block_number", "-log_index")
    rows = (ReputationChange.objects.filter(interaction_id__in=[i.interaction_id for i in interactions],
                                            model_id=conv.model.model_id, context_id__in=list(labels))
            .annotate(**{f"prev_{k}": Subquery(earlier.values(k)[:1]) for k in ("n_human", "ra", "rh", "r")})
            .order_by("block_number", "log_index"))
    grouped: dict[tuple[str, str], list] = {}
    for row in rows:
        grouped.setdefault((row.interaction_id, row.context_id), []).append(row)
    out: dict[str, list[dict]] = {}
    for i in interactions:
        for context_id, label in labels.items():
            changes = grouped.get((i.interaction_id, context_id), [])
            human = [c for c in changes if c.n_human > (c.prev_n_human or 0)]
            if not human:
                continue
            first, after = human[0], changes[-1]
            out.setdefault(i.interaction_id, []).append({
                "context": label, "human_tx": first.tx_hash, "update_tx": after.tx_hash,
                "done": after.tx_hash != first.tx_hash,
                **{k: (getattr(first, f"prev_{k}"), getattr(after, k)) for k in ("ra", "rh", "r")}})
    return out


@dataclass
class TurnFacts:
    """What the rating boxes of a conversation's turns need, read once for the whole page."""

    onchain: dict[str, LedgerInteraction]  # interaction id -> its indexed row
    autos: dict[str, OutboxItem]  # interaction id -> its autoEval item
    custodial: set[str]  # addresses whose key the site holds
    address: str  # the conversation user's rating address now
    prefill: dict[str, int]
    moves: dict[str, list[dict]]
    firsts: set[str] = dataclasses.field(default_factory=set)  # interaction ids rated first by their rater on-chain

    def signer_of(self, interaction: Interaction) -> str:
        auto = self.autos.get(interaction.interaction_id)
        return auto.payload["user"] if auto is not None else self.address

    def key_kind(self, address: str) -> str:
        return "site" if address in self.custodial else "wallet"


def turn_facts(interactions: list[Interaction]) -> TurnFacts:
    """`TurnFacts` of interactions of one conversation, in a fixed number of queries."""
    interactions = list(interactions)
    if not interactions:
        return TurnFacts({}, {}, set(), "", {}, {})
    conv = interactions[0].conversation
    ids = [i.interaction_id for i in interactions]
    keys = {outbox.idempotency_key("autoEval", {"interactionId": iid}): iid for iid in ids}
    autos = {keys[item.key]: item for item in OutboxItem.objects.filter(key__in=list(keys))}
    profile = Profile.objects.filter(user_id=conv.user_id).first()
    address = profile.rating_address if profile else ""
    rated = [i for i in interactions if getattr(i, "rating", None) is not None]
    signers = {a.payload["user"] for a in autos.values()} | {address} | {i.rating.signer for i in rated}
    onchain_rows = {row.interaction_id: row for row in LedgerInteraction.objects.filter(interaction_id__in=ids)}
    return TurnFacts(
        onchain=onchain_rows,
        autos=autos, custodial=set(SigningKey.objects.filter(address__in=signers).values_list("address", flat=True)),
        address=address,
        prefill=prefill(conv.user, interactions[0]) if len(rated) < len(interactions) else {},
        moves=moves_of(rated), firsts=LedgerInteraction.first_ratings(onchain_rows))
