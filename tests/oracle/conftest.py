"""The oracle against a real chain (anvil), real replay models and the real metric."""

from __future__ import annotations


import pytest

from apps.annotate.models import Qualification
from apps.chain import indexer, outbox
from apps.chain.demo import context_id
from apps.chain.evidence import default_store
from apps.chain.keys import admin_address
from apps.chain.models import LedgerInteraction
from apps.chain.submitter import Submitter
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import RegisteredModel
from apps.chat.replay import import_mtbench
from apps.oracle import jobs
from apps.oracle.models import EvaluationJob
from lib import records
from lib.weighting import qualification_record
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


@pytest.fixture(scope="module")
def metric():
    """The oracle's metric (real BERTScore), loaded once per module that asks for it."""
    from apps.oracle.worker import load_metric

    return load_metric()


@pytest.fixture(scope="module")
def module_ipfs(tmp_path_factory):
    return tmp_path_factory.mktemp("ipfs")


@pytest.fixture
def world(replay_world, settings, module_ipfs):
    """The replay world with one IPFS folder for the module, as the chain is one for the module: the
    audit of a later test reads the evidence and qualifications of the earlier ones too (a module with a
    world of its own, as test_debates, defines it)."""
    settings.LLMCHAIN_IPFS_DIR = module_ipfs
    return replay_world


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


def with_references() -> int:
    """The evaluations with references the index holds (rows a test wrote by hand, evidence "bafy", aside)."""
    return LedgerInteraction.objects.filter(has_reference=True).exclude(evidence_cid="bafy").count()


def qualified_as(evaluator: str, right: int, length_right: int, n: int = 200) -> Qualification:
    """A finished qualification of `evaluator` whose record (pinned) has these outcomes."""
    outcomes = [(f"p{i}", int(i < right), int(i < length_right)) for i in range(n)]
    record = qualification_record(evaluator=evaluator, params={}, outcomes=outcomes,
                                  sets=[{"name": "PandaLM", "sha256": "0" * 64, "pairs": n, "judged": n}])
    cid = default_store().put(records.canonical(record))
    return Qualification.objects.create(evaluator=evaluator, status=Qualification.Status.DONE, full=True, cid=cid,
                                        factor=record["figures"]["factor"], figures={"pooled": {}})


def evaluate(world, metric, model: str, questions) -> list[EvaluationJob]:
    interactions = [i for _, q, _ in questions for i in chat(world, model, [q])]  # one conversation each
    while claimed := jobs.claim(16):
        jobs.process(claimed, metric)
    drain(world["submitter"])
    indexer.index_until_head(world["ledger"])
    return [EvaluationJob.objects.get(interaction=i) for i in interactions]
