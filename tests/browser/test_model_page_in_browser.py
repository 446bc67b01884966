"""Real-browser test of the model reputation page: a replay model is registered (metadata on IPFS,
addModel through the outbox), evaluated on the real chain (three autoEvals from the oracle, two of
them rated by a user of its own), indexed by the running worker; then a visitor opens the board,
clicks the model and sees its verified metadata, its REP per context and the Chart.js chart of
Ra, Rh and R drawn from the same history as the tables. Screenshots go to
test-artifacts/screenshots/."""

from __future__ import annotations

import re
import secrets

import pytest
from playwright.sync_api import expect

from apps.chain import outbox
from apps.chain.client import ChainClient
from apps.chain.evidence import default_store
from apps.chain.keys import admin_address, new_key, oracle_address
from apps.chain.ledger import default_ledger
from apps.chain.models import Context, LedgerInteraction, LedgerModel, Registration
from apps.chat.models import RegisteredModel
from apps.chat.replay import import_mtbench
from apps.leaderboard.models import BoardEntry
from lib import records
from lib.ids import b32
from tests.chat.factories import write_mtbench
from tests.browser.conftest import wait_for_js

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WAD = 10**18
GLOBAL = "0x" + "00" * 32
DAY_S = 86_400
NAME = "tidewatch-7b"  # a name of its own: the chain lives for the whole test session
QUESTION = "Describe a tide pool at noon in one sentence."
# (Sa, wa) of three automatic evaluations; the first two are then rated by the test's user.
SCORES = [(0.9, 0.5), (0.4, 0.5), (0.75, 0.5)]
RATINGS = [{"reliability": 5, "completeness": 5, "utility": 4, "familiarity": 4, "trust": 5, "uncertainty": 1},
           {"reliability": 2, "completeness": 2, "utility": 3, "familiarity": 3, "trust": 4, "uncertainty": 2}]
CHART_POINTS = """() => {
    const canvas = document.getElementById('rep-chart-canvas');
    const chart = window.Chart && Chart.getChart(canvas);
    if (!chart) return null;
    return {context: canvas.dataset.context, width: chart.width, height: chart.height,
            datasets: chart.data.datasets.map((d, k) => ({
                key: d.key, label: d.label, points: d.data.map(p => [p.x, p.y]),
                drawn: chart.getDatasetMeta(k).data.length}))};
}"""
# How much of the canvas the chart painted: a blank canvas has no opaque pixel.
PAINTED = """() => {
    const c = document.getElementById('rep-chart-canvas');
    const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let k = 3; k < px.length; k += 4) if (px[k] > 0) n++;
    return n / (c.width * c.height);
}"""


def register_replay_model(tmp_path) -> RegisteredModel:
    root = write_mtbench(tmp_path / "mt_bench", {1: ("writing", [QUESTION, "Shorter."])},
                         {NAME: {1: ["Small crabs hide under the rocks while the sun shines into the clear pool.",
                                     "Crabs hide in a sunny pool."]}})
    import_mtbench(root, contexts=list(Context.objects.all()), progress=lambda _: None)
    return RegisteredModel.objects.get(name=NAME)


