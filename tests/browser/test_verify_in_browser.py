"""A visitor opens /verify/ on the running site: the board it serves matches the board rebuilt from
the chain alone, again and again while new evaluations keep landing (each check compares the served
board with the chain at the block it was built up to); once a cell of the board table is tampered with, the page says so and highlights
exactly that cell. On a phone the verdict, passing and failing, reads on the first screen, the page
does not scroll sideways, and the tampered cell is reached by scrolling the table in its frame.
Screenshots go to test-artifacts/screenshots/."""

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

from .test_accessibility import SIZES
from .test_layout_in_browser import open_as

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WAD = 10**18
LIKERT = [(5, 4, 4, 3, 4, 2), (2, 2, 3, 4, 3, 1)]


def rand_id() -> str:
    return "0x" + secrets.token_hex(32)


def rated_model_on_chain(site) -> tuple[str, str, list[str]]:
    """A new context and model, two evaluations rated by two users, queued through the outbox as the
    site queues them; the site's ledger worker sends and indexes them. Returns (context, model, users)."""
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
    return context, model, users


def auto_eval(context: str, model: str, user: str, sa: int) -> OutboxItem:
    return outbox.enqueue("autoEval", oracle_address(), {
        "interactionId": rand_id(), "modelId": model, "contextId": context, "user": user, "hasReference": True,
        "sA": str(sa), "wA": str(WAD // 2), "evidenceCid": "bafyverifyevidence"})


@pytest.fixture
def phone(chromium, site):
    """A page at phone size, in a browser context of its own (no one signed in)."""
    context, page = open_as(chromium, site, None, "phone")
    page.console_errors = []
    page.on("console", lambda msg: msg.type == "error" and page.console_errors.append(msg.text))
    page.on("pageerror", lambda exc: page.console_errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()


def verdict_reads_on_a_phone(phone, context: str, ok: str, text: str):
    """/verify/ of `context` on a phone: the verdict says `text`, inside the screen's width and on its
    first screen, in letters big enough to read; the page does not scroll sideways (the table scrolls
    in its frame). Returns the verdict."""
    width, height = SIZES["phone"]["width"], SIZES["phone"]["height"]
    phone.goto(f"/verify/?context={context}")
    verdict = phone.locator("#verdict")
    expect(verdict).to_be_visible(timeout=30_000)  # the check is made by then (the desktop's)
    expect(verdict).to_have_attribute("data-ok", ok)
    expect(verdict).to_contain_text(text)
    for sel in ("#verdict", "#checked-block"):
        box = phone.locator(sel).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width and box["y"] + box["height"] <= height, (sel, box)
    assert verdict.evaluate("el => parseFloat(getComputedStyle(el).fontSize)") >= 12
    assert phone.evaluate("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"
    return verdict


def test_the_verify_page_passes_while_evaluations_land_then_shows_a_tampered_cell(site, page, phone, shot):
    context, model, users = rated_model_on_chain(site)

    page.goto(f"/verify/?context={context}")
    verdict = page.locator("#verdict")
    expect(verdict).to_have_attribute("data-ok", "true")
    expect(verdict).to_contain_text("The served board matches the chain: 1 model, 42 cells checked.")
    row = page.locator(f'table.verify tr[data-model="{model}"]')
    expect(row.locator('td[data-column="name"] span.chain')).to_have_text("verse-3b")
    expect(row.locator('td[data-column="band_lo"] span.chain')).not_to_have_text("none")  # two ratings: a band
    expect(page.locator("td.mismatch")).to_have_count(0)
    shot(page, "verify-passes")
    verdict_reads_on_a_phone(phone, context, "true", "The served board matches the chain: 1 model, 42 cells checked.")
    expect(phone.locator("td.mismatch")).to_have_count(0)
    shot(phone, "verify-passes-phone")

    # Evaluations keep landing while the visitor checks again and again: never a false alarm, and
    # each check names the block it was made at, later and later.
    blocks, sent = [], []
    for n in range(4):
        sent.append(auto_eval(context, model, users[n % 2], (3 + n) * 10**17))
        page.goto(f"/verify/?context={context}")
        expect(verdict).to_be_visible(timeout=30_000)  # a check not made yet reloads itself
        expect(verdict).to_have_attribute("data-ok", "true")
        blocks.append(int(page.locator("#checked-block").get_attribute("data-block")))
        page.wait_for_timeout(700)
    site.wait("the new evaluations indexed", lambda: ReputationChange.objects.filter(
        model_id=model, context_id=context).count() == 6 + len(sent), 60)
    page.goto(f"/verify/?context={context}")
    expect(verdict).to_be_visible(timeout=30_000)
    expect(verdict).to_have_attribute("data-ok", "true")
    blocks.append(int(page.locator("#checked-block").get_attribute("data-block")))
    assert blocks == sorted(blocks) and blocks[-1] > blocks[0], blocks

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
    # R, and the weighted score's range served from it (Rh's range is the R band moved by Rh - R).
    expect(verdict).to_contain_text("3 cells differ")
    expect(page.locator("td.mismatch")).to_have_count(3)
    expect(page.locator("table.verify tr[data-model] td.mismatch")).to_have_count(3)
    for column in ("weighted_low", "weighted_high"):
        expect(row.locator(f'td[data-column="{column}"]')).to_have_class("mismatch")
    expect(page.locator("ul.named")).to_contain_text("The low end of the weighted score of verse-3b in ")
    mismatch = row.locator('td[data-column="r"]')
    expect(mismatch).to_have_class("mismatch")
    expect(row).to_have_attribute("data-ok", "false")
    served, chain = mismatch.locator("span.served").inner_text(), mismatch.locator("span.chain").inner_text()
    assert int(served.replace(".", "")) - int(chain.replace(".", "")) == 10**15, (served, chain)
    shot(page, "verify-fails")

    # On a phone: the same verdict on the first screen; the tampered cell, a swipe away in the table's
    # frame, reads the same two values.
    verdict_reads_on_a_phone(phone, context, "false", "3 cells differ")
    cell = phone.locator(f'table.verify tr[data-model="{model}"] td[data-column="r"]')
    expect(cell).to_have_class("mismatch")
    cell.scroll_into_view_if_needed()
    expect(cell).to_be_in_viewport()
    box, frame = cell.bounding_box(), phone.locator(".verify-wrap").bounding_box()
    assert frame["x"] - 1 <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"] + 1, (box, frame)
    assert (cell.locator("span.served").inner_text(), cell.locator("span.chain").inner_text()) == (served, chain)
    expect(phone.locator("ul.named")).to_contain_text("The low end of the weighted score of verse-3b in ")
    assert phone.evaluate("document.documentElement.scrollWidth") <= SIZES["phone"]["width"]
    shot(phone, "verify-fails-phone")
    assert not page.console_errors, page.console_errors
    assert not phone.console_errors, phone.console_errors
