"""The oracle against a real chain (anvil), real replay models and the real metric."""

from __future__ import annotations


import pytest

from apps.chain import indexer, outbox
from apps.chain.demo import context_id
from apps.chain.keys import admin_address
from apps.chain.submitter import Submitter
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import RegisteredModel
from apps.chat.replay import import_mtbench
from tests.chat.factories import write_mtbench
from tests.chain.conftest import database_url, drain, ledger, ledger_node  # noqa: F401  (fixtures)
from tests.personas import user

QUESTIONS = [
    (1, "Write a short poem about the sea.", ["The sea is wide and blue, it sings to me and you.",
                                              "Waves roll on the shore, the ocean wants more.",
                                              "Salt and foam and wind, the tide will rise again.",
                                              "Blue water, endless sky, the gulls go flying by."]),
    (2, "Describe a sunrise in two sentences.", ["The sun rises slowly over the hills. Golden light fills the valley.",
                                                 "Dawn breaks with pink and orange skies. The day begins in warmth.",
                                                 "Light spills across the horizon. Birds wake and start to sing.",
                                                 "Morning arrives in soft colours. The world slowly wakes up."]),
    (3, "Give three tips for writing clearly.", ["Use short sentences. Prefer plain words. Cut what is not needed.",
                                                 "Know your reader. Say one thing per sentence. Edit twice.",
                                                 "Be concrete. Avoid jargon. Read your text aloud.",
                                                 "Outline first, write simply, and revise ruthlessly."]),
]
MODELS = ["alpha-7b", "beta-13b", "gamma-3b", "delta-30b"]


@pytest.fixture
def replay_world(ledger, settings, tmp_path):  # noqa: F811
    """Four replay models in a `writing` context on-chain, and alice registered."""
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    root = write_mtbench(tmp_path / "mt_bench", {q: ("writing", [text, "Now shorter."]) for q, text, _ in QUESTIONS},
                         {name: {q: [answers[m], "Short."] for q, _, answers in QUESTIONS}
                          for m, name in enumerate(MODELS)})
    outbox.enqueue("addContext", admin_address(), {"contextId": context_id("writing"), "name": "writing"})
    submitter = Submitter(ledger)
    drain(submitter)
    indexer.index_until_head(ledger)
    from apps.chain.models import Context
    writing = Context.objects.get(context_id=context_id("writing"))
    import_mtbench(root, contexts=[writing], progress=lambda _: None)
    alice = user()
    drain(submitter)
    indexer.index_until_head(ledger)
    return {"ledger": ledger, "submitter": submitter, "writing": writing, "alice": alice, "root": root,
            "models": {m.name: m for m in RegisteredModel.objects.all()}}


def chat(world, model_name: str, prompts: list[str]):
    """alice asks `model_name` each prompt; the answers are the recorded ones (as the socket would save)."""
    from apps.chat.providers import find_replay
    model = world["models"][model_name]
    conv = start_conversation(world["alice"], model, world["writing"])
    interactions = []
    for prompt in prompts:
        i = begin_interaction(world["alice"], conv, prompt)
        finish_interaction(i, find_replay(model.pk, [{"role": "user", "content": prompt}]) or "")
        interactions.append(i)
    return interactions