def evaluate_on_chain(site, model: RegisteredModel, context: Context) -> list[str]:
    """Queue what the oracle and a rating would queue: autoEval with its evidence on IPFS, then humEval
    and updateReputation from the user's own key. Returns the interaction ids."""
    user = new_key(label="rater").address
    outbox.enqueue("register", admin_address(), {"account": user, "role": "user"})
    site.wait("the model and the user on-chain",
              lambda: LedgerModel.objects.filter(model_id=model.model_id).exists()
              and Registration.objects.filter(address__iexact=user).exists(), 60)
    # A day on, so that the user's first rating counts fully (D counts from the registration).
    client = ChainClient(site.chain.url)
    client.request("evm_increaseTime", [DAY_S])
    client.request("evm_mine", [])
    store, oracle, ids = default_store(), oracle_address(), []
    for n, (sa, wa) in enumerate(SCORES):
        iid = "0x" + secrets.token_hex(32)
        answer = f"Answer {n + 1}: small crabs hide under the rocks."
        reference = {"model": "0x" + secrets.token_hex(32), "text": "Crabs and weed in warm water.",
                     "score": int(sa * WAD)}
        cid = store.put(records.canonical(records.interaction_evidence(
            interaction_id=iid, context_id=context.context_id, context_name=context.name, prompt=QUESTION,
            model_id=model.model_id, answer=answer, references=[reference], metric={"name": "test", "params": {}},
            sa=int(sa * WAD), wa=int(wa * WAD))))
        auto = outbox.enqueue("autoEval", oracle, {
            "interactionId": iid, "modelId": model.model_id, "contextId": context.context_id, "user": user,
            "hasReference": True, "sA": int(sa * WAD), "wA": int(wa * WAD), "evidenceCid": cid})
        if n < len(RATINGS):
            hum = outbox.enqueue("humEval", user, {"interactionId": iid, **RATINGS[n]}, depends_on=auto)
            outbox.enqueue("updateReputation", user, {"interactionId": iid}, depends_on=hum)
        ids.append(iid)
    return ids


def settled(ledger, model, interaction_ids, context_ids) -> list[BoardEntry] | None:
    """The model's board entries in these contexts, once the last updateReputation is indexed and each
    entry holds the REP the contract holds now (humEval moves n_human before updateReputation moves R)."""
    rated = LedgerInteraction.objects.filter(interaction_id__in=interaction_ids).exclude(reputation_tx="")
    if rated.count() < len(RATINGS):
        return None
    found = []
    for context_id in context_ids:
        e = BoardEntry.objects.filter(model_id=model.model_id, context_id=context_id).first()
        if e is None or (e.ra, e.rh, e.r, e.n_auto, e.n_human) != ledger.reputation(b32(model.model_id),
                                                                                    b32(context_id)):
            return None
        found.append(e)
    return found


def chart_of(page) -> dict:
    wait_for_js(page, f"({CHART_POINTS})() !== null")
    return page.evaluate(CHART_POINTS)


def expected_points(history: dict) -> dict[str, list[list[float]]]:
    return {key: [[i, v] for i, v in zip(history["i"], history[key])] for key in ("r", "ra", "rh")}


