"""Live debates between judge models over answers the site holds (apps/oracle/debates.py).

The judges are reached through the gateway; here a scripted OpenAI-compatible endpoint stands in
at the gateway's transport (the one adapter), except in the last test, where two registrations
of the real built-in model debate."""

from __future__ import annotations

import io
import json
import re

import httpx
import pytest
from django.core.management import CommandError, call_command

from apps.annotate import queue
from apps.annotate.models import Debate, DebateTurn, QueueItem
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.gateway import Gateway
from apps.chat.models import RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.leaderboard import entries
from apps.oracle import debates
from apps.oracle.models import DebateJob, EvaluationJob
from tests.chat.factories import make_contexts
from tests.personas import developer, expert, user
from tests.qualified_judges import record_qualification

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What is the capital of France?"
GOOD = "The capital of France is Paris, on the Seine."
BAD = "It is Lyon, I think."


@pytest.fixture
def world(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    general, other = make_contexts("general", "other")
    dave = developer()

    def model(name, *, judge=False, endpoint_model=None, url="http://judges.test/v1", kind=None):
        fields = ModelFields(name=name, provider="test", endpoint_url=url, endpoint_model=endpoint_model or name)
        if kind:
            fields = ModelFields(name=name, provider="test", kind=kind)
        m = register_model(dave, fields)
        RegisteredModel.objects.filter(pk=m.pk).update(is_judge=judge, healthy=True)
        m.refresh_from_db()
        return m

    alice = user()
    good, bad = model("good-7b"), model("bad-7b")

    def ask(m, prompt=QUESTION, answer=GOOD, context=general):
        conv = start_conversation(alice, m, context)
        i = begin_interaction(alice, conv, prompt)
        finish_interaction(i, answer)
        i.refresh_from_db()
        return i

    return {"general": general, "other": other, "model": model, "ask": ask, "good": good, "bad": bad,
            "alice": alice}


def judges(world, *names):
    """Judge models the site seats in debates: flagged as judges and qualified in the debate role."""
    made = [world["model"](n, judge=True) for n in names]
    for m in made:
        record_qualification(m.name, "debate")
    return made


class ScriptedJudges:
    """An OpenAI-compatible endpoint whose judges answer by a rule of (judge, prompt) -> reply."""

    def __init__(self, rule, fail_after: int | None = None, status: int = 503):
        self.rule, self.fail_after, self.status = rule, fail_after, status
        self.calls: list[tuple[str, str, dict]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if "response_format" in body:  # these scripted judges write plain text: the gateway's probe learns it
            return httpx.Response(400, json={"error": {"message": "response_format is not supported"}})
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            return httpx.Response(self.status, json={"error": {"message": "judge overloaded"}})
        prompt = body["messages"][-1]["content"]
        self.calls.append((body["model"], prompt, body))
        reply = self.rule(body["model"], prompt)
        events = [json.dumps({"choices": [{"delta": {"content": reply}}]}), "[DONE]"]
        return httpx.Response(200, content="".join(f"data: {e}\n\n" for e in events).encode(),
                              headers={"content-type": "text/event-stream"})

    def gateway(self) -> Gateway:
        return Gateway(transport=httpx.MockTransport(self), retries=0)


def shown_first(prompt: str) -> str:
    return re.search(r"\[Submission 1\]\n(.*?)\n\[end of Submission 1\]", prompt, re.S).group(1)


def prefers_paris(judge: str, prompt: str) -> str:
    """A judge that votes for whichever submission names Paris, in its own numbering."""
    return f"Only one of them is right.\nVerdict: {1 if 'Paris' in shown_first(prompt) else 2}"


def test_judges_that_agree_end_the_debate_in_round_0_and_nothing_is_queued(world):
    judges(world, "judge-a", "judge-b", "judge-c")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    job, created = debates.request(debates.from_same_prompt(a, b), seed=7)
    before = entries.version(world["general"].context_id)
    script = ScriptedJudges(prefers_paris)
    debate = debates.hold(job, script.gateway())

    assert created and len(script.calls) == 3
    good_side = 1 if debate.model_1 == world["good"].model_id else 2
    assert (debate.source, debate.rounds, debate.consensus) == ("live", 1, good_side)
    assert debate.context_id == world["general"].context_id and debate.scenario == "general"
    assert {debate.system_1, debate.system_2} == {"good-7b", "bad-7b"}
    assert debate.origin == {"kind": "same-prompt", "interactions": sorted([a.interaction_id, b.interaction_id])}
    assert not QueueItem.objects.exists()
    turns = list(debate.turns.all())
    assert [t.verdict for t in turns] == [good_side] * 3
    assert all(t.prompt and QUESTION in t.prompt for t in turns)
    # the submissions' order is randomised per agent: the seed gives a mix, and verdicts map back
    assert {t.swapped for t in turns} == {True, False}
    assert entries.version(world["general"].context_id) != before  # a resolved outcome moves the board
    assert DebateJob.objects.get(pk=job.pk).status == "done"


def test_judges_that_keep_disagreeing_land_in_the_expert_queue_with_their_reasoning(world):
    judges(world, "judge-a", "judge-b")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    job, _ = debates.request(debates.from_same_prompt(a, b), seed=1)
    script = ScriptedJudges(lambda judge, prompt: "Verdict: 0" if judge == "judge-a"
                            else "<b>Both</b> are fine, hard to say.")
    debate = debates.hold(job, script.gateway())

    assert debate.consensus is None and debate.rounds == 3 and len(script.calls) == 6
    item = QueueItem.objects.get(debate=debate)
    assert item.status == "open"
    unread = DebateTurn.objects.filter(debate=debate, agent="judge-b")
    assert all(t.verdict is None and "no verdict marker" in t.unparseable for t in unread)
    assert unread.first().reasoning == "<b>Both</b> are fine, hard to say."  # stored as it came
    # round 1 showed each judge the other's previous turn
    assert DebateTurn.objects.get(debate=debate, round=1, agent="judge-a").peers_shown == ["judge-b"]

    assert queue.next_item(expert("erin")).pk == item.pk


def test_a_crash_mid_debate_loses_no_reply_and_asks_nothing_twice(world):
    judges(world, "judge-a", "judge-b")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    job, _ = debates.request(debates.from_same_prompt(a, b), seed=3)
    replies = iter(["Verdict: 0", "I cannot say.", "Verdict: 0", "Verdict: 0"])
    broken = ScriptedJudges(lambda judge, prompt: next(replies), fail_after=3)
    assert debates.hold(job, broken.gateway()) is None
    job.refresh_from_db()
    assert job.status == "debating" and len(job.replies) == 3 and "judge overloaded" in job.last_error
    assert not Debate.objects.exists()

    resumed = ScriptedJudges(lambda judge, prompt: next(replies))
    debate = debates.hold(job, resumed.gateway())
    assert len(resumed.calls) == 1  # only the reply still missing
    # the resumed debate replays the very prompts already answered: same seed, same orders
    assert [t.reasoning for t in debate.turns.order_by("round", "speaker")] == [
        "Verdict: 0", "I cannot say.", "Verdict: 0", "Verdict: 0"]
    assert debate.consensus == 0 and debate.rounds == 2

    again = ScriptedJudges(lambda judge, prompt: "Verdict: 1")
    assert debates.hold(DebateJob.objects.get(pk=job.pk), again.gateway()).pk == debate.pk
    assert again.calls == [] and Debate.objects.count() == 1


def test_a_judge_that_refuses_fails_the_job_with_the_reason(world):
    judges(world, "judge-a", "judge-b")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    job, _ = debates.request(debates.from_same_prompt(a, b))
    assert debates.hold(job, ScriptedJudges(prefers_paris, fail_after=0, status=401).gateway()) is None
    job.refresh_from_db()
    assert job.status == "failed" and "401" in job.last_error and not Debate.objects.exists()


def test_asking_twice_for_the_same_pair_gives_the_same_job(world):
    judges(world, "judge-a", "judge-b")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    first, created = debates.request(debates.from_same_prompt(a, b))
    second, created_again = debates.request(debates.from_same_prompt(b, a))
    assert created and not created_again and first.pk == second.pk
    other, created = debates.request(debates.from_same_prompt(a, b), criterion="reasoning")
    assert created and other.pk != first.pk


def test_a_pair_against_a_reference_answer_the_oracle_collected(world):
    judges(world, "judge-a", "judge-b")
    a = world["ask"](world["good"])
    with pytest.raises(debates.DebateRequestError, match="no reference answer yet"):
        debates.from_reference(a)
    EvaluationJob.objects.filter(interaction=a).update(references=[
        {"model": world["bad"].model_id, "name": "bad-7b", "pk": world["bad"].pk, "text": None, "error": "timeout"},
        {"model": "0x" + "ab" * 32, "name": "ref-13b", "pk": 999, "text": "Paris.", "error": ""}])
    a.refresh_from_db()
    pair = debates.from_reference(a)
    assert (pair.submission_1, pair.submission_2, pair.system_2, pair.model_2) == (GOOD, "Paris.", "ref-13b",
                                                                                   "0x" + "ab" * 32)
    assert pair.origin == {"kind": "reference", "interactions": [a.interaction_id]}
    with pytest.raises(debates.DebateRequestError, match="from 'bad-7b'"):
        debates.from_reference(a, "bad-7b")  # its answer never came


def test_pairs_that_cannot_be_compared_are_refused(world):
    judges(world, "judge-a", "judge-b")
    good, bad, ask = world["good"], world["bad"], world["ask"]
    a = ask(good)
    with pytest.raises(debates.DebateRequestError, match="same model"):
        debates.from_same_prompt(a, ask(good, answer="Paris."))
    with pytest.raises(debates.DebateRequestError, match="different prompts"):
        debates.from_same_prompt(a, ask(bad, prompt="What is the capital of Spain?"))
    with pytest.raises(debates.DebateRequestError, match="different contexts"):
        debates.from_same_prompt(a, ask(bad, context=world["other"]))
    conv = a.conversation
    later = begin_interaction(world["alice"], conv, QUESTION)
    finish_interaction(later, "Still Paris.")
    with pytest.raises(debates.DebateRequestError, match="only first turns"):
        debates.from_same_prompt(later, ask(bad))
    pending = begin_interaction(world["alice"], start_conversation(world["alice"], bad, world["general"]), QUESTION)
    with pytest.raises(debates.DebateRequestError, match="no answer to judge"):
        debates.from_same_prompt(a, pending)
    with pytest.raises(debates.DebateRequestError, match="unknown criterion 'wit'"):
        debates.request(debates.from_same_prompt(a, ask(bad)), criterion="wit")
    assert not DebateJob.objects.exists()


def test_who_judges(world):
    model = world["model"]
    with pytest.raises(debates.DebateRequestError, match="no running model is flagged"):
        debates.judge_models()
    lone = model("lone-judge", judge=True)
    record_qualification(lone.name, "debate")
    sitting = debates.judge_models()
    assert sitting == [lone, lone] and debates.agent_names(sitting) == ["lone-judge", "lone-judge #2"]
    record_qualification(model("second-judge", judge=True).name, "debate")
    assert [m.name for m in debates.judge_models()] == ["lone-judge", "second-judge"]
    with pytest.raises(debates.DebateRequestError, match="good-7b is not flagged as a judge"):
        debates.judge_models(["lone-judge", "good-7b"])
    with pytest.raises(debates.DebateRequestError, match="no registered model named 'nobody'"):
        debates.judge_models(["lone-judge", "nobody"])
    replay = model("replay-judge", judge=True, kind=RegisteredModel.Kind.REPLAY)
    with pytest.raises(debates.DebateRequestError, match="replay-judge cannot judge"):
        debates.judge_models(["lone-judge", replay.name])


def test_a_lone_judge_sits_twice_as_two_agents_with_their_own_sampling_seeds(world):
    judges(world, "lone-judge")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    job, _ = debates.request(debates.from_same_prompt(a, b), seed=5, rounds=1)
    script = ScriptedJudges(lambda judge, prompt: "Verdict: 0")
    debate = debates.hold(job, script.gateway())
    assert [t.agent for t in debate.turns.all()] == ["lone-judge", "lone-judge #2"]
    seeds = {body["seed"] for _, _, body in script.calls}
    assert len(seeds) == 2 and all(body["temperature"] > 0 for _, _, body in script.calls)


def test_sampling_draws_fresh_pairs_only(world):
    judges(world, "judge-a", "judge-b")
    ask, good, bad = world["ask"], world["good"], world["bad"]
    third = world["model"]("third-7b")
    for prompt in ("Q1?", "Q2?"):
        for m in (good, bad, third):
            ask(m, prompt=prompt, answer=f"{m.name} says {prompt}")
    assert len(debates.candidate_pairs()) == 6  # 2 prompts x 3 model pairs
    first = debates.sample(4, seed=11)
    assert len(first) == 4 and len({j.key for j in first}) == 4
    rest = debates.sample(10, seed=11)
    assert len(rest) == 2 and not {j.key for j in rest} & {j.key for j in first}
    assert debates.sample(3) == []
    assert len(debates.sample(2, criterion="creativity")) == 2  # another criterion: other debates


def test_the_command_reports_its_jobs_and_refuses_bad_input(world, capsys):
    judges(world, "judge-a", "judge-b")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    call_command("debate", "pair", a.interaction_id, b.interaction_id)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [j["status"] for j in out["jobs"]] == ["queued"]
    with pytest.raises(CommandError, match="no interaction with id '0xdead'"):
        call_command("debate", "pair", a.interaction_id, "0xdead")
    with pytest.raises(CommandError, match="not flagged as a judge"):
        call_command("debate", "pair", a.interaction_id, b.interaction_id, "--judges", "judge-a,good-7b")
    with pytest.raises(CommandError, match="rounds must be"):
        call_command("debate", "sample", "--n", "1", "--rounds", "0")
    assert DebateJob.objects.count() == 1
    call_command("debate", "status")
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["queued"] == 1


@pytest.mark.slow
def test_two_running_built_in_judges_debate_for_real_and_a_disagreement_is_queued(world, model_server, settings,
                                                                                  capsys):
    """Two registered judge models served by the real built-in model server (SmolLM2-135M)."""
    settings.LLMCHAIN_DEBATE_MAX_TOKENS = 96
    for name in ("smollm2-judge-a", "smollm2-judge-b"):
        m = register_model(developer("judge-owner-" + name[-1]), ModelFields(
            name=name, provider="LLMChain built-in", endpoint_url=model_server.url,
            endpoint_model=model_server.model, api_key=model_server.api_key))
        RegisteredModel.objects.filter(pk=m.pk).update(is_judge=True, healthy=True)
        record_qualification(name, "debate")  # the site seats only qualified judges; this tests the rounds
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    call_command("debate", "pair", a.interaction_id, b.interaction_id, "--rounds", "2", "--now")
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    [job] = out["jobs"]
    assert job["status"] == "done", job
    debate = Debate.objects.get(pk=job["debate"])
    turns = list(debate.turns.all())
    assert {t.agent for t in turns} == {"smollm2-judge-a", "smollm2-judge-b"}
    assert len(turns) == 2 * debate.rounds and all(t.reasoning.strip() and t.prompt for t in turns)
    assert all((t.verdict is None) == bool(t.unparseable) for t in turns)  # unread, never guessed
    last = [t.verdict for t in turns if t.round == debate.rounds - 1]
    agreed = None not in last and len(set(last)) == 1
    assert (debate.consensus is None) == (not agreed)
    assert job["queued"] == (not agreed) == QueueItem.objects.filter(debate=debate).exists()
    if not agreed:
        assert queue.next_item(expert("erin")).debate_id == debate.pk
    call_command("debate", "pair", a.interaction_id, b.interaction_id, "--now")  # asked again: nothing new
    assert Debate.objects.count() == 1


def test_the_debate_as_an_evaluator_of_human_labelled_pairs(world, tmp_path, capsys, monkeypatch):
    judges(world, "judge-a", "judge-b")
    script = ScriptedJudges(lambda judge, prompt: prefers_paris(judge, prompt) if "Paris" in prompt
                            else "They are the same to me.\nVerdict: 0")
    monkeypatch.setattr(debates, "Gateway", script.gateway)
    rows = [{"id": "p1", "question": QUESTION, "category": "geo", "answer_a": GOOD, "answer_b": BAD, "human": "a"},
            {"id": "p2", "question": QUESTION, "category": "geo", "answer_a": BAD, "answer_b": GOOD, "human": "a"},
            {"id": "p3", "question": "Say hi.", "category": "chat", "answer_a": "Hi", "answer_b": "Hello", "human": "tie"}]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    call_command("metaeval", "pairs", str(path), "--evaluator", "debate")
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # p1: the judges pick a (right); p2: they pick b against the human a (wrong); p3: tie = tie
    assert (report["n"], report["accuracy_non_tie"], report["agreement_with_ties"]) == (3, 0.5, 0.6667)
    assert report["evaluator_params"]["judges"] == "judge-a,judge-b"
    assert report["evaluator_params"]["pairs_failed"] == "0"
    judged = report["judge"]
    assert {k: judged[k] for k in ("replies", "replies_without_verdict", "pairs_failed", "pairs_failed_on_context")} \
        == {"replies": len(script.calls), "replies_without_verdict": 0, "pairs_failed": 0, "pairs_failed_on_context": 0}
    # each judge was also asked round 0 in the other order (MT-Bench's swap): these judges follow the answer
    assert {name: j["position"]["consistency"] for name, j in judged["per_judge"].items()} == {"judge-a": 1.0,
                                                                                            "judge-b": 1.0}
    assert not Debate.objects.exists() and not DebateJob.objects.exists()  # nothing queued for experts

    call_command("metaeval", "pairs", str(path), "--evaluator", "debate", "--limit", "1", "--seed", "4")
    sampled = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (sampled["n"], sampled["pairs_in_file"], sampled["sample_seed"]) == (1, 3, 4)


def test_a_pair_whose_judge_fails_is_undecided_and_counted(world):
    judges(world, "judge-a", "judge-b")
    evaluator = debates.DebateEvaluator(gateway=ScriptedJudges(prefers_paris, fail_after=1).gateway())
    item = {"id": "p1", "question": QUESTION, "category": "geo", "answer_a": GOOD, "answer_b": BAD, "human": "a"}
    assert evaluator.compare([item]) == [None]
    assert evaluator.params["pairs_failed"] == "1"


def test_the_debate_evaluator_without_judges_is_a_clear_error(world, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"id": "p1", "question": "Q?", "category": "c", "answer_a": "x", "answer_b": "y",
                                "human": "a"}) + "\n")
    with pytest.raises(CommandError, match="no running model is flagged as a judge"):
        call_command("metaeval", "pairs", str(path), "--evaluator", "debate")


