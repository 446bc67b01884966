"""A wallet user, in a real browser: the wallet is a real signer (ethers, from npm, served
from node_modules) injected as the page's EIP-1193 provider (`window.ethereum`), not a mock of the
site. Alice links it on her account page by signing the sign-in message; her next answer is recorded
under the wallet, she rates it, the wallet signs the request, and the rating lands on-chain as the
wallet's, relayed through the forwarder by the site's relayer (the page saves the rating and answers at
once; the oracle's worker queues it on-chain, so that worker runs here as it does on a site). A rating whose signature the wallet
refuses is not sent, and the page says so."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from eth_account import Account
from eth_utils import to_checksum_address
from playwright.sync_api import expect

from apps.chain import outbox
from apps.chain.audit import hum_eval_calls
from apps.chain.keys import oracle_address, relayer_address
from apps.chain.ledger import default_ledger
from apps.chain.models import LedgerInteraction
from apps.chain.models import OutboxItem
from apps.chat.accounts import registration_of
from apps.chat.models import Conversation, Interaction, Profile, Rating
from lib.ids import b32

from .test_layout_in_browser import open_as
from .world import build

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ETHERS = Path(__file__).resolve().parents[2] / "node_modules" / "ethers" / "dist" / "ethers.umd.min.js"
ON_CHAIN_S = 90
# The injected wallet: an ethers Wallet answering the EIP-1193 requests the site makes. Setting
# window.__walletRefuses makes it refuse (code 4001), as a person pressing "Reject" does.
PROVIDER = """
(() => {
  const wallet = new ethers.Wallet(%(key)s);
  window.__walletCalls = [];
  const refuse = () => { const e = new Error("User rejected the request."); e.code = 4001; throw e; };
  window.ethereum = {
    async request({ method, params }) {
      window.__walletCalls.push(method);
      if (window.__walletRefuses) refuse();
      if (method === "eth_requestAccounts" || method === "eth_accounts") return [wallet.address];
      if (method === "eth_chainId") return "0x7a69";
      if (method === "personal_sign") {
        if (params[1].toLowerCase() !== wallet.address.toLowerCase()) throw new Error("not this wallet's address");
        return await wallet.signMessage(ethers.getBytes(params[0]));
      }
      if (method === "eth_signTypedData_v4") {
        if (params[0].toLowerCase() !== wallet.address.toLowerCase()) throw new Error("not this wallet's address");
        const typed = JSON.parse(params[1]);
        const types = Object.assign({}, typed.types);
        delete types.EIP712Domain;
        return await wallet.signTypedData(typed.domain, types, typed.message);
      }
      const e = new Error("unsupported method " + method); e.code = 4200; throw e;
    },
  };
})();
"""
ANSWERS = {"reliability": 5, "completeness": 4, "utility": 4, "familiarity": 3, "trust": 4, "uncertainty": 2}


@pytest.fixture
def world(site, tmp_path):
    return build(tmp_path)


def _with_wallet(context, key: str) -> None:
    assert ETHERS.is_file(), "ethers comes from npm (package.json): run `make install`"
    context.add_init_script(path=str(ETHERS))
    context.add_init_script(script=PROVIDER % {"key": json.dumps(key)})


def _answer_scored(conversation: Conversation, prompt: str) -> Interaction:
    """A new answer in alice's conversation, scored: what the chat and the oracle do (the oracle names
    the profile's rating address, her wallet now, and waits for its registration)."""
    interaction = Interaction.objects.create(conversation=conversation, prompt=prompt, answer="Four.",
                                             status=Interaction.Status.DONE, interaction_id="0x" + secrets.token_hex(32))
    user = Profile.objects.get(user_id=conversation.user_id).rating_address
    waits = [registration_of(user), OutboxItem.objects.filter(key=f"addModel:{conversation.model.model_id}").exclude(
        status="confirmed").first()]
    outbox.enqueue("autoEval", oracle_address(), {
        "interactionId": interaction.interaction_id, "modelId": conversation.model.model_id,
        "contextId": conversation.context.context_id, "user": user, "hasReference": False, "sA": "0", "wA": "0",
        "evidenceCid": "bafkreiwallettest"}, depends_on=next((w for w in waits if w is not None), None))
    return interaction


