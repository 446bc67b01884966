"""G-Eval with a registered model as the judge (apps/oracle/geval.py): the steps cache, the
`geval:<judge>` evaluator in `metaeval scores`, and the `geval` metric. A scripted endpoint stands
in at the gateway's transport (the one adapter), except in the last test, where the real built-in
model server judges."""

from __future__ import annotations

import io
import json
import math

import httpx
import pytest
from django.core.management import call_command

from apps.chat.gateway import Gateway
from apps.chat.models import RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.oracle import geval as oracle_geval
from apps.oracle.models import GEvalSteps
from lib import geval
from lib.evaluators import EvaluatorError, get_evaluator
from lib.metrics import MetricError, get_metric
from tests.personas import developer

pytestmark = pytest.mark.django_db

STEPS = "Read the conversation.\nJudge the response."
ITEMS = [{"question": "do you like jazz ?\ni love it , especially miles davis .", "response": r,
          "reference": "miles davis recorded kind of blue in 1959 ."}
         for r in ("oh nice , kind of blue is my favourite album !", "banana", "i do too , he was a genius .")]


class ScriptedJudge:
    """An OpenAI-compatible endpoint: steps for a steps prompt; for a form, a score 4 with most of
    its mass, unless the response is "banana", where the judge hardly considers a digit."""

    def __init__(self):
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        prompt = body["messages"][-1]["content"]
        if prompt.rstrip().endswith("Steps:"):  # plain text, asked for as a stream
            return self.streamed(STEPS) if body.get("stream") else self.reply(STEPS)
        top = [{"token": "No", "logprob": math.log(0.9)}, {"token": " 4", "logprob": math.log(0.05)}] \
            if "Response:\nbanana" in prompt or "Answer:\nbanana" in prompt else \
            [{"token": "4", "logprob": math.log(0.7)}, {"token": " 5", "logprob": math.log(0.2)}]
        return self.reply("4", [{"token": top[0]["token"], "logprob": top[0]["logprob"], "top_logprobs": top}])

    @staticmethod
    def reply(text: str, content: list | None = None) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                      "logprobs": {"content": content} if content else None}]})

    @staticmethod
    def streamed(text: str) -> httpx.Response:
        events = [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in text.split(" ")[:1] +
                  [" " + w for w in text.split(" ")[1:]]]
        return httpx.Response(200, content="".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n",
                              headers={"content-type": "text/event-stream"})

    def steps_asked(self) -> int:
        return sum(b["messages"][-1]["content"].rstrip().endswith("Steps:") for b in self.bodies)


@pytest.fixture
def judge(settings, tmp_path, monkeypatch):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    register_model(developer(), ModelFields(name="judge-7b", provider="test", endpoint_url="http://judge.test/v1",
                                            endpoint_model="judge-7b"))
    endpoint = ScriptedJudge()
    monkeypatch.setattr(oracle_geval, "Gateway", lambda: Gateway(transport=httpx.MockTransport(endpoint), backoff=0))
    return endpoint


def test_a_judge_writes_its_steps_once_per_criterion_and_reuses_them(judge):
    first = get_evaluator("geval:judge-7b")
    assert first.score(ITEMS[:1], "overall") == [pytest.approx((4 * 0.7 + 5 * 0.2) / 0.9)]
    get_evaluator("geval:judge-7b").score(ITEMS, "overall")  # a new evaluator, e.g. the next command run
    assert judge.steps_asked() == 1
    get_evaluator("geval:judge-7b").score(ITEMS, "groundedness")
    assert judge.steps_asked() == 2
    row = GEvalSteps.objects.get(judge="judge-7b", criterion="overall")
    assert row.steps == STEPS and row.prompt == geval.steps_prompt(geval.CRITERIA["overall"])
    assert row.prompt_sha256 == geval.sha256(row.prompt) and row.endpoint_model == "judge-7b"
    assert first.params["steps_sha256[overall]"] == row.prompt_sha256


def test_the_steps_go_into_every_form_and_the_judge_is_asked_for_its_logprobs(judge):
    get_evaluator("geval:judge-7b").score(ITEMS, "overall")
    forms = [b for b in judge.bodies if b.get("logprobs")]
    assert len(forms) == 3 and all(STEPS in b["messages"][-1]["content"] for b in forms)
    assert all(b["top_logprobs"] == 20 and b["stream"] is False for b in forms)


def test_an_unusable_judgement_is_no_score_and_is_reported(judge):
    evaluator = get_evaluator("geval:judge-7b")
    scores = evaluator.score(ITEMS, "overall")
    assert scores[1] is None and None not in (scores[0], scores[2])
    details = evaluator.details("overall")
    assert (details["scored"], details["unusable"]) == (2, 1)
    assert details["mean_digit_mass"] == pytest.approx((0.9 + 0.05 + 0.9) / 3, abs=1e-4)


def test_pairs_are_won_by_the_higher_overall_score_and_unusable_ones_are_undecided(judge):
    pairs = [{"question": ITEMS[0]["question"], "answer_a": "banana", "answer_b": ITEMS[0]["response"]},
             {"question": ITEMS[0]["question"], "answer_a": ITEMS[0]["response"], "answer_b": ITEMS[2]["response"]}]
    assert get_evaluator("geval:judge-7b").compare(pairs) == [None, "tie"]


