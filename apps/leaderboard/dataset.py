"""The public dataset: prompts, answers, contexts, automatic evaluations with their
evidence CIDs, and questionnaires, from the users who agreed to share them (Profile.share_prompts),
with no account names. One JSON object per answer; a conversation is named by the on-chain id of
its first turn, which is public already.

`write_jsonl` writes the records; `write_folder` writes a folder the Hugging Face `datasets`
library loads (`load_dataset(folder)`: the data file and a dataset card whose YAML header names it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from django.utils import timezone

from apps.chain.models import ArenaBattle
from apps.chat.arena import hidden_sides
from apps.chat.models import QUESTIONNAIRE, Battle, Interaction


def shared_interactions():
    """Finished answers of conversations whose user shares their prompts (service accounts never do),
    but for arena sides whose battle's vote is not final on-chain yet (they would name the models)."""
    return (Interaction.objects.filter(status=Interaction.Status.DONE, conversation__user__profile__share_prompts=True,
                                       conversation__user__profile__is_service=False)
            .exclude(conversation__in=hidden_sides())
            .select_related("conversation__model", "conversation__context", "evaluation", "rating")
            .order_by("conversation_id", "created_at", "id"))


def records(progress: Callable[[int, int], None] | None = None, every: int = 1000) -> Iterator[dict]:
    qs = shared_interactions()
    total = qs.count()
    arena = _arena_votes()
    first_turn: dict[int, str] = {}
    turn_no: dict[int, int] = {}
    for n, i in enumerate(qs.iterator(chunk_size=500), start=1):
        c = i.conversation
        first_turn.setdefault(c.pk, i.interaction_id)
        turn_no[c.pk] = turn_no.get(c.pk, 0) + 1
        job = getattr(i, "evaluation", None)
        rating = getattr(i, "rating", None)
        yield {
            "interaction_id": i.interaction_id, "conversation": first_turn[c.pk], "turn": turn_no[c.pk],
            "context_id": c.context.context_id, "context": c.context.name,
            "model_id": c.model.model_id, "model": c.model.name, "prompt": i.prompt, "answer": i.answer,
            "finish_reason": i.finish_reason or None, "date": i.created_at.date().isoformat(),
            "sa": (int(job.sa) / 10**18 if job and job.has_reference else None),
            "has_reference": job.has_reference if job else None,
            "evidence_cid": (job.evidence_cid or None) if job else None,
            "rating": ({**rating.answers(), "tags": rating.tags} if rating else None),  # the comment stays private
            "arena": arena.get(i.pk),
        }
        if progress and (n % every == 0 or n == total):
            progress(n, total)


def _arena_votes() -> dict[int, dict]:
    """The arena vote each shared answer took part in, by interaction pk: the battle's on-chain id, the
    answer's side, the other side's answer and model, the vote (a, b, tie, bad) and whether it counts."""
    out: dict[int, dict] = {}
    final = ArenaBattle.objects.filter(outcome__isnull=False).values("battle_id")
    battles = Battle.objects.filter(battle_id__in=final).filter(
        user__profile__share_prompts=True, user__profile__is_service=False).select_related(
        "conversation_a__model", "conversation_b__model")
    for battle in battles:
        first = [c.interactions.filter(replaces=None).order_by("created_at", "pk").first()
                 for c in (battle.conversation_a, battle.conversation_b)]
        if None in first:
            continue
        for side, me, other in (("a", first[0], first[1]), ("b", first[1], first[0])):
            out[me.pk] = {"battle_id": battle.battle_id, "side": side, "opponent": other.interaction_id,
                          "opponent_model_id": other.conversation.model.model_id, "vote": battle.outcome,
                          "counted": battle.counted}
    return out


def write_jsonl(path: Path, progress=None) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for record in records(progress):
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


CARD = """---
pretty_name: LLMChain ratings and answers
language:
- en
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train.jsonl
---

# LLMChain: answers, automatic evaluations and human ratings

Exported {generated} from an LLMChain site: {count} answers by registered language models to prompts of
users who agreed to share them, in per-topic contexts, each with its automatic evaluation and, where the
user rated it, their questionnaire.

Each record: `interaction_id` (its id on the chain), `conversation` (the on-chain id of the conversation's
first turn) and `turn`, `context_id` / `context`, `model_id` / `model`, `prompt`, `answer`,
`finish_reason` (`length` when cut at the token limit), `date`, `sa` (the automatic score in [0, 1]: the
answer's calibrated BERTScore F1 against the answers of the context's best other models; null without
references), `has_reference`, `evidence_cid` (the IPFS record of the references and the score), and
`rating`: {questions} from 1 to 5, with optional reason `tags`, or null; and `arena`: for an answer given
in a blind arena battle, the battle's on-chain `battle_id`, the answer's `side` (a or b), the other side's
answer (`opponent`, its interaction id) and `opponent_model_id`, the user's `vote` (a, b, tie or bad: both
bad) and whether it is `counted` (false when an answer named its own model), else null.

No user names, chain addresses or free-text comments are included. Every evaluation and rating is also
on the chain, where anyone can check it against the site's boards.
"""


def write_folder(folder: Path, progress=None) -> int:
    count = write_jsonl(folder / "data" / "train.jsonl", progress)
    (folder / "README.md").write_text(CARD.format(
        generated=timezone.now().strftime("%Y-%m-%d %H:%M UTC"), count=count,
        questions=", ".join(f"`{q}`" for q in QUESTIONNAIRE)), encoding="utf-8")
    return count