def _fill(section, form) -> None:
    """Answer the questionnaire, unfolding it first: only the latest unrated answer shows it open."""
    fold = section.locator("details.rate")
    if fold.get_attribute("open") is None:
        section.locator("details.rate > summary").click()
    for field, value in ANSWERS.items():
        form.locator(f'fieldset[data-field="{field}"] input[value="{value}"]').check()


def test_a_wallet_user_links_a_wallet_and_rates_and_the_chain_shows_the_wallet_signed(site, oracle_worker, chromium, world,
                                                                                      shot):
    wallet = Account.create()
    context, page = open_as(chromium, site, "alice")
    _with_wallet(context, "0x" + bytes(wallet.key).hex())
    try:
        page.goto("/account/")
        expect(page.locator("main")).to_contain_text("the site could sign a rating in your name")
        page.get_by_role("button", name="Link a wallet").click()
        expect(page.locator("main")).to_contain_text(f"Your wallet {wallet.address} is linked")
        shot(page, "wallet-linked")
        profile = Profile.objects.get(user__username="alice")
        assert profile.wallet_address == wallet.address

        conversation = Conversation.objects.get(pk=world.conversation)
        signed = _answer_scored(conversation, "What is 2+2, signed by my wallet?")
        refused = _answer_scored(conversation, "What is 3+1, which my wallet will not sign?")

        page.goto(f"/chat/{world.conversation}/")
        section = page.locator(f"#rating-{signed.pk}")
        form = section.locator("form.questionnaire")
        expect(form).to_contain_text(f"Your wallet {wallet.address} signs this rating")
        _fill(section, form)
        form.get_by_role("button", name="Sign with my wallet and send").click()
        expect(section.locator("p.signer")).to_contain_text(f"Signed by your wallet {wallet.address}")
        rating = Rating.objects.get(interaction=signed)
        assert rating.signer == wallet.address and rating.request["from"] == wallet.address
        assert "eth_signTypedData_v4" in page.evaluate("window.__walletCalls")

        # The wallet refuses: nothing is sent, and the page says so.
        page.evaluate("window.__walletRefuses = true")
        other = page.locator(f"#rating-{refused.pk} form.questionnaire")
        _fill(page.locator(f"#rating-{refused.pk}"), other)
        other.get_by_role("button", name="Sign with my wallet and send").click()
        expect(other.locator(".wallet-status")).to_contain_text("Your wallet refused to sign, so the rating was not sent")
        shot(page, "wallet-refused")
        assert not Rating.objects.filter(interaction=refused).exists()
        page.evaluate("window.__walletRefuses = false")

        # On-chain: the interaction's human evaluation is the wallet's, relayed by the site's relayer.
        ledger = default_ledger()
        site.wait("the wallet's rating on-chain and indexed", lambda: LedgerInteraction.objects.filter(
            interaction_id=signed.interaction_id).exclude(human_tx="").exists(), ON_CHAIN_S)
        record = ledger.view("reputation", "interaction", b32(signed.interaction_id))
        assert record[2] == wallet.address and record[8], "the interaction's user is the wallet, and it is rated"
        tx = ledger.client.request("eth_getTransactionByHash", [LedgerInteraction.objects.get(
            interaction_id=signed.interaction_id).human_tx])
        assert tx["to"].lower() == ledger.deployment.forwarder.lower()
        assert tx["from"].lower() == relayer_address().lower() != wallet.address.lower()
        [(signer, args)] = [c for c in hum_eval_calls(ledger, tx) if c[1][0] == b32(signed.interaction_id)]
        assert to_checksum_address(signer) == wallet.address and list(args[1:]) == list(ANSWERS.values())
        page.goto(f"/reputation/{conversation.model.model_id}/")
        row = page.locator(f'tr[data-interaction="{signed.interaction_id}"] td.signer')
        expect(row).to_contain_text("the rater's wallet")
        expect(row).to_contain_text("(relayed)")
    finally:
        context.close()