def test_judges_whose_replies_give_no_verdict_are_reported_unusable_by_the_debate_evaluator(world, tmp_path,
                                                                                          settings, monkeypatch):
    settings.LLMCHAIN_DEBATE_ROUNDS = 2
    judges(world, "judge-a", "judge-b")
    script = ScriptedJudges(lambda judge, prompt: prefers_paris(judge, prompt) if judge == "judge-a"
                            else "Both submissions have merits and weaknesses.")
    monkeypatch.setattr(debates, "Gateway", script.gateway)
    rows = [{"id": f"p{i}", "question": QUESTION, "category": "geo", "answer_a": GOOD, "answer_b": BAD,
             "human": "a"} for i in range(3)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = io.StringIO()
    call_command("metaeval", "pairs", str(path), "--evaluator", "debate", stdout=out)
    report = json.loads(out.getvalue().strip().splitlines()[-1])
    # every debate runs both rounds without consensus: 3 pairs x 2 agents x 2 rounds, and each judge's
    # round 0 asked again in the other order (3 x 2 swap asks): half of them unread
    judged = {k: v for k, v in report["judge"].items() if k != "per_judge"}
    assert judged == {"replies": 18, "replies_without_verdict": 9, "pairs_failed": 0, "pairs_failed_on_context": 0,
                      "warning": "9 of 18 judge replies gave no readable verdict (not guessed)."}
    assert report["undecided"] == 3 and len(script.calls) == 18
    assert "9 of 18 judge replies gave no readable verdict" in out.getvalue()
    assert "UNUSABLE" not in out.getvalue()  # half is not most

    script.rule = lambda judge, prompt: "Both submissions have merits and weaknesses."
    out = io.StringIO()
    call_command("metaeval", "pairs", str(path), "--evaluator", "debate", "--no-save", stdout=out)
    assert "UNUSABLE judges: 18 of 18 replies gave no readable verdict" in out.getvalue()
