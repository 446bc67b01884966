import json

import pytest

from lib import records
from lib.cid import cid_for

MODEL = "0x" + "11" * 32
OTHER = "0x" + "22" * 32
CTX = "0x" + "33" * 32
IID = "0x" + "44" * 32
OWNER = "0x" + "ab" * 20


def evidence(**changes):
    fields = dict(interaction_id=IID, context_id=CTX, context_name="coding", prompt="Write <b>hi</b>",
                  model_id=MODEL, answer="print('hi') — ✓",
                  references=[{"model": OTHER, "text": "hi", "score": 7 * 10**17}],
                  metric={"name": "bertscore-f1", "params": {"encoder": "all-MiniLM-L6-v2"}},
                  sa=7 * 10**17, wa=5 * 10**17)
    fields.update(changes)
    return records.interaction_evidence(**fields)


def test_same_content_gives_the_same_bytes_and_cid_whatever_the_key_order():
    a = evidence()
    b = json.loads(json.dumps(a, sort_keys=False))
    b = dict(reversed(list(b.items())))
    assert records.canonical(a) == records.canonical(b)
    assert cid_for(records.canonical(a)) == cid_for(records.canonical(b))


def test_canonical_bytes_are_compact_sorted_utf8():
    data = records.canonical(evidence())
    text = data.decode("utf-8")
    assert ", " not in text and ": " not in text
    assert "✓" in text  # not \u-escaped
    assert list(json.loads(text)) == sorted(json.loads(text))


def test_a_record_reads_back_through_parse():
    rec = evidence()
    assert records.parse(records.canonical(rec)) == rec
    assert rec["hasReference"] is True
    assert rec["references"][0]["score"] == str(7 * 10**17)


def test_no_reference_means_has_reference_false():
    rec = evidence(references=[])
    assert rec["hasReference"] is False


def test_model_metadata_sorts_contexts_and_checks_the_owner():
    rec = records.model_metadata(name="m", provider="p", owner=OWNER, endpoint_kind="openai-chat",
                                 contexts=["writing", "coding", "coding"])
    assert rec["contexts"] == ["coding", "writing"]
    with pytest.raises(records.RecordError, match="owner"):
        records.model_metadata(name="m", provider="p", owner="alice", endpoint_kind="openai-chat")


@pytest.mark.parametrize("changes, message", [
    ({"interaction_id": "0x12"}, "interaction must be"),
    ({"prompt": ""}, "prompt is required"),
    ({"sa": 2 * 10**18}, "scores.sA"),
    ({"sa": 0.5}, "scores.sA"),
    ({"references": [{"model": MODEL, "text": "x", "score": 1}]}, "evaluated model itself"),
    ({"metric": {}}, "metric"),
])
def test_bad_evidence_is_refused_with_the_field_named(changes, message):
    with pytest.raises(records.RecordError, match=message):
        evidence(**changes)


def test_floats_and_huge_integers_are_not_canonical():
    with pytest.raises(records.RecordError, match="floats"):
        records.canonical({"x": 0.1})
    with pytest.raises(records.RecordError, match="too large"):
        records.canonical({"x": 10**18})


@pytest.mark.parametrize("data, message", [
    (b"\xff\xfe", "not a JSON record"),
    (b"[1]", "unknown or missing schema"),
    (b'{"schema":"llmchain/model-metadata","version":2}', "version 2 is not supported"),
])
def test_parse_refuses_what_is_not_a_record(data, message):
    with pytest.raises(records.RecordError, match=message):
        records.parse(data)


def test_parse_refuses_a_valid_record_in_non_canonical_form():
    rec = evidence()
    with pytest.raises(records.RecordError, match="canonical"):
        records.parse(json.dumps(rec, indent=2).encode())
