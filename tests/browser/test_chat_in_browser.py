"""Real-browser tests of the running site: sign-up, log in and out, chatting over the websocket
with the built-in model and with a replay model (escaped, never executed), and registering a
model as a developer until it is on-chain. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from apps.chain.models import Context, OutboxItem
from apps.chat.accounts import profile_of
from apps.chat.models import Interaction, RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.chat.replay import import_mtbench
from tests.chat.factories import write_mtbench
from tests.openai_endpoint import OpenAIEndpoint, dead_url
from tests.personas import PASSWORD, developer, user
from tests.browser.conftest import wait_for_js

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BUILTIN = "smollm2-135m-instruct"
ANSWER_TIMEOUT_MS = 180_000  # the built-in model answers on CPU

REPLAY_QUESTION = "Write a haiku about ledgers."
REPLAY_ANSWER = ('Ledgers glow <script>window.__pwned=1</script> in the snow, '
                 '<img src=x onerror="window.__pwned=2"> blocks rest.')

# Records, at each change of #messages, the last turn's status and its answer's length.
OBSERVE_MESSAGES = """() => {
  window.__obs = [];
  const box = document.querySelector('#messages');
  new MutationObserver(() => {
    const turns = box.querySelectorAll('.turn');
    const turn = turns[turns.length - 1];
    if (!turn) return;
    const answer = turn.querySelector('.answer');
    window.__obs.push({status: turn.dataset.status, len: answer ? answer.textContent.length : 0});
  }).observe(box, {childList: true, subtree: true, characterData: true});
}"""


# --- steps ---------------------------------------------------------------------------------------

def sign_up_in_browser(page, username: str) -> None:
    page.goto("/signup/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page).to_have_url(re.compile(r"/chat/$"))
    expect(page.locator("header .who")).to_have_text(username)


def log_in(page, username: str, password: str = PASSWORD) -> None:
    page.goto("/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(password)
    page.locator("main").get_by_role("button", name="Log in").click()


def start_chat(page, context: str, model_label: str) -> None:
    """On /chat/: pick a context (htmx reloads the model list), then the model, then start."""
    context_select = page.locator("select[name=context]")
    if context_select.evaluate("s => s.options[s.selectedIndex].text") != context:
        with page.expect_response(re.compile(r"/chat/models\?"), timeout=5_000):
            context_select.select_option(label=context)
    model_select = page.locator("#model-select select[name=model]")
    expect(model_select.locator("option", has_text=model_label)).to_have_count(1)
    model_select.select_option(label=model_label)
    page.get_by_role("button", name="Start chatting").click()
    expect(page).to_have_url(re.compile(r"/chat/\d+/$"))
    expect(page.locator("h1")).to_contain_text(context)
    wait_for_js(page, "window.__sockets.some(s => s.url.includes('/ws/chat/') && s.readyState === 1)")


def send_prompt(page, prompt: str) -> None:
    """Type `prompt` and send it; with a replay model, which offers its recorded questions instead of a
    free prompt, click the question."""
    page.evaluate(OBSERVE_MESSAGES)
    questions = page.locator("#replay-questions")
    if questions.count():
        expect(page.locator("#prompt")).to_have_count(0)
        questions.get_by_role("button", name=prompt).click()
    else:
        page.locator("#prompt").fill(prompt)
        page.get_by_role("button", name="Send").click()
    expect(page.locator("#messages .turn")).to_have_count(1)
    expect(page.locator("#messages .turn .bubble.user")).to_have_text(prompt)
    if not questions.count():
        expect(page.locator("#prompt")).to_have_value("")  # the form is reset once sent


def wait_answer(page, timeout_ms: int) -> str:
    turn = page.locator("#messages .turn").last
    expect(turn).to_have_attribute("data-status", re.compile(r"done|failed"), timeout=timeout_ms)
    assert turn.get_attribute("data-status") == "done", turn.inner_text()
    expect(page.locator("#chat-error")).to_be_empty()
    return turn.locator(".answer").inner_text()


# --- chatting ------------------------------------------------------------------------------------

def test_a_newcomer_signs_up_and_chats_with_the_built_in_model(site, page, shot, model_server, tmp_path):
    register_model(developer("dave"), ModelFields(
        name=BUILTIN, provider="LLMChain built-in", endpoint_url=model_server.url,
        endpoint_model=model_server.model, api_key=model_server.api_key))

    # A replay model runs in `math` too, with a better name for an alphabetical pick: it is never the default.
    root = write_mtbench(tmp_path / "mt_bench", {3: ("math", ["What is 2 + 2?", "And 3 + 3?"])},
                         {"abacus-1b": {3: ["4", "6"]}})
    import_mtbench(root, contexts=list(Context.objects.all()), progress=lambda _: None)

    sign_up_in_browser(page, "newcomer")
    expect(page.locator("select[name=context] option")).to_have_count(8)
    shot(page, "chat-index")
    with page.expect_response(re.compile(r"/chat/models\?"), timeout=5_000):
        page.locator("select[name=context]").select_option(label="math")
    default = page.locator("#model-select select[name=model]")
    expect(default.locator("option", has_text="abacus-1b (replay)")).to_have_count(1)
    assert default.evaluate("s => s.options[s.selectedIndex].text") == BUILTIN  # the default answers free prompts
    start_chat(page, "math", BUILTIN)
    send_prompt(page, "Write two sentences about the sea.")
    try:  # a picture of the answer half-written, if the model is not faster than the browser
        wait_for_js(page, """() => { const t = document.querySelector('#messages .turn');
            return t && t.dataset.status === 'streaming' && t.querySelector('.answer').textContent.length > 0; }""",
                    timeout=ANSWER_TIMEOUT_MS)
        shot(page, "chat-streaming")
    except PlaywrightTimeoutError:
        pass
    answer = wait_answer(page, ANSWER_TIMEOUT_MS)
    shot(page, "chat-page")

    assert answer.strip()
    observed = page.evaluate("window.__obs")
    streaming = [o["len"] for o in observed if o["status"] == "streaming" and o["len"] > 0]
    assert len(set(streaming)) >= 2, f"the answer did not stream: {observed}"
    # It grows piece by piece; a render as Markdown may drop a little syntax (`**`) on the way.
    assert streaming[-1] > streaming[0], f"the streamed answer did not grow: {observed}"
    assert max(streaming) <= len(Interaction.objects.get().answer) + 2
    assert observed[-1]["status"] == "done"
    assert not page.console_errors, page.console_errors


def test_a_recorded_answer_with_markup_is_shown_as_text_never_run(site, page, shot, tmp_path):
    root = write_mtbench(tmp_path / "mt_bench", {1: ("writing", [REPLAY_QUESTION, "Now make it rhyme."])},
                         {"poet-1b": {1: [REPLAY_ANSWER, "It rhymes."]}})
    counts = import_mtbench(root, contexts=list(Context.objects.all()), progress=lambda _: None)
    assert counts == {"models": 1, "answers": 2, "skipped": 0}

    sign_up_in_browser(page, "reader")
    start_chat(page, "writing", "poet-1b (replay)")
    send_prompt(page, REPLAY_QUESTION)
    answer = wait_answer(page, 30_000)
    shot(page, "replay-answer")

    assert answer == REPLAY_ANSWER  # the markup is there, as text
    expect(page.locator("#messages").get_by_text("<script>window.__pwned=1</script>", exact=False)).to_be_visible()
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#messages script").count() == 0
    assert page.locator("#messages img").count() == 0
    streaming = [o["len"] for o in page.evaluate("window.__obs") if o["status"] == "streaming" and o["len"] > 0]
    assert len(set(streaming)) >= 2  # word by word
    # Reloaded from the database, the finished turn is still text.
    page.reload()
    expect(page.locator("#messages .turn .answer")).to_have_text(REPLAY_ANSWER)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#messages script, #messages img").count() == 0


def test_an_answer_gets_its_automatic_score_on_chain_in_seconds(site, oracle_worker, page, shot, tmp_path):
    """The oracle asks the other replay models, scores with BERTScore, pins the evidence and
    confirms autoEval; the page shows each step live, with the evidence and the tx hash."""
    question = "Describe a sunrise over the sea in two sentences."
    answers = {"dawn-7b": "The sun rose slowly over the calm sea. Gold light spread across the waves.",
               "noon-13b": "Light climbed over the water at dawn. The sea turned orange and gold.",
               "dusk-3b": "The sky brightened above the sea. Soon the sun lit every wave."}
    root = write_mtbench(tmp_path / "mt_bench", {7: ("writing", [question, "Shorter."])},
                         {name: {7: [text, "Short."]} for name, text in answers.items()})
    import_mtbench(root, contexts=list(Context.objects.all()), progress=lambda _: None)

    sign_up_in_browser(page, "rater")
    start_chat(page, "writing", "dawn-7b (replay)")
    send_prompt(page, question)
    wait_answer(page, 30_000)
    started = time.monotonic()
    evaluation = page.locator("#messages .turn .evaluation").last
    expect(evaluation).to_have_attribute("data-status", "onchain", timeout=120_000)
    seconds = time.monotonic() - started
    shot(page, "evaluation-onchain")
    assert "2 other models asked the same question" in evaluation.inner_text()
    assert "automatic score recorded" in evaluation.inner_text()
    tx = evaluation.locator("code.tx").get_attribute("title")
    assert re.fullmatch(r"0x[0-9a-f]{64}", tx)
    link = evaluation.locator("a.evidence-link")
    cid = link.get_attribute("href").strip("/").split("/")[-1]
    link.click()
    expect(page.locator("pre.prompt")).to_have_text(question)
    expect(page.locator(".reference-text")).to_have_count(2)
    shot(page, "evidence-page")
    from apps.chain.models import LedgerInteraction
    onchain = LedgerInteraction.objects.get(evidence_cid=cid)
    assert onchain.auto_tx == tx and onchain.has_reference
    print(f"automatic evaluation on-chain {seconds:.1f} s after the answer")


# --- the model registry --------------------------------------------------------------------------

def fill_model_form(page, *, name: str, endpoint_url: str) -> None:
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Provider").fill("Browser Tests Inc.")
    page.get_by_label("Endpoint base URL").fill(endpoint_url)
    page.get_by_label("Model name at the endpoint").fill("tiny-7b")
    page.get_by_label("Parameters").fill("7B")
    page.get_by_role("button", name="Register").click()


def test_a_developer_registers_a_model_and_it_reaches_the_chain(site, page, shot, request):
    dev = developer("devon")
    address = profile_of(dev).address
    site.wait("the developer's registration on-chain", lambda: OutboxItem.objects.filter(
        key=f"register:{address}", status="confirmed").exists(), 60)

    log_in(page, "devon")
    expect(page).to_have_url(re.compile(r"/models/$"))  # a developer lands on the models
    page.get_by_role("link", name="Register a model").click()
    expect(page).to_have_url(re.compile(r"/models/new$"))

    fill_model_form(page, name="tiny-7b", endpoint_url="ftp://models.example.org/v1")
    expect(page.locator("p.error")).to_have_text("Give the endpoint's base URL, e.g. http://host:8000/v1.")
    expect(page.get_by_label("Name", exact=True)).to_have_value("tiny-7b")  # the form keeps what was typed
    shot(page, "model-form-bad-url")

    # A dead port is refused in plain words before anything is saved; the ticked context stays ticked.
    page.get_by_label("math", exact=True).check()  # the label's text ticks its own checkbox
    dead = dead_url()
    fill_model_form(page, name="tiny-7b", endpoint_url=dead)
    expect(page.locator("section.endpoint-test p.error")).to_have_text(
        f"✗ Nothing was saved: {dead} cannot be reached: connection refused.")
    expect(page.get_by_label("math", exact=True)).to_be_checked()
    shot(page, "model-form-dead-endpoint")
    assert not RegisteredModel.objects.filter(name="tiny-7b").exists()

    endpoint = OpenAIEndpoint(models=("tiny-7b",))
    request.addfinalizer(endpoint.close)
    fill_model_form(page, name="tiny-7b", endpoint_url=endpoint.url)
    expect(page).to_have_url(re.compile(r"/models/\d+/$"))
    expect(page.locator("ul.messages")).to_contain_text(
        "tiny-7b is registered; it will be recorded on the chain in a moment. The endpoint test passed:")
    expect(page.locator("h1")).to_have_text("tiny-7b")
    expect(page.locator("a.cid")).to_have_text(re.compile(r"^baf[a-z2-7]{50,}$"))
    expect(page.locator("dd.onchain")).to_contain_text(re.compile(r"on its way to the chain|registered in block"))
    shot(page, "model-page-queued")

    deadline = time.monotonic() + 15
    while "registered in block" not in page.locator("dd.onchain").inner_text():
        assert time.monotonic() < deadline, f"not on-chain after 15 s: {page.locator('dd.onchain').inner_text()}"
        time.sleep(1)
        page.reload()
    expect(page.locator("dd.onchain")).to_contain_text(address)
    shot(page, "model-page-registered")

    page.locator("a.cid").click()  # the metadata, read back from IPFS and checked against its CID
    expect(page.locator("h1")).to_have_text("Evidence")
    expect(page.locator("main")).to_contain_text("Browser Tests Inc.")
    shot(page, "model-metadata")

    page.goto("/models/")
    row = page.locator("table.models tbody tr", has_text="tiny-7b")
    expect(row).to_contain_text("Browser Tests Inc.")
    expect(row).to_contain_text("running")
    shot(page, "models-list")


def test_only_developers_may_register_models(site, page, shot):
    sign_up_in_browser(page, "visitor")
    page.goto("/models/")
    expect(page.get_by_role("link", name="Register a model")).to_have_count(0)
    response = page.goto("/models/new")
    assert response.status == 403
    expect(page.locator("p.error")).to_have_text(
        "Only accounts with the developer role can register models. Ask an administrator for the role.")
    expect(page.locator("form.stacked")).to_have_count(0)
    shot(page, "model-form-forbidden")


# --- accounts ------------------------------------------------------------------------------------

def test_log_in_and_log_out(site, page, shot):
    user("carol")

    page.goto("/chat/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/chat/$"))  # chatting needs an account

    log_in(page, "carol", "not the password")
    expect(page.locator("p.error")).to_have_text("Your user name and password didn't match.")

    log_in(page, "carol")
    expect(page).to_have_url(re.compile(r"/chat/$"))
    expect(page.locator("header .who")).to_have_text("carol")
    shot(page, "logged-in")

    page.locator("header").get_by_role("button", name="Log out").click()
    expect(page.locator("header .who")).to_have_count(0)
    expect(page.locator("header").get_by_role("link", name="Log in")).to_be_visible()
    shot(page, "logged-out")
    page.goto("/chat/")
    expect(page).to_have_url(re.compile(r"/login/"))
