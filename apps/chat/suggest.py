"""Suggest a context for a prompt by embedding similarity (the bundled MiniLM encoder): each
context is profiled by a few example requests and the latest prompts asked in it by people who
share their prompts (the public dataset's), never anyone else's: a score would tell how close a
guess comes to a private prompt."""

from __future__ import annotations

from functools import lru_cache

from django.db.models import Q

from apps.chain.models import Context
from lib.reputation import GLOBAL_CONTEXT_ID

from .models import Interaction

# Example requests for the MT-Bench categories (the demo contexts), in the project's own words.
EXAMPLES = {
    "writing": ["Write a blog post about a trip", "Draft a professional email", "Compose a short story or poem",
                "Rewrite this paragraph to be more persuasive"],
    "roleplay": ["Pretend to be a famous character and answer as them", "Act as a travel guide and greet me",
                 "Imagine you are a detective interviewing a witness"],
    "reasoning": ["Solve this logic puzzle step by step", "If A is taller than B and B taller than C, who is shortest?",
                  "Find the flaw in this argument"],
    "math": ["Solve the equation 3x + 5 = 20", "What is the probability of rolling two sixes?",
             "Compute the area of a triangle with these vertices"],
    "coding": ["Write a Python function that sorts a list", "Fix the bug in this JavaScript code",
               "Implement binary search in C++", "Explain what this SQL query does"],
    "extraction": ["Extract the names and dates from this text", "Return the key facts of this article as JSON",
                   "List every product and its price mentioned below"],
    "stem": ["Explain how photosynthesis works", "What causes the seasons on Earth?",
             "Describe how a transistor amplifies a signal"],
    "humanities": ["Discuss the causes of the French Revolution", "Compare two philosophers' views on ethics",
                   "What is the significance of this novel in its era?"],
}
RECENT = 20  # latest shared prompts per context added to its profile


@lru_cache(maxsize=1)
def encoder():
    from lib.embeddings import SentenceEncoder

    return SentenceEncoder()


def suggest(prompt: str, contexts: list[Context] | None = None) -> list[tuple[Context, float]]:
    """Contexts ranked by how close the prompt is to their examples (best first)."""
    prompt = (prompt or "").strip()
    contexts = contexts if contexts is not None else list(
        Context.objects.exclude(context_id=GLOBAL_CONTEXT_ID).order_by("name"))
    if not prompt or not contexts:
        return []
    # The site's own accounts (the MT-Bench replay) ask public questions.
    shared = (Q(conversation__user__profile__share_prompts=True) | Q(conversation__user__profile__is_service=True))
    texts = {}
    for c in contexts:
        recent = list(Interaction.objects.filter(shared, conversation__context=c).order_by("-id")
                      .values_list("prompt", flat=True)[:RECENT])
        texts[c.context_id] = [c.name, *EXAMPLES.get(c.name, []), *(p[:1000] for p in recent)]
    from lib.embeddings import rank

    enc = encoder()
    query, = enc.encode([prompt[:2000]])
    profiles = {cid: enc.encode(examples) for cid, examples in texts.items()}
    by_id = {c.context_id: c for c in contexts}
    return [(by_id[cid], score) for cid, score in rank(query, profiles)]
