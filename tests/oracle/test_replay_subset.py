"""The replay's subset and order: the first questions of each category, asked question by question
across the models (so every model is evaluated from the start), and only what a model answered."""

from __future__ import annotations

import pytest

from apps.chat.models import Interaction
from apps.chat.replay import import_mtbench
from apps.oracle.models import EvaluationJob
from apps.oracle.replay import queue_mtbench, replay_progress
from tests.chat.factories import make_contexts, write_mtbench

pytestmark = pytest.mark.django_db

QUESTIONS = {1: ("writing", ["W1?", "W1 again?"]), 2: ("writing", ["W2?", "W2 again?"]),
             3: ("writing", ["W3?", "W3 again?"]), 4: ("math", ["M4?", "M4 again?"]), 5: ("math", ["M5?", "M5 again?"])}


@pytest.fixture
def root(tmp_path, settings):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    contexts = make_contexts("writing", "math")
    answers = {name: {q: [f"{name} on {q}", f"{name} again on {q}"] for q in QUESTIONS} for name in ("ant", "bee")}
    del answers["bee"][2]  # bee never answered question 2
    root = write_mtbench(tmp_path / "mt_bench", QUESTIONS, answers)
    import_mtbench(root, contexts=contexts, progress=lambda _: None)
    return root


def asked(ids: list[int]) -> list[tuple[str, str]]:
    by_pk = {i.pk: i for i in Interaction.objects.filter(pk__in=ids).select_related("conversation__model")}
    return [(by_pk[pk].conversation.model.name, by_pk[pk].prompt) for pk in ids]


def test_a_subset_asks_the_first_questions_of_each_category_question_by_question_across_the_models(root):
    ids, new = queue_mtbench(root, turns=1, per_category=2)
    assert asked(ids) == [("ant", "W1?"), ("bee", "W1?"), ("ant", "W2?"), ("ant", "M4?"), ("bee", "M4?"),
                          ("ant", "M5?"), ("bee", "M5?")]
    assert new == 7


def test_a_question_a_model_has_no_recorded_answer_to_is_never_asked(root):
    ids, _ = queue_mtbench(root, models=["bee"])
    assert ("bee", "W2?") not in asked(ids) and ("bee", "W2 again?") not in asked(ids)
    assert len(ids) == 2 * 4  # both turns of the four questions bee answered
    assert not Interaction.objects.filter(answer__startswith="I am a replay model").exists()


def test_queuing_the_subset_again_adds_nothing_and_the_full_replay_adds_only_the_rest(root):
    first, _ = queue_mtbench(root, turns=1, per_category=2)
    again, new = queue_mtbench(root, turns=1, per_category=2)
    assert (again, new) == (first, 0)
    everything, new = queue_mtbench(root)
    assert set(first) <= set(everything) and new == len(everything) - len(first)
    assert EvaluationJob.objects.count() == len(everything)


def test_the_progress_counts_every_replayed_answer_until_it_is_on_chain_or_failed(root):
    assert replay_progress() == {"total": 0, "onchain": 0, "failed": 0, "done": 0}
    ids, _ = queue_mtbench(root, turns=1, per_category=1)
    jobs = EvaluationJob.objects.filter(interaction_id__in=ids).order_by("id")
    EvaluationJob.objects.filter(pk=jobs[0].pk).update(status=EvaluationJob.Status.ONCHAIN)
    EvaluationJob.objects.filter(pk=jobs[1].pk).update(status=EvaluationJob.Status.FAILED)
    assert replay_progress() == {"total": 4, "onchain": 1, "failed": 1, "done": 2}
