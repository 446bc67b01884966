"""`manage.py selfeval`: the peer self-evaluation (Hai Ye's method) of a response folder or of a context's
interactions, an Elo table and, last, one JSON line. The real BERTScore scores every comparison."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from apps.chat.models import Conversation, Interaction, RegisteredModel
from tests.chat.factories import make_contexts
from tests.personas import developer, user

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ANSWERS = {  # three prompts, four models; "off-topic" answers something else every time
    "sea-poet": ["The sea is wide and blue, it sings to me and you.",
                 "The sun rises slowly over the hills and golden light fills the valley.",
                 "Use short sentences, prefer plain words and cut what is not needed."],
    "wave-poet": ["Waves roll on the wide blue sea and sing to the shore.",
                  "Golden light fills the valley as the sun rises over the hills.",
                  "Prefer plain words and short sentences; cut what is not needed."],
    "tide-poet": ["The blue sea rises with the tide and sings.",
                  "The sun comes up over the hills.",
                  "Write short sentences with plain words."],
    "off-topic": ["Quarterly revenue grew by four percent.",
                  "Please restart the router and try again.",
                  "The train to Lyon leaves at nine."],
}


def run(*args) -> tuple[str, dict]:
    out = io.StringIO()
    call_command("selfeval", *args, stdout=out)
    lines = out.getvalue().strip().splitlines()
    return out.getvalue(), json.loads(lines[-1])


def write_folder(root, answers):
    root.mkdir()
    for model, lines in answers.items():
        (root / model).write_text("\n".join(lines) + "\n")  # the seed's files: no suffix
    return root


def test_a_response_folder_gives_an_elo_table_and_a_json_line_last(tmp_path):
    text, data = run("--responses", str(write_folder(tmp_path / "responses", ANSWERS)))
    assert "rank  model" in text and "Elo" in text and "wins" in text and "losses" in text
    assert data["prompts"] == 3 and data["rounds"] == 1
    assert data["comparisons"] == 3 * 6 * 2  # M * C(4, 2) * (4 - 2)
    assert set(data["ratings"]) == set(ANSWERS) and data["ranking"][-1] == "off-topic"
    assert data["records"]["off-topic"]["wins"] == 0
    assert sum(r["wins"] + r["losses"] + r["ties"] for r in data["records"].values()) == 2 * data["comparisons"]
    assert sum(data["ratings"].values()) == pytest.approx(4000, abs=0.1)
    table_line = next(line for line in text.splitlines() if "off-topic" in line)
    assert table_line.split()[0] == "4" and table_line.split()[-1] == str(data["records"]["off-topic"]["losses"])


def test_the_second_round_re_ranks_the_top_models_only(tmp_path):
    text, data = run("--responses", str(write_folder(tmp_path / "responses", ANSWERS)), "--rounds", "2",
                     "--top", "3", "--json-only")
    assert len(text.strip().splitlines()) == 1
    assert data["rounds"] == 2 and "off-topic" not in data["ratings"] and len(data["ratings"]) == 3
    assert data["comparisons"] == 3 * 3 * 1
    assert set(data["first_round"]["ratings"]) == set(ANSWERS)
    assert data["ranking"][-1] == "off-topic"


def test_files_of_different_lengths_are_refused_and_nothing_is_printed(tmp_path):
    folder = write_folder(tmp_path / "responses", {**ANSWERS, "short": ["Only one answer."]})
    out = io.StringIO()
    with pytest.raises(CommandError, match="short has 1") as error:
        call_command("selfeval", "--responses", str(folder), stdout=out)
    assert "sea-poet has 3" in str(error.value)
    assert out.getvalue() == ""


# --- the site's own interactions -----------------------------------------------------------------

def ask(alice, model, context, prompt, answer, *, status=Interaction.Status.DONE, follow_up=None):
    conv = Conversation.objects.create(user=alice, model=model, context=context, title=prompt[:40])
    n = Interaction.objects.count()
    Interaction.objects.create(conversation=conv, interaction_id=f"0x{n:064x}", prompt=prompt, answer=answer,
                               status=status)
    if follow_up:
        Interaction.objects.create(conversation=conv, interaction_id=f"0x{n + 1:064x}", prompt=follow_up[0],
                                   answer=follow_up[1], status=Interaction.Status.DONE)


@pytest.fixture
def writing_world(db):
    """Four models in `writing`, each asked the three prompts by alice; some noise around them."""
    writing, maths = make_contexts("writing", "maths")
    dave, alice = developer(), user()
    models = {name: RegisteredModel.objects.create(owner=dave, name=name, provider="lab", model_id=f"0x{n:064x}",
                                                   metadata_cid="bafy")
              for n, name in enumerate(ANSWERS, start=1)}
    prompts = ["Write a short poem about the sea.", "Describe a sunrise.", "Give tips for writing clearly."]
    for name, model in models.items():
        for prompt, answer in zip(prompts, ANSWERS[name]):
            ask(alice, model, writing, prompt, answer)
    # The same prompt (other spacing and case) in a follow-up turn, another context, or failed: not counted.
    ask(alice, models["off-topic"], writing, "Hello", "Hi.", follow_up=("write a short  poem about the SEA.",
                                                                        "The sea! The sea!"))
    ask(alice, models["off-topic"], maths, prompts[0], "The sea, the sea, the wide blue sea, sings.")
    ask(alice, models["tide-poet"], writing, prompts[1], "", status=Interaction.Status.FAILED)
    return {"writing": writing, "models": models}


def test_a_contexts_models_are_ranked_from_their_answers_to_the_same_prompts(writing_world):
    from apps.oracle.selfeval import context_answers

    answers, model_ids = context_answers(writing_world["writing"])
    assert answers == {name: lines for name, lines in ANSWERS.items()}
    assert model_ids == {name: m.model_id for name, m in writing_world["models"].items()}
    text, data = run("--context", "writing")
    assert data["prompts"] == 3 and data["comparisons"] == 3 * 6 * 2
    assert data["context"]["name"] == "writing" and data["ranking"][-1] == "off-topic"
    assert data["model_ids"]["sea-poet"] == writing_world["models"]["sea-poet"].model_id
    _, by_id = run("--context", writing_world["writing"].context_id, "--json-only")
    assert by_id["ratings"] == data["ratings"]


def test_a_context_without_three_models_on_one_prompt_is_an_error(writing_world):
    with pytest.raises(CommandError, match="no single-turn prompt in context maths"):
        call_command("selfeval", "--context", "maths", stdout=io.StringIO())
    with pytest.raises(CommandError, match="no context named"):
        call_command("selfeval", "--context", "poetry", stdout=io.StringIO())
