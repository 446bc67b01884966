"""The model reputation page: metadata verified against its CID, REP per context, the chart's data
and the latest evaluations, all from indexed chain rows; untrusted text escaped."""

import json
import re

import pytest

from apps.chain.evidence import default_store
from apps.chain.models import Context, LedgerInteraction, LedgerModel
from apps.chat.models import RegisteredModel
from apps.leaderboard.models import BoardEntry
from lib import records
from lib.cid import cid_for
from tests.personas import user

pytestmark = pytest.mark.django_db

WAD = 10**18
GLOBAL = "0x" + "00" * 32
WRITING = "0x" + "ab" * 32
MATH = "0x" + "cd" * 32
MODEL = "0x" + "5e" * 32
OWNER = "0x" + "a1" * 20
ATTACK = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


def tx(n: int) -> str:
    return "0x" + f"{n:064x}"


@pytest.fixture
def store(settings, tmp_path):
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    return default_store()


def publish(store, **fields) -> str:
    base = {"name": "lighthouse-7b", "provider": "Harbour Labs", "owner": OWNER, "endpoint_kind": "openai-chat",
            "parameters": "7B", "licence": "Apache-2.0", "description": "Answers questions about the sea.",
            "model_name": "lighthouse-7b-instruct", "contexts": ["math", "writing"]}
    return store.put(records.canonical(records.model_metadata(**{**base, **fields})))


def entry(context_id: str, *, r: float, ra: float, rh: float, n_auto: int, n_human: int, history=None, **extra):
    history = history or {"i": [1, 2, 3], "ra": [0.5, 0.6, ra], "rh": [0.5, 0.5, rh], "r": [0.5, 0.55, r]}
    return BoardEntry.objects.create(model_id=MODEL, context_id=context_id, name="lighthouse-7b", ra=int(ra * WAD),
                                     rh=int(rh * WAD), r=int(r * WAD), n_auto=n_auto, n_human=n_human,
                                     block_number=40, spark=history["r"], history=history, **extra)


@pytest.fixture
def model(store):
    """lighthouse-7b on-chain, evaluated in `writing` and `math` (and so globally)."""
    cid = publish(store)
    LedgerModel.objects.create(model_id=MODEL, owner=OWNER, metadata_cid=cid, block_number=12)
    Context.objects.create(context_id=WRITING, name="writing", block_number=2)
    Context.objects.create(context_id=MATH, name="math", block_number=3)
    entry(WRITING, r=0.7125, ra=0.8125, rh=0.625, n_auto=2, n_human=1, band_lo=0.61, band_hi=0.78, band_n=1)
    entry(MATH, r=0.4375, ra=0.375, rh=0.5, n_auto=1, n_human=0,
          history={"i": [1], "ra": [0.375], "rh": [0.5], "r": [0.4375]})
    entry(GLOBAL, r=0.6, ra=0.65, rh=0.6, n_auto=3, n_human=1,
          history={"i": [1, 2, 3, 4], "ra": [0.5, 0.6, 0.55, 0.65], "rh": [0.5, 0.5, 0.5, 0.6],
                   "r": [0.5, 0.52, 0.53, 0.6]})
    return cid


def evaluation(n: int, context_id: str, block: int, *, sh=None, wh=None, human_tx="", reputation_tx="", cid=None):
    return LedgerInteraction.objects.create(
        interaction_id=tx(n), model_id=MODEL, context_id=context_id, user=OWNER, has_reference=True,
        sa=int(0.8125 * WAD), wa=int(0.25 * WAD), evidence_cid=cid or cid_for(f"evidence {n}".encode()),
        auto_tx=tx(1000 + n), auto_block=block, sh=sh, wh=wh, human_tx=human_tx, reputation_tx=reputation_tx)


def get(client, model_id=MODEL):
    return client.get(f"/reputation/{model_id}/")


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def row_text(html: str, attr: str, value: str) -> str:
    """The text of the table row <tr attr="value">."""
    start = html.index(f'<tr {attr}="{value}"')
    return text_of(html[start:html.index("</tr>", start)])


