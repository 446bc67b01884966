"""The chat as people expect it, in a real browser: answers rendered as Markdown with highlighted,
copyable code; an XSS corpus in a recorded answer that stays inert; Enter sends and Shift+Enter
makes a new line; Send disabled while an answer streams; Stop; Regenerate; Edit-and-resend."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from playwright.sync_api import expect

from apps.chain.models import Context
from apps.chat.models import Interaction
from apps.chat.registry import ModelFields, register_model
from apps.chat.replay import import_mtbench
from apps.oracle.models import EvaluationJob
from tests.chat.factories import write_mtbench
from tests.personas import developer
from tests.xss_corpus import PAYLOADS

from .test_chat_in_browser import send_prompt, sign_up_in_browser, start_chat, wait_answer

pytestmark = [pytest.mark.browser, pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUESTION = "Show me a function, and some tricks."
CODE = "def double(x):\n    return x * 2\n"
MARKDOWN_ANSWER = (f"# A function\n\nIt is **short**:\n\n```python\n{CODE}```\n\n" + "\n\n".join(PAYLOADS)
                   + "\n\nThe [docs](https://docs.python.org/3/) say more.")

# Everything in the rendered answers a payload could have turned into something that runs.
DANGERS = """() => {
  const found = [];
  document.querySelectorAll('#messages .answer').forEach(box => {
    box.querySelectorAll('script, iframe, object, embed, svg, math, img, style, link, meta, base, form, input, textarea, select, video, audio, source, details, marquee, noscript, frame')
      .forEach(e => found.push('<' + e.tagName.toLowerCase() + '>'));
    box.querySelectorAll('*').forEach(e => {
      for (const a of e.attributes) {
        if (a.name.startsWith('on')) found.push(a.name + ' on <' + e.tagName.toLowerCase() + '>');
        if (['href', 'src', 'action', 'formaction', 'data', 'background'].includes(a.name)
            && /^\\s*(javascript|vbscript|data):/i.test(a.value)) found.push(a.name + '=' + a.value);
        if (a.name === 'style' && !/^text-align:\\s*\\w+;?$/.test(a.value)) found.push('style=' + a.value);
      }
    });
  });
  return found;
}"""


def assert_inert(page) -> None:
    page.wait_for_timeout(300)  # time for any handler that could run
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate(DANGERS) == []


def test_a_recorded_answer_renders_as_markdown_with_its_code_and_every_xss_payload_stays_inert(site, page, shot,
                                                                                              tmp_path):
    root = write_mtbench(tmp_path / "mt_bench", {3: ("coding", [QUESTION, "Shorter."])},
                         {"coder-1b": {3: [MARKDOWN_ANSWER, "Short."]}})
    import_mtbench(root, contexts=list(Context.objects.all()), progress=lambda _: None)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])

    sign_up_in_browser(page, "reader")
    start_chat(page, "coding", "coder-1b (replay)")
    send_prompt(page, QUESTION)
    wait_answer(page, 30_000)
    answer = page.locator("#messages .turn .answer").last
    expect(answer.locator("h1")).to_have_text("A function")
    expect(answer.locator("strong").first).to_have_text("short")
    link = answer.get_by_role("link", name="docs")
    expect(link).to_have_attribute("rel", "nofollow noopener")
    expect(answer.get_by_text("<script>window.__pwned=1</script>", exact=True)).to_be_visible()  # shown, as text
    code = answer.locator(".code-block").first
    expect(code.locator(".code-lang")).to_have_text("python")
    expect(code.locator("pre.code span.k").first).to_have_text("def")  # highlighted
    shot(page, "markdown-answer")
    assert_inert(page)

    code.get_by_role("button", name="Copy the code").click()
    expect(code.locator("button.copy-code")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()").rstrip("\n") == CODE.rstrip("\n")

    page.reload()  # the saved answer, rendered by the page rather than the socket
    expect(page.locator("#messages .turn .answer h1")).to_have_text("A function")
    assert_inert(page)
    assert not page.console_errors, page.console_errors


# --- a model that streams ------------------------------------------------------------------------

class StreamingEndpoint:
    """An OpenAI-compatible endpoint that streams `Answer N to: <prompt>` word by word; a prompt
    with "slowly" in it gets a long answer, a word every 0.1 s. It records the messages it gets."""

    def __init__(self):
        self.asked: list[list[dict]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                body = json.dumps({"object": "list", "data": [{"id": "streamer", "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                if self.path != "/v1/chat/completions":  # no /tokenize: the site estimates instead
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                endpoint.asked.append(request.get("messages", []))
                prompt = request["messages"][-1]["content"]
                slow = "slowly" in prompt
                words = ([f"word{n} " for n in range(300)] if slow
                         else f"Answer {len(endpoint.asked)} to: **{prompt}**".split(" "))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for n, word in enumerate(words):
                        time.sleep(0.1 if slow else 0.02)
                        piece = word if slow or n == len(words) - 1 else word + " "
                        chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the site stopped reading
                    pass
                self.close_connection = True

            def log_message(self, *args):
                pass

        return Handler


@pytest.fixture
def streamer(request):
    endpoint = StreamingEndpoint()
    request.addfinalizer(endpoint.close)
    register_model(developer("dora"), ModelFields(name="streamer", provider="tests", endpoint_url=endpoint.url,
                                                 endpoint_model="streamer"))
    return endpoint


def turns(page):
    return page.locator("#messages .turn")


def test_enter_sends_shift_enter_breaks_the_line_and_stop_ends_a_streaming_answer(site, page, shot, streamer):
    sign_up_in_browser(page, "typist")
    start_chat(page, "math", "streamer")
    box = page.locator("#prompt")
    box.click()
    box.type("Count")
    box.press("Shift+Enter")
    box.type("slowly please")
    expect(box).to_have_value("Count\nslowly please")
    expect(turns(page)).to_have_count(0)  # Shift+Enter did not send
    box.press("Enter")
    expect(turns(page)).to_have_count(1)
    expect(turns(page).first.locator(".bubble.user")).to_have_text("Count\nslowly please")
    expect(box).to_have_value("")

    turn = turns(page).first
    expect(turn).to_have_attribute("data-status", "streaming")
    expect(turn.locator(".answer")).to_contain_text("word3")
    send = page.locator("#prompt-form").get_by_role("button", name="Send")
    expect(send).to_be_disabled()  # no second message while this one streams
    box.fill("Another question")
    box.press("Enter")
    page.wait_for_timeout(300)
    expect(turns(page)).to_have_count(1)
    shot(page, "streaming-with-stop")

    turn.get_by_role("button", name="Stop").click()
    expect(turn).to_have_attribute("data-status", "stopped")
    expect(turn.locator(".stopped")).to_contain_text("not evaluated")
    expect(send).to_be_enabled()
    kept = turn.locator(".answer").inner_text()
    assert kept.startswith("word0") and "word299" not in kept
    shot(page, "stopped")
    stopped = Interaction.objects.get()
    assert stopped.status == "stopped" and stopped.answer.startswith("word0 word1")
    assert not EvaluationJob.objects.exists()
    time.sleep(1)  # the model really stopped: the saved answer does not grow
    assert Interaction.objects.get().answer == stopped.answer
    assert not page.console_errors, page.console_errors


def test_regenerate_and_edit_ask_again_and_keep_every_answer(site, page, shot, streamer):
    sign_up_in_browser(page, "reviser")
    start_chat(page, "math", "streamer")
    page.locator("#prompt").fill("Name a colour")
    page.locator("#prompt").press("Enter")
    expect(turns(page).first).to_have_attribute("data-status", "done")
    expect(turns(page).first.locator(".answer strong")).to_have_text("Name a colour")  # Markdown, rendered

    turns(page).first.get_by_role("button", name="Regenerate").click()
    expect(turns(page)).to_have_count(2)
    expect(turns(page).nth(1)).to_have_attribute("data-status", "done")
    expect(turns(page).nth(1).locator(".answer")).to_have_text("Answer 2 to: Name a colour")
    expect(turns(page).first.locator(".answer")).to_have_text("Answer 1 to: Name a colour")  # kept
    expect(turns(page).first.get_by_role("button", name="Regenerate")).to_be_hidden()  # only the last turn
    shot(page, "regenerated")

    last = turns(page).nth(1)
    last.get_by_text("Edit", exact=True).click()
    edit = last.get_by_label("Edit your message")
    expect(edit).to_have_value("Name a colour")
    edit.fill("Name a fruit")
    last.get_by_role("button", name="Send the edited message").click()
    expect(turns(page)).to_have_count(3)
    expect(turns(page).nth(2).locator(".bubble.user")).to_have_text("Name a fruit")
    expect(turns(page).nth(2)).to_have_attribute("data-status", "done")
    expect(turns(page).nth(2).locator(".answer")).to_have_text("Answer 3 to: Name a fruit")
    shot(page, "edited")

    # Every answer is kept and evaluated; each attempt was asked without the answers it replaces.
    assert list(Interaction.objects.order_by("id").values_list("prompt", "status")) == [
        ("Name a colour", "done"), ("Name a colour", "done"), ("Name a fruit", "done")]
    assert EvaluationJob.objects.count() == 3
    assert [len(m) for m in streamer.asked] == [1, 1, 1]
    page.reload()
    expect(turns(page)).to_have_count(3)
    assert not page.console_errors, page.console_errors
