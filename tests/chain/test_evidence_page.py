"""Evidence by CID in the browser and the API: verified, and every text escaped."""

import pytest

from apps.chain.evidence import LocalBlobStore, default_store
from lib import records
from lib.cid import cid_for

pytestmark = pytest.mark.django_db

ATTACK = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
MODEL, OTHER = "0x" + "11" * 32, "0x" + "22" * 32


@pytest.fixture
def store(settings, tmp_path):
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    return default_store()


@pytest.fixture
def evidence_cid(store):
    rec = records.interaction_evidence(
        interaction_id="0x" + "44" * 32, context_id="0x" + "33" * 32, context_name=f"ctx {ATTACK}",
        prompt=f"Say {ATTACK}", model_id=MODEL, answer=f"Sure: {ATTACK}",
        references=[{"model": OTHER, "text": f"ref {ATTACK}", "score": 625 * 10**15}],
        metric={"name": "bertscore-f1", "params": {"layers": "6"}}, sa=625 * 10**15, wa=5 * 10**17)
    return store.put(records.canonical(rec))


def test_the_page_shows_prompt_answer_references_and_scores_escaped(client, evidence_cid):
    page = client.get(f"/evidence/{evidence_cid}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "<script>window.pwned" not in html and "<img src=x" not in html
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
    assert html.count("&lt;img src=x onerror=") == 4  # context, prompt, answer, reference
    assert "0.6250" in html and "0.5000" in html
    assert evidence_cid in html


def test_the_answering_and_reference_models_are_named_escaped(client, evidence_cid):
    from apps.chat.models import RegisteredModel
    from tests.personas import developer

    owner = developer()
    RegisteredModel.objects.create(owner=owner, name="answerer-7b", provider="p", model_id=MODEL, metadata_cid="bafy1")
    RegisteredModel.objects.create(owner=owner, name=f"ref{ATTACK}"[:100], provider="p", model_id=OTHER,
                                   metadata_cid="bafy2")
    html = client.get(f"/evidence/{evidence_cid}/").content.decode()
    assert '<span class="model-name">answerer-7b</span>' in html
    assert '<span class="model-name">ref&lt;script&gt;window.pwned=1&lt;/script&gt;' in html
    assert f'title="{OTHER}"' in html and "<script>window.pwned" not in html
    RegisteredModel.objects.filter(model_id=OTHER).delete()  # a model the site does not list: said so
    assert "a model this site does not list" in client.get(f"/evidence/{evidence_cid}/").content.decode()


def test_the_api_returns_the_parsed_record(client, evidence_cid):
    body = client.get(f"/api/evidence/{evidence_cid}").json()
    assert body["cid"] == evidence_cid
    assert body["schema"] == records.EVIDENCE_SCHEMA
    assert body["record"]["references"][0]["model"] == OTHER
    assert body["record"]["prompt"] == f"Say {ATTACK}"


def test_raw_bytes_are_served_as_a_download_never_as_html(client, store):
    cid = store.put(ATTACK.encode())
    raw = client.get(f"/evidence/{cid}/raw")
    assert raw.status_code == 200 and raw.content == ATTACK.encode()
    assert raw["Content-Type"] == "application/octet-stream"
    assert raw["X-Content-Type-Options"] == "nosniff"
    assert raw["Content-Disposition"].startswith("attachment")


def test_plain_text_that_is_not_a_record_is_shown_escaped(client, store):
    cid = store.put(ATTACK.encode())
    html = client.get(f"/evidence/{cid}/").content.decode()
    assert "Not an LLMChain record" in html
    assert "<script>window.pwned" not in html


@pytest.mark.parametrize("path", ["/evidence/{cid}/", "/api/evidence/{cid}"])
def test_bad_missing_and_corrupt_cids_get_clear_errors(client, store, path):
    assert client.get(path.format(cid="nonsense")).status_code == 400
    missing = client.get(path.format(cid=cid_for(b"nobody stored this")))
    assert missing.status_code == 404
    assert "No store holds" in missing.content.decode()
    cid = store.put(b"genuine")
    LocalBlobStore(store.local.root).path(cid).write_bytes(b"tampered")
    corrupt = client.get(path.format(cid=cid))
    assert corrupt.status_code == 502
    assert "do not match" in corrupt.content.decode()
    assert "tampered" not in corrupt.content.decode()