def test_the_metadata_is_shown_and_said_to_be_verified_against_its_cid(client, model):
    response = get(client)
    html = response.content.decode()
    assert response.status_code == 200
    text = text_of(html)
    assert "verified against its CID" in text
    assert f'href="/evidence/{model}/"' in html
    for shown in ("lighthouse-7b", "Harbour Labs", "7B", "Apache-2.0", "Answers questions about the sea.",
                  "lighthouse-7b-instruct", "math, writing"):
        assert shown in text, shown
    assert OWNER in html and "in block 12" in text
    assert "could not be verified" not in text


def test_a_tampered_metadata_blob_is_refused_and_the_page_still_renders(client, model, store):
    store.local.path(model).write_bytes(records.canonical(records.model_metadata(
        name="impostor", provider="Someone Else", owner=OWNER, endpoint_kind="openai-chat")))
    response = get(client)
    text = text_of(response.content.decode())
    assert response.status_code == 200
    assert "The metadata could not be verified" in text and "do not match this CID" in text
    assert "verified against its CID" not in text
    assert "impostor" not in text and "Someone Else" not in text
    assert model in text  # the CID is still shown, and the REP tables too
    assert "0.7125" in text


def test_missing_metadata_is_said_plainly(client, model, store):
    store.local.path(model).unlink()
    response = get(client)
    text = text_of(response.content.decode())
    assert response.status_code == 200
    assert "could not be verified" in text and "No store this site reaches holds this CID" in text


def test_script_in_the_metadata_is_escaped(client, store):
    cid = publish(store, name="evil", description=f"Hello {ATTACK}", provider=f"P {ATTACK}")
    LedgerModel.objects.create(model_id=MODEL, owner=OWNER, metadata_cid=cid, block_number=5)
    entry(GLOBAL, r=0.5, ra=0.5, rh=0.5, n_auto=1, n_human=0)
    html = get(client).content.decode()
    assert "<script>window.pwned" not in html and "<img src=x" not in html
    assert html.count("&lt;script&gt;window.pwned=1&lt;/script&gt;") == 2


def test_a_script_in_the_name_or_a_context_name_is_escaped_in_the_page_and_the_chart_data(client, store):
    cid = publish(store, name=f"x{ATTACK}")
    LedgerModel.objects.create(model_id=MODEL, owner=OWNER, metadata_cid=cid, block_number=5)
    Context.objects.create(context_id=WRITING, name=f"w{ATTACK}", block_number=2)
    entry(GLOBAL, r=0.5, ra=0.5, rh=0.5, n_auto=1, n_human=0)
    entry(WRITING, r=0.5, ra=0.5, rh=0.5, n_auto=1, n_human=0)
    evaluation(1, WRITING, 20)
    html = get(client).content.decode()
    assert "<script>window.pwned" not in html and "<img src=x" not in html
    assert "<title>x&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
    assert "w&lt;script&gt;window.pwned=1&lt;/script&gt;" in html  # the tables
    assert "w\\u003Cscript\\u003Ewindow.pwned=1" in html  # the chart's JSON


def test_an_evidence_cid_on_chain_that_is_not_a_cid_is_shown_as_such(client, model):
    evaluation(1, WRITING, 20, cid="not/a cid<b>")
    response = get(client)
    html = response.content.decode()
    assert response.status_code == 200
    assert 'title="not/a cid&lt;b&gt;">not a CID</code>' in html


@pytest.mark.parametrize("bad", ["0x1234", "0x" + "zz" * 32, "5e" * 33, "0x" + "5e" * 33, "hello"])
def test_a_malformed_model_id_is_a_400_saying_what_an_id_is(client, bad):
    response = get(client, bad)
    assert response.status_code == 400
    assert "0x followed by 64 hexadecimal digits" in response.content.decode()


def test_an_unknown_model_is_a_404(client, model):
    assert get(client, "0x" + "77" * 32).status_code == 404


def test_a_model_known_only_by_its_reputations_is_shown_without_metadata(client):
    entry(GLOBAL, r=0.5, ra=0.5, rh=0.5, n_auto=1, n_human=0)
    response = get(client, MODEL.upper().replace("0X", "0x"))  # ids are read case-insensitively
    text = text_of(response.content.decode())
    assert response.status_code == 200
    assert "not read from the chain yet" in text and "Global" in text


