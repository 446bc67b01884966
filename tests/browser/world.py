"""A site with something on every page, for the layout and accessibility tests: a board with a dozen
models (long names; nine ranked, with ties, three not) in a context and globally, a conversation with a Markdown answer holding code and
a table, an evidence record, a registered model, and an expert's queue item with a long debate."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from apps.chain.demo import context_id
from apps.chain.evidence import default_store
from apps.chat.conversations import start_conversation
from apps.chat.models import Interaction, RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.leaderboard import entries
from apps.leaderboard.models import BoardEntry
from lib import records
from tests.annotate.queue_factories import disagreement
from tests.personas import developer, expert, user

WAD = 10**18
GLOBAL = "0x" + "00" * 32
ANSWER = """Here is a **short** plan, then the code:

1. Read the file.
2. Count the words.

```python
from collections import Counter

def top_words(path, n=10):
    with open(path, encoding="utf-8") as f:
        return Counter(f.read().split()).most_common(n)
```

| step | cost |
| --- | --- |
| read | O(n) |
| count | O(n) |
"""
LONG_REASONING = "\n\n".join(f"Point {k}: submission 1 names the edge case; submission 2 does not. " * 3
                             for k in range(1, 9))


@dataclass
class World:
    context: str
    model_id: str
    conversation: int
    evidence: str
    registered: int
    item: int

    def pages(self) -> dict[str, list[tuple[str, str]]]:
        """(name, path) of every page, by who opens it."""
        return {
            "anonymous": [("board", "/"), ("board-context", f"/?context={self.context}"), ("models", "/models/"),
                          ("model", f"/models/{self.registered}/"), ("reputation", f"/reputation/{self.model_id}/"),
                          ("evidence", f"/evidence/{self.evidence}/"), ("verify", "/verify/"), ("how", "/how/"),
                          ("metaeval", "/metaeval/"), ("report", "/annotate/report/"), ("login", "/login/"),
                          ("signup", "/signup/"), ("missing", "/no-such-page/")],
            "alice": [("chat", "/chat/"), ("conversation", f"/chat/{self.conversation}/"), ("account", "/account/"),
                      ("arena", "/arena/"),
                      ("delete", f"/chat/{self.conversation}/delete")],
            "dave": [("model-form", "/models/new")],
            "erin": [("queue", "/annotate/")],
        }


# Words no page people read may show: the contracts' function and event names, the formulas' symbols,
# an encoder's name, a repository path, a method's name or an error's insides. /how/ explains the
# symbols and names the method (SYMBOLS), so there only the others are refused.
SYMBOLS = ("S_h", "w_h", "F_D", "λ", "Bradley", "lambdaWad")
EVENTS = ("HumanEvaluated", "AutoEvaluated", "ReputationUpdated", "BattleOpened", "Voted event", "ModelAdded")
JARGON = ("humEval", "autoEval", "updateReputation", "addModel", "addContext", "openBattle", "updateModelMetadata",
          "grantRole", "MiniLM", "encoder", "docs/", ".md ", "Traceback", "Exception", "errno", "None)")


def jargon_on(page, name: str) -> list[str]:
    """The refused words in the text of the page's main part (folded parts included: a click opens them)."""
    text = page.locator("main").text_content() or ""
    words = JARGON + EVENTS + (() if name == "how" else SYMBOLS)
    return [f"{name} ({page.url}): {word!r} in …{text[max(0, text.index(word) - 60):text.index(word) + 40]!r}…"
            for word in words if word in text]