def test_metaeval_pairs_judges_each_answer_once_and_reports_an_unusable_judge(judge, tmp_path, client):
    q, good, other = ITEMS[0]["question"], ITEMS[0]["response"], ITEMS[2]["response"]
    rows = [{"id": f"p{i}", "question": q, "category": "jazz", "answer_a": a, "answer_b": b, "human": h}
            for i, (a, b, h) in enumerate([("banana", good, "b"), (good, other, "a"), (other, "banana", "a"),
                                           (good, "banana", "a")])]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = io.StringIO()
    call_command("metaeval", "pairs", str(path), "--evaluator", "geval:judge-7b", stdout=out)
    text = out.getvalue()
    report = json.loads(text.strip().splitlines()[-1])
    assert sum(bool(b.get("logprobs")) for b in judge.bodies) == 3  # 8 sides, 3 distinct answers
    assert (report["judge"]["scored"], report["judge"]["unusable"]) == (2, 1)
    assert (report["undecided"], report["evaluator_ties"]) == (3, 1)
    assert "UNUSABLE judge on 1 of 3 distinct answers" in text
    mass = report["judge"]["mean_digit_mass"]
    assert "judge answers scored: 2 (0 by structured output), unusable: 1; unconstrained digit mass" in text
    assert f"mean {mass:.3f}" in text
    page = client.get(f"/metaeval/{report['run']}/").content.decode()
    assert 'id="metaeval-judge-warning"' in page and "UNUSABLE judge on 1 of 3 distinct answers" in page


def test_only_a_registered_model_with_an_endpoint_can_judge(judge):
    with pytest.raises(EvaluatorError, match="no registered model named 'nobody'"):
        get_evaluator("geval:nobody")
    with pytest.raises(EvaluatorError, match="no criterion 'wit'"):
        get_evaluator("geval:judge-7b").score(ITEMS, "wit")


def test_metaeval_scores_reports_the_correlations_and_the_judge(judge, tmp_path):
    rows = [{"source": f"context {c} line one\ncontext {c} line two", "context": "a fact .", "system_id": f"sys{s}",
             "system_output": "banana" if (c, s) == (0, 0) else f"a reply {c} {s}",
             "scores": str({k: float(1 + (c + s) % 3) for k in ("understandability", "naturalness", "coherence",
                                                                 "engagingness", "groundedness", "overall")})}
            for c in range(3) for s in range(3)]
    data = tmp_path / "tc.json"
    data.write_text(json.dumps(rows))
    out = io.StringIO()
    call_command("metaeval", "scores", str(data), "--evaluator", "geval:judge-7b", "--criterion", "overall",
                 stdout=out)
    text = out.getvalue()
    report = json.loads(text.strip().splitlines()[-1])["criteria"]["overall"]
    assert set(report["pooled"]) == {"pearson", "spearman", "kendall"}
    assert (report["n"], report["unscored"]) == (8, 1)
    assert (report["judge"]["scored"], report["judge"]["unusable"]) == (8, 1)
    assert "UNUSABLE judge on 1 overall responses" in text and "mean digit mass" in text


def test_the_metric_calibrates_scores_into_0_1_and_refuses_an_unusable_judgement(judge):
    metric = get_metric("geval", judge="judge-7b", criterion="helpfulness", question="Tell me about jazz.")
    scores = metric.score_pairs([(ITEMS[0]["response"], "ref one"), (ITEMS[0]["response"], "ref two")])
    assert scores == [pytest.approx(((4 * 0.7 + 5 * 0.2) / 0.9 - 1) / 4)] * 2
    assert metric.params["criterion"] == "helpfulness" and metric.params["steps_sha256"]
    assert sum(1 for b in judge.bodies if b.get("logprobs")) == 1  # one candidate, judged once
    with pytest.raises(MetricError, match="unusable on 1 of 1"):
        metric.score_pairs([("banana", "ref")])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_built_in_model_judges_topical_chat_like_items_for_real(model_server, settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    register_model(developer(), ModelFields(name="smollm2-judge", provider="LLMChain built-in",
                                            endpoint_url=model_server.url, endpoint_model=model_server.model,
                                            api_key=model_server.api_key))
    evaluator = get_evaluator("geval:smollm2-judge")
    found = evaluator.judgements(ITEMS, "overall")
    # The built-in server honours the score's JSON schema (probed once, remembered): every answer is
    # scored, and the digit mass it would have put on a score unconstrained stays reported.
    assert RegisteredModel.objects.get(name="smollm2-judge").structured_output is True
    assert len(found) == 3 and all(j.method == "structured" for j in found)
    assert all(0 < j.digit_mass <= 1 + 1e-9 for j in found)
    assert all(1 <= j.score <= 5 for j in found)
    details = evaluator.details("overall")
    assert (details["scored"], details["unusable"], details["structured"]) == (3, 0, 3)
    assert details["mean_digit_mass"] > 0
    assert GEvalSteps.objects.filter(judge="smollm2-judge", criterion="overall").count() == 1
