"""Take the data with you: a user downloads everything they gave as JSON; the public
dataset holds only the answers of users who agreed to share them, without names, addresses or
comments, as JSONL and as a Hugging Face folder (data file + dataset card), with progress."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from apps.chat.accounts import service_account
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import Profile
from apps.chat.ratings import submit_rating
from apps.chat.registry import ModelFields, register_model
from tests.chat.factories import make_contexts
from tests.personas import PASSWORD, developer, user

pytestmark = pytest.mark.django_db
ANSWERS = {"reliability": "4", "completeness": "5", "utility": "3", "familiarity": "2", "trust": "4",
           "uncertainty": "1"}


@pytest.fixture
def people(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    coding, = make_contexts("coding")
    model = register_model(developer(), ModelFields(name="m-7b", provider="p", endpoint_url="http://127.0.0.1:9/v1",
                                                    endpoint_model="m"))
    out = {}
    for name, shares in (("sharer", True), ("private", False)):
        person = user(name)
        Profile.objects.filter(user=person).update(share_prompts=shares)
        conv = start_conversation(person, model, coding)
        for k in range(2):
            turn = begin_interaction(person, conv, f"{name} question {k}")
            finish_interaction(turn, f"{name} answer {k}")
        submit_rating(person, turn, {**ANSWERS, "tags": ["clear"], "comment": f"{name}'s secret comment"})
        out[name] = person
    replayer = service_account("mt-bench-replayer")
    Profile.objects.filter(user=replayer).update(share_prompts=True)  # never exported, whatever its flag
    turn = begin_interaction(replayer, start_conversation(replayer, model, coding), "replayed")
    finish_interaction(turn, "replayed answer")
    return out


def test_a_user_downloads_everything_they_gave_and_nothing_of_others(people):
    client = Client()
    client.login(username="private", password=PASSWORD)
    response = client.get("/account/export.json")
    assert response.status_code == 200 and 'filename="llmchain-private.json"' in response["Content-Disposition"]
    data = json.loads(response.content)
    assert data["format"] == "llmchain-user-export/1" and data["account"]["username"] == "private"
    assert data["account"]["shares_prompts"] is False and data["account"]["address"].startswith("0x")
    turns = [t for c in data["conversations"] for t in c["turns"]]
    assert [t["prompt"] for t in turns] == ["private question 0", "private question 1"]
    assert data["ratings"][0]["comment"] == "private's secret comment" and data["ratings"][0]["tags"] == ["clear"]
    assert "sharer" not in response.content.decode() and "replayed" not in response.content.decode()
    assert Client().get("/account/export.json").status_code == 302  # logged out: to the login page


def test_consent_is_asked_at_sign_up_and_changed_on_the_account_page(client):
    client.post("/signup/", {"username": "newcomer", "password": PASSWORD, "share_prompts": "1"})
    profile = Profile.objects.get(user__username="newcomer")
    assert profile.share_prompts and profile.share_prompts_changed_at is not None
    page = client.get("/account/").content.decode()
    assert 'name="share_prompts" value="1" checked' in page and "Download everything you gave" in page
    client.post("/account/", {})  # unticked
    assert not Profile.objects.get(user__username="newcomer").share_prompts
    client.post("/signup/", {"username": "quiet", "password": PASSWORD})
    assert not Profile.objects.get(user__username="quiet").share_prompts  # no by default


def test_the_public_dataset_holds_only_shared_answers_without_names_or_comments(people, tmp_path):
    out = StringIO()
    call_command("dataset", str(tmp_path / "ds"), stdout=out)
    lines = (tmp_path / "ds" / "data" / "train.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["prompt"] for r in records] == ["sharer question 0", "sharer question 1"]
    assert [r["turn"] for r in records] == [1, 2] and records[0]["conversation"] == records[1]["conversation"]
    assert records[1]["rating"] == {**{k: int(v) for k, v in ANSWERS.items()}, "tags": ["clear"]}
    assert records[0]["rating"] is None and records[0]["context"] == "coding" and records[0]["model"] == "m-7b"
    text = "\n".join(lines)
    for private in ("sharer's secret comment", "private question", "replayed", people["sharer"].profile.address,
                    "\"sharer\""):
        assert private not in text
    card = (tmp_path / "ds" / "README.md").read_text()
    assert card.startswith("---\n") and "path: data/train.jsonl" in card and "split: train" in card
    assert "2 answers" in card
    assert "exported 2 of 2 answers" in out.getvalue() and "2 answers written" in out.getvalue()


def test_a_jsonl_export_and_an_existing_destination(people, tmp_path):
    call_command("dataset", str(tmp_path / "one.jsonl"), "--jsonl", stdout=StringIO())
    assert len((tmp_path / "one.jsonl").read_text().splitlines()) == 2
    with pytest.raises(CommandError, match="exists"):
        call_command("dataset", str(tmp_path / "one.jsonl"), "--jsonl", stdout=StringIO())
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(CommandError, match="nothing was written"):
        call_command("dataset", str(tmp_path / "full"), stdout=StringIO())
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


def test_the_staff_page_streams_the_export_and_nobody_else_gets_it(people, client):
    client.login(username="sharer", password=PASSWORD)
    assert client.get("/dataset/export.jsonl").status_code == 302  # not staff: the admin's login
    from django.contrib.auth import get_user_model
    staff = get_user_model().objects.create_user("ops", password=PASSWORD, is_staff=True)
    client.force_login(staff)
    assert "2 answers from users who share" in client.get("/dataset/").content.decode()
    streamed = b"".join(client.get("/dataset/export.jsonl").streaming_content).decode().splitlines()
    assert [json.loads(line)["prompt"] for line in streamed] == ["sharer question 0", "sharer question 1"]


def test_the_exported_folder_loads_in_the_hugging_face_datasets_library(people, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local folder: nothing is downloaded
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    call_command("dataset", str(tmp_path / "ds"), stdout=StringIO())
    import datasets

    loaded = datasets.load_dataset(str(tmp_path / "ds"))
    train = loaded["train"]
    assert train.num_rows == 2 and train[0]["prompt"] == "sharer question 0"
    assert train[1]["rating"]["reliability"] == 4 and train[1]["rating"]["tags"] == ["clear"]
    assert set(train.column_names) == {"interaction_id", "conversation", "turn", "context_id", "context", "model_id",
                                       "model", "prompt", "answer", "finish_reason", "date", "sa", "has_reference",
                                       "evidence_cid", "rating", "arena"}


def test_an_answer_no_other_model_answered_has_no_automatic_score_in_the_downloads(people):
    """Scored with no reference (nobody else answered): the score the job keeps is "0", which the
    download and the dataset must not pass off as a score of 0."""
    from apps.chat.models import Interaction
    from apps.leaderboard.dataset import records
    from apps.oracle.models import EvaluationJob

    lonely, scored = Interaction.objects.filter(conversation__user=people["sharer"]).order_by("pk")
    EvaluationJob.objects.filter(interaction=lonely).update(status="onchain", references=[], sa="0", wa="0")
    EvaluationJob.objects.filter(interaction=scored).update(
        status="onchain", references=[{"model": "0x" + "02" * 32, "text": "other", "score": "0"}], sa="0", wa="1")
    client = Client()
    client.login(username="sharer", password=PASSWORD)
    turns = [t for c in json.loads(client.get("/account/export.json").content)["conversations"] for t in c["turns"]]
    assert [t["evaluation"]["sa"] for t in turns] == [None, "0"], "no score is null; a real 0 stays 0"
    rows = {row["prompt"]: row for row in records()}
    assert rows["sharer question 0"]["sa"] is None and rows["sharer question 0"]["has_reference"] is False
    assert rows["sharer question 1"]["sa"] == 0.0
