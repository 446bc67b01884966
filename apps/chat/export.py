"""Take your data with you: everything a user gave the site, as one JSON document.

The download holds the account (name, chain address, roles, whether it shares its prompts), every
conversation with every turn (prompt, answer, status, the turn's on-chain id and its automatic
evaluation as the oracle recorded it), every rating with its reasons and comment, and every arena vote
(a battle's models named only once its vote is final on-chain: the download would not spoil a blind
battle, nor would its answers, masked where they name their model, or their evidence). Other
people's data never appears in it.
"""

from __future__ import annotations

from django.utils import timezone

from .models import Battle, Conversation, Rating

FORMAT = "llmchain-user-export/1"


def _when(value) -> str | None:
    return value.isoformat() if value else None


def _evaluation(interaction) -> dict | None:
    job = getattr(interaction, "evaluation", None)
    if job is None:
        return None
    cid = None if interaction.conversation.name_hidden else job.evidence_cid or None
    return {"status": job.status, "sa": job.sa if job.has_reference else None, "evidence_cid": cid}


def user_data(user) -> dict:
    profile = getattr(user, "profile", None)
    conversations = (Conversation.objects.filter(user=user).select_related("model", "context")
                     .prefetch_related("interactions__evaluation").order_by("created_at", "id"))
    ratings = Rating.objects.filter(user=user).select_related("interaction").order_by("created_at", "id")
    return {
        "format": FORMAT,
        "generated_at": timezone.now().isoformat(),
        "account": {
            "username": user.username, "joined": _when(user.date_joined),
            "address": profile.address if profile else None,
            "developer": bool(profile and profile.is_developer), "expert": bool(profile and profile.is_expert),
            "shares_prompts": bool(profile and profile.share_prompts),
        },
        "conversations": [{
            "id": c.pk, "title": c.title, "model": c.model_label,
            "model_id": None if c.name_hidden else c.model.model_id,
            "context": c.context.name, "context_id": c.context.context_id, "started": _when(c.created_at),
            "turns": [{
                "id": i.pk, "interaction_id": i.interaction_id, "prompt": i.prompt, "answer": i.shown_answer,
                "status": i.status, "finish_reason": i.finish_reason or None, "asked": _when(i.created_at),
                "answered": _when(i.finished_at), "evaluation": _evaluation(i),
            } for i in sorted(c.interactions.all(), key=lambda i: (i.created_at, i.pk))],
        } for c in conversations],
        "ratings": [{
            "turn": r.interaction_id, "interaction_id": r.interaction.interaction_id, **r.answers(),
            "tags": r.tags, "comment": r.comment, "status": r.status, "rated": _when(r.created_at),
        } for r in ratings],
        "votes": [_vote(b) for b in Battle.objects.filter(user=user).select_related(
            "context", "conversation_a__model", "conversation_b__model").order_by("created_at", "id")],
    }


def _vote(battle: Battle) -> dict:
    voted = battle.status != Battle.Status.ANSWERING
    sides = {side: {"conversation": c.pk, **({"model": c.model.name, "model_id": c.model.model_id}
                                             if battle.revealed else {})}
             for side, c in (("a", battle.conversation_a), ("b", battle.conversation_b))}
    return {"battle_id": battle.battle_id, "context": battle.context.name, "context_id": battle.context.context_id,
            "started": _when(battle.created_at), "sides": sides, "vote": battle.outcome or None,
            "voted": _when(battle.voted_at), "counted": battle.counted if voted else None,
            "self_named": list(battle.self_named), "status": battle.status}