def build(tmp_path) -> World:
    writing = context_id("writing")
    names = [f"{'very-long-model-name-' if k % 3 == 0 else ''}model-{k:02d}-7b-instruct" for k in range(12)]
    for k, name in enumerate(names):
        model_id = "0x" + f"{k + 1:02x}" * 32
        for ctx in (writing, GLOBAL):
            # Rated three times or more (k >= 3): ranked, with a band around R; neighbours' bands overlap.
            band = {"band_lo": (50 + k) / 100 - 0.015, "band_hi": (50 + k) / 100 + 0.015, "band_n": k} if k >= 3 else {}
            BoardEntry.objects.create(model_id=model_id, context_id=ctx, name=name, ra=(40 + k) * WAD // 100,
                                      rh=(60 - k) * WAD // 100, r=(50 + k) * WAD // 100, n_auto=5 + k, n_human=k,
                                      block_number=3, **band)
    entries.bump(None)

    dave = developer("dave")
    registered = register_model(dave, ModelFields(
        name="lighthouse-3b", provider="Dave's lab", endpoint_url="http://127.0.0.1:9/v1", endpoint_model="lh",
        description="A model for **tests**.", contexts=(writing,)))
    RegisteredModel.objects.filter(pk=registered.pk).update(healthy=True)

    alice = user("alice")
    from apps.chain.models import Context
    conversation = start_conversation(alice, registered, Context.objects.get(context_id=writing),
                                      "Counting words in a file")
    Interaction.objects.create(conversation=conversation, prompt="How do I count the words in a file?",
                               answer=ANSWER, status=Interaction.Status.DONE,
                               interaction_id="0x" + secrets.token_hex(32))

    evidence = default_store().put(records.canonical(records.interaction_evidence(
        interaction_id="0x" + "44" * 32, context_id=writing, context_name="writing", prompt="Count the words",
        model_id="0x" + "01" * 32, answer=ANSWER, references=[{"model": "0x" + "02" * 32, "text": ANSWER,
                                                                 "score": 625 * 10**15}],
        metric={"name": "bertscore-f1", "params": {"layers": "6"}}, sa=625 * 10**15, wa=5 * 10**17)))

    expert("erin")
    item = disagreement(1, reasoning=LONG_REASONING)
    return World(context=writing, model_id="0x" + "01" * 32, conversation=conversation.pk, evidence=evidence,
                 registered=registered.pk, item=item.pk)


def with_arena(world: World) -> World:
    """Arena columns on the world's boards, as counted votes leave them: eight of the twelve models with an
    Elo and its interval (one from a single vote, so without one), the others never in a battle."""
    from apps.leaderboard.models import ArenaBoard, ArenaEntry

    voted = [k for k in range(12) if k % 3 != 2][:8]
    for ctx in (world.context, GLOBAL):
        lines = []
        for place, k in enumerate(sorted(voted, key=lambda k: -k)):
            battles = 1 if place == len(voted) - 1 else 6 + 3 * k
            elo = 1180 - 35 * place
            spread = 0 if battles == 1 else 420 / battles ** 0.5
            wins = round(battles * (0.7 - 0.05 * place))
            lines.append(ArenaEntry(model_id="0x" + f"{k + 1:02x}" * 32, context_id=ctx, elo=elo,
                                    ci_low=elo - spread, ci_high=elo + spread, rank=1 + place // 2, battles=battles,
                                    wins=wins, ties=0, losses=battles - wins, win_rate=wins / battles,
                                    style_elo=elo - 10, style_ci_low=elo - 10 - spread, style_ci_high=elo - 10 + spread,
                                    style_rank=1 + place // 2))
        ArenaEntry.objects.bulk_create(lines)
        ranking = [line.model_id for line in lines]
        ArenaBoard.objects.create(context_id=ctx, generation=1, computed_generation=1, votes=63, style_votes=60,
                                  last_vote_block=3, seed=7, bootstrap=200, style_bootstrap=100, ranking=ranking,
                                  win_rates=[[None if a == b else 0.5 + (b - a) / 20 for b in range(len(ranking))]
                                             for a in range(len(ranking))],
                                  coefficients=[{"feature": "length", "value": 0.21, "ci_low": 0.05, "ci_high": 0.38},
                                                {"feature": "markdown", "value": 0.04, "ci_low": -0.1,
                                                 "ci_high": 0.17}])
    entries.bump(None)
    return world


def log_in(page, who: str) -> None:
    """Log `who` in through the login page, as a person does."""
    from tests.personas import PASSWORD

    page.goto("/login/")
    page.get_by_label("User name").fill(who)
    page.get_by_label("Password").fill(PASSWORD)
    page.locator("main").get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)