def test_reputation_per_context_global_first(client, model):
    html = get(client).content.decode()
    table = html[html.index('class="board model-contexts"'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r'<tr data-context="(0x[0-9a-f]{64})">', table)
    assert rows == [GLOBAL, MATH, WRITING]  # Global, then by name
    text = text_of(table)
    assert "Global" in text and "writing" in text and "math" in text
    writing = row_text(table, "data-context", WRITING)
    assert writing.split()[:3] == ["writing", "0.7125", "0.6100–0.7800"]
    assert "0.8125" in writing and "0.6250" in writing
    for value in ("0.8125", "0.6250", "0.4375", "0.3750"):
        assert value in text
    assert f'href="/?context={WRITING}"' in table


def test_the_chart_data_carries_each_contexts_history(client, model):
    html = get(client).content.decode()
    assert 'src="/static/vendor/chart.js/chart.umd.min.js"' in html
    assert 'src="/static/js/model_chart.js"' in html
    found = re.search(r'<script id="rep-history" type="application/json">(.*?)</script>', html, re.S)
    assert found
    data = json.loads(found.group(1))
    by_name = {c["name"]: c for c in data["contexts"]}
    assert [c["name"] for c in data["contexts"]] == ["Global", "math", "writing"]
    assert by_name["writing"] == {"id": WRITING, "name": "writing", "i": [1, 2, 3], "ra": [0.5, 0.6, 0.8125],
                                  "rh": [0.5, 0.5, 0.625], "r": [0.5, 0.55, 0.7125]}
    assert by_name["Global"]["i"] == [1, 2, 3, 4] and by_name["math"]["r"] == [0.4375]


def test_the_page_works_without_javascript(client, model):
    html = get(client).content.decode()
    assert re.search(r'<section class="rep-chart" id="rep-chart" hidden>', html)  # shown by the script only
    assert "<table" in html


def test_the_latest_evaluations_are_listed_newest_first_with_cids_and_transactions(client, model, store):
    evidence = store.put(b"some evidence bytes")
    evaluation(1, WRITING, 20)
    evaluation(2, MATH, 30, cid=evidence)
    evaluation(3, WRITING, 25, sh=int(0.9 * WAD), wh=int(0.375 * WAD), human_tx=tx(2003), reputation_tx=tx(3003))
    evaluation(4, WRITING, 30)  # same block as 2: by interaction id
    html = get(client).content.decode()
    section = html[html.index('<section class="evaluations">'):]
    rows = re.findall(r'<tr data-interaction="(0x[0-9a-f]{64})">', section)
    assert rows == [tx(2), tx(4), tx(3), tx(1)]
    assert f'href="/evidence/{evidence}/"' in section
    assert f'title="{tx(1002)}"' in section and f'title="{tx(2003)}"' in section and f'title="{tx(3003)}"' in section
    assert f"{tx(2003)[:10]}…{tx(2003)[-4:]}" in section
    row3 = row_text(section, "data-interaction", tx(3))
    assert "writing" in row3 and "0.8125" in row3 and "0.2500" in row3 and "0.9000" in row3 and "0.3750" in row3
    assert " rating 0x" in row3 and "reputation update 0x" in row3
    row1 = row_text(section, "data-interaction", tx(1))
    assert "—" in row1 and "rating 0x" not in row1 and "automatic score 0x" in row1
    math_row = row_text(section, "data-interaction", tx(2))
    assert "math" in math_row


def test_only_the_latest_twenty_evaluations_are_listed(client, model):
    for n in range(1, 26):
        evaluation(n, WRITING, 100 + n)
    section = get(client).content.decode().split('<section class="evaluations">')[1]
    rows = re.findall(r'<tr data-interaction="(0x[0-9a-f]{64})">', section)
    assert rows == [tx(n) for n in range(25, 5, -1)]


def test_the_chat_model_page_and_this_page_link_each_other(client, model):
    owner = user()
    registered = RegisteredModel.objects.create(owner=owner, name="lighthouse-7b", provider="Harbour Labs",
                                                model_id=MODEL, metadata_cid=model)
    html = get(client).content.decode()
    assert f'href="/models/{registered.pk}/"' in html
    chat_page = client.get(f"/models/{registered.pk}/").content.decode()
    assert f'href="/reputation/{MODEL}/"' in chat_page


def test_the_board_links_to_the_model_page(client, model):
    html = client.get("/", {"context": WRITING}).content.decode()
    assert f'href="/reputation/{MODEL}/"' in html
