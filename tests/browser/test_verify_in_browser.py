"""A visitor opens /verify/ on the running site: the board it serves matches the board rebuilt from
the chain alone; once a cell of the board table is tampered with, the page says so and highlights
exactly that cell. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

import secrets

import pytest
from django.db.models import F
from playwright.sync_api import expect

from apps.chain import outbox
from apps.chain.evidence import default_store
from apps.chain.keys import admin_address, new_key, oracle_address
from apps.chain.models import OutboxItem, ReputationChange
from apps.leaderboard import entries
from apps.leaderboard.models import BoardEntry
from lib import records

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WAD = 10**18
LIKERT = [(5, 4, 4, 3, 4, 2), (2, 2, 3, 4, 3, 1)]


def rand_id() -> str:
    return "0x" + secrets.token_hex(32)


def rated_model_on_chain(site) -> tuple[str, str]:
    """A new context and model, two evaluations rated by two users, queued through the outbox as the
    site queues them; the site's ledger worker sends and indexes them. Returns (context, model)."""
    admin, oracle = admin_address(), oracle_address()
    dev, users = new_key("verify dev").address, [new_key(f"verify user {i}").address for i in range(2)]
    dev_reg = outbox.enqueue("register", admin, {"account": dev, "role": "developer"})
    user_regs = [outbox.enqueue("register", admin, {"account": u, "role": "user"}) for u in users]
    context, model = rand_id(), rand_id()
    ctx_item = outbox.enqueue("addContext", admin, {"contextId": context, "name": "limericks"})
    cid = default_store().put(records.canonical(records.model_metadata(
        name="verse-3b", provider="test", owner=dev, endpoint_kind="replay")))
    added = outbox.enqueue("addModel", dev, {"modelId": model, "metadataCid": cid}, depends_on=dev_reg)
    site.wait("the model, its context and the users on-chain", lambda: all(
        OutboxItem.objects.get(pk=i.pk).status == "confirmed" for i in (added, ctx_item, *user_regs)), 60)
    names = ("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")
    for user, answers in zip(users, LIKERT):
        iid = rand_id()
        auto = outbox.enqueue("autoEval", oracle, {
            "interactionId": iid, "modelId": model, "contextId": context, "user": user, "hasReference": True,
            "sA": str(6 * 10**17), "wA": str(WAD // 2), "evidenceCid": "bafyverifyevidence"})
        hum = outbox.enqueue("humEval", user, {"interactionId": iid, **dict(zip(names, answers))}, depends_on=auto)
        outbox.enqueue("updateReputation", oracle, {"interactionId": iid}, depends_on=hum)
    # Two autoEval, two humEval and two updateReputation moves; the board table is written in the
    # transaction that folds them.
    site.wait("both ratings and both updates indexed", lambda: ReputationChange.objects.filter(
        model_id=model, context_id=context).count() == 6, 90)
    return context, model


def test_the_verify_page_passes_then_shows_a_tampered_cell(site, page, shot):
    context, model = rated_model_on_chain(site)

    page.goto(f"/verify/?context={context}")
    verdict = page.locator("#verdict")
    expect(verdict).to_have_attribute("data-ok", "true")
    expect(verdict).to_contain_text("The served board matches the chain: 1 model, 22 cells checked.")
    row = page.locator(f'table.verify tr[data-model="{model}"]')
    expect(row.locator('td[data-column="name"] span.chain')).to_have_text("verse-3b")
    expect(row.locator('td[data-column="band_lo"] span.chain')).not_to_have_text("none")  # two ratings: a band
    expect(page.locator("td.mismatch")).to_have_count(0)
    shot(page, "verify-passes")

    # Tamper with the served board behind the indexer's back. Board pages are cached under the board
    # table's version, which the indexer bumps in the transaction that writes entries; a bare UPDATE
    # would change the table but leave the board page serving the cached copy, so bump it, exactly
    # as a real write of the table does: the board page then serves the forged R too.
    entry = BoardEntry.objects.get(model_id=model, context_id=context)
    BoardEntry.objects.filter(pk=entry.pk).update(r=F("r") + 10**15)
    entries.bump()
    page.goto(f"/?context={context}")
    expect(page.locator(f'table.board tr[data-model="{model}"] td.r')).to_have_text(f"{(entry.r + 10**15) / WAD:.4f}")

    page.goto(f"/verify/?context={context}")
    expect(verdict).to_have_attribute("data-ok", "false")
    expect(verdict).to_contain_text("1 cell differs")
    mismatch = page.locator("td.mismatch")
    expect(mismatch).to_have_count(1)
    expect(mismatch).to_have_attribute("data-column", "r")
    expect(row).to_have_attribute("data-ok", "false")
    served, chain = mismatch.locator("span.served").inner_text(), mismatch.locator("span.chain").inner_text()
    assert int(served.replace(".", "")) - int(chain.replace(".", "")) == 10**15, (served, chain)
    shot(page, "verify-fails")
    assert not page.console_errors, page.console_errors
