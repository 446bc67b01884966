"""Topical-Chat USR (../shared/data/topical_chat_usr.json; Mehri & Eskenazi 2020, the copy kept in
UniEval) as meta-evaluation data: pure, the path is an argument, nothing is copied into the project.

The file holds 360 rows: 60 dialogue contexts x 6 systems. Each row has the dialogue history
(``source``), the knowledge fact the next turn should use (``context``), the system's next turn
(``system_output``), the system (``system_id``: Original Ground Truth, New Human Generated,
Argmax Decoding, Nucleus Decoding (p = 0.3/0.5/0.7)) and the mean human scores (``scores``:
understandability, naturalness, coherence, engagingness, groundedness, overall). ``scores`` may be
a dict or a string holding a Python dict (read with ast.literal_eval, never eval).

Reference for reference-based evaluators: the knowledge fact. The only reference *response* in the
data is one of the six systems (Original Ground Truth): scoring against it would hand that system
F1 = 1 and leak the label into every pair it is in; the knowledge is there for all six alike.

Pairs (`derive_pairs`): every two systems on the same context, C(6, 2) = 15 per context, 900 in
all; the higher human ``overall`` wins, equal (to 1e-6) is a tie. All 15 are kept, not a sample:
they are what system-level agreement needs (60 examples per system pair). Which system is
``answer_a`` alternates deterministically (by the parity of context number + the pair's position
within its context), so each system pair comes 30 times in either order and no system always
sits in the same slot for a position-biased judge.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

CRITERIA = ("understandability", "naturalness", "coherence", "engagingness", "groundedness", "overall")
CATEGORY = "topical-chat"  # the data has no question categories: one for all pairs
TIE_TOLERANCE = 1e-6


class TopicalChatError(ValueError):
    """An unreadable or malformed Topical-Chat file."""


@dataclass(frozen=True)
class Response:
    context_id: int  # 0..59, in order of first appearance
    system: str
    history: str
    knowledge: str
    response: str
    scores: dict[str, float]


def _scores(raw, where: str) -> dict[str, float]:
    if isinstance(raw, str):
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError) as exc:
            raise TopicalChatError(f"{where}: `scores` is not a Python dict literal: {exc}") from None
    if not isinstance(raw, dict):
        raise TopicalChatError(f"{where}: `scores` must be a dict")
    try:
        return {c: float(raw[c]) for c in CRITERIA}
    except KeyError as exc:
        raise TopicalChatError(f"{where}: `scores` lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError):
        raise TopicalChatError(f"{where}: `scores` values must be numbers") from None


def load(path: str | Path) -> list[Response]:
    """Every row of the file, contexts numbered by first appearance of their dialogue history."""
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TopicalChatError(f"no Topical-Chat file at {path}") from None
    except (OSError, ValueError) as exc:
        raise TopicalChatError(f"unreadable Topical-Chat file {path}: {exc}") from None
    if not isinstance(rows, list):
        raise TopicalChatError(f"{path}: expected a JSON array of rows")
    contexts: dict[str, int] = {}
    out = []
    for i, row in enumerate(rows):
        where = f"{path} row {i}"
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in
                                                 ("source", "context", "system_id", "system_output")):
            raise TopicalChatError(f"{where}: needs string `source`, `context`, `system_id` and `system_output`")
        context_id = contexts.setdefault(row["source"], len(contexts))
        out.append(Response(context_id, row["system_id"], row["source"], row["context"], row["system_output"],
                            _scores(row.get("scores"), where)))
    seen = set()
    for r in out:
        if (r.context_id, r.system) in seen:
            raise TopicalChatError(f"{path}: system {r.system!r} answers context {r.context_id} twice")
        seen.add((r.context_id, r.system))
    return out


def scored_items(responses: list[Response]) -> list[dict]:
    """Items for an evaluator's ``score``: ``question`` the history, ``response``, ``reference``
    the knowledge fact (see the module docstring), ``human`` the six scores."""
    return [{"id": f"tc-{r.context_id:02d}-{slug(r.system)}", "question": r.history, "response": r.response,
             "reference": r.knowledge, "system": r.system, "context_id": r.context_id, "human": r.scores}
            for r in responses]


def slug(system: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", system.lower()).strip("-")


def human_preference(score_a: float, score_b: float) -> str:
    if abs(score_a - score_b) <= TIE_TOLERANCE:
        return "tie"
    return "a" if score_a > score_b else "b"


def derive_pairs(responses: list[Response], criterion: str = "overall") -> list[dict]:
    """The pairs file's rows (see the module docstring): id, question, category, answer_a,
    answer_b, human, reference, model_a, model_b."""
    if criterion not in CRITERIA:
        raise TopicalChatError(f"unknown criterion {criterion!r}; known: {', '.join(CRITERIA)}")
    by_context: dict[int, list[Response]] = {}
    for r in responses:
        by_context.setdefault(r.context_id, []).append(r)
    pairs = []
    for context_id, group in sorted(by_context.items()):
        for k, (first, second) in enumerate(itertools.combinations(group, 2)):
            a, b = (first, second) if (context_id + k) % 2 == 0 else (second, first)
            pairs.append({
                "id": f"tc-{context_id:02d}-{slug(a.system)}-vs-{slug(b.system)}",
                "question": a.history, "category": CATEGORY,
                "answer_a": a.response, "answer_b": b.response,
                "human": human_preference(a.scores[criterion], b.scores[criterion]),
                "reference": a.knowledge, "model_a": a.system, "model_b": b.system,
            })
    return pairs
