"""A context's counted arena votes as the indexer would have written them: each battle and its two answers'
ledger rows (Sa against references, the length of the answer its evidence record holds), with the outcome
on each vote chosen by the test: whether the voted answer had the higher Sa, whether it was the longer one."""

from __future__ import annotations

import secrets

from apps.chain.models import ArenaBattle, LedgerInteraction
from lib.reputation import WAD

MODEL_A, MODEL_B = "0x" + "0a" * 32, "0x" + "0b" * 32


def _answer(context_id: str, model: str, sa: float, chars: int | None) -> str:
    iid = "0x" + secrets.token_hex(32)
    LedgerInteraction.objects.create(interaction_id=iid, model_id=model, context_id=context_id, user="0x0",
                                     has_reference=True, sa=int(sa * WAD), wa=0, evidence_cid="bafy", auto_tx="0x",
                                     auto_block=1, answer_chars=chars)
    return iid


def seed_votes(context_id: str, outcomes: list[tuple[int, int]], *, unscored: int = 0) -> list[str]:
    """One counted vote per (Sa right, longer answer right) in `outcomes`, alternately for A and for B, and
    `unscored` more votes whose loser's record is not read yet (no length); the battle ids."""
    battles = []
    for k, (sa_right, longer_right) in enumerate(outcomes + [(1, 1)] * unscored):
        voted, other = (0.8, 0.3) if sa_right else (0.3, 0.8)
        long_, short = (120, 40) if longer_right else (40, 120)
        winner = _answer(context_id, MODEL_A, voted, long_)
        loser = _answer(context_id, MODEL_B, other, None if k >= len(outcomes) else short)
        first, second, outcome = (winner, loser, 1) if k % 2 == 0 else (loser, winner, 2)
        model_a, model_b = (MODEL_A, MODEL_B) if k % 2 == 0 else (MODEL_B, MODEL_A)
        battle = "0x" + secrets.token_hex(32)
        ArenaBattle.objects.create(battle_id=battle, context_id=context_id, model_a=model_a, model_b=model_b,
                                   interaction_a=first, interaction_b=second, user="0x0", voided=False,
                                   block_number=1, tx="0x", outcome=outcome, counted=True)
        battles.append(battle)
    return battles


def mixed(both: int, score_only: int, length_only: int, neither: int) -> list[tuple[int, int]]:
    """Outcomes interleaved (not grouped), as votes come in."""
    groups = [[(1, 1)] * both, [(1, 0)] * score_only, [(0, 1)] * length_only, [(0, 0)] * neither]
    out = []
    while any(groups):
        for g in groups:
            if g:
                out.append(g.pop())
    return out