def test_a_visitor_opens_a_model_from_the_board_and_sees_its_metadata_and_reputation_chart(site, page, shot, tmp_path):
    model = register_replay_model(tmp_path)
    writing = Context.objects.get(name="writing")
    interaction_ids = evaluate_on_chain(site, model, writing)
    ledger = default_ledger()
    entry, global_entry = site.wait("every evaluation indexed and the board entries equal to the chain's REP",
                                    lambda: settled(ledger, model, interaction_ids, (writing.context_id, GLOBAL)), 90)

    # The board lists the model; its name links to the model page. (Reduced motion: the chart is drawn
    # without animation, so the screenshots show it finished.)
    page.emulate_media(reduced_motion="reduce")
    page.goto(f"/?context={writing.context_id}")
    link = page.locator(f'table.board a[href="/reputation/{model.model_id}/"]')
    expect(link).to_have_text(NAME)
    shot(page, "board")
    link.click()
    expect(page).to_have_url(re.compile(rf"/reputation/{model.model_id}/$"))
    expect(page.locator("h1")).to_contain_text(NAME)

    # Metadata, read from IPFS and checked against the CID the chain holds.
    ledger_row = LedgerModel.objects.get(model_id=model.model_id)
    metadata = page.locator("section.metadata")
    expect(metadata.locator("p.verified")).to_contain_text("verified against its CID")
    expect(metadata.locator(f'a.cid[href="/evidence/{ledger_row.metadata_cid}/"]')).to_have_count(1)
    expect(metadata).to_contain_text("MT-Bench recorded answers (lm-sys/FastChat)")
    expect(metadata).to_contain_text("Apache-2.0 (answers data)")
    expect(page.locator("dl.onchain code.owner")).to_have_text(ledger_row.owner)
    expect(page.locator("dl.onchain")).to_contain_text(f"in block {ledger_row.block_number}")
    expect(page.locator("a.chat-model")).to_have_attribute("href", f"/models/{model.pk}/")

    # The REP per context, as the chain holds it.
    for context_id, name in ((GLOBAL, "Global"), (writing.context_id, "writing")):
        ra, rh, r, n_auto, n_human = ledger.reputation(b32(model.model_id), b32(context_id))
        row = page.locator(f'table.model-contexts tr[data-context="{context_id}"]')
        expect(row.locator("td").first).to_have_text(name)
        expect(row.locator("td.r")).to_have_text(f"{r / WAD:.4f}")
        expect(row.locator("td.ra")).to_have_text(f"{ra / WAD:.4f}")
        expect(row.locator("td.rh")).to_have_text(f"{rh / WAD:.4f}")
        assert (n_auto, n_human) == (3, 2)

    # The chart: Chart.js drew the global context first, with the entry's R, Ra and Rh points.
    chart = chart_of(page)
    assert chart["context"] == GLOBAL
    assert {d["key"]: d["points"] for d in chart["datasets"]} == expected_points(global_entry.history)
    assert [d["label"] for d in chart["datasets"]] == ["R", "Ra (automatic)", "Rh (human)"]
    assert all(d["drawn"] == len(global_entry.history["i"]) for d in chart["datasets"])
    assert chart["width"] > 300 and chart["height"] > 200
    assert page.evaluate(PAINTED) > 0.005, "the canvas is blank"
    shot(page, "model-page")

    # Switching to `writing` redraws it with that context's history, ending at the REP.
    option = page.locator("#rep-chart-context option", has_text="writing")
    page.select_option("#rep-chart-context", value=option.get_attribute("value"))
    wait_for_js(page, "document.getElementById('rep-chart-canvas').dataset.context === "
                f"'{writing.context_id}'")
    chart = chart_of(page)
    points = {d["key"]: d["points"] for d in chart["datasets"]}
    assert points == expected_points(entry.history)
    # every ReputationUpdated of the pair: 3 autoEvals, then per rating its humEval (Rh) and updateReputation (R)
    assert [x for x, _ in points["r"]] == list(range(1, len(SCORES) + 2 * len(RATINGS) + 1))
    ra, rh, r, *_ = ledger.reputation(b32(model.model_id), b32(writing.context_id))
    assert [points[k][-1][1] for k in ("r", "ra", "rh")] == pytest.approx([r / WAD, ra / WAD, rh / WAD], abs=1e-6)
    assert len({y for _, y in points["rh"]}) > 1, "the ratings moved Rh"
    shot(page, "model-page-writing")

    # The latest evaluations, newest first, with their evidence and transactions.
    rows = page.locator("table.evaluations tbody tr")
    expect(rows).to_have_count(len(SCORES))
    onchain = {i.interaction_id: i for i in LedgerInteraction.objects.filter(interaction_id__in=interaction_ids)}
    for iid, i in onchain.items():
        row = page.locator(f'table.evaluations tr[data-interaction="{iid}"]')
        expect(row.locator(f'a.cid[href="/evidence/{i.evidence_cid}/"]')).to_have_count(1)
        expect(row.locator(f'code.tx[title="{i.auto_tx}"]')).to_have_count(1)
        expect(row.locator("code.tx")).to_have_count(3 if i.sh is not None else 1)
    assert sum(i.sh is not None for i in onchain.values()) == 2

    # The model's registry page links back here.
    page.locator("a.chat-model").click()
    page.locator("a.reputation").click()
    expect(page).to_have_url(re.compile(rf"/reputation/{model.model_id}/$"))
    assert not page.console_errors, page.console_errors
