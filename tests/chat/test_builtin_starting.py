"""The built-in model's first start says what it is doing: while its server loads (or converts)
the model, the site shows it as "starting" with the step and its progress, not as "not answering",
and the chat page offers it as soon as it answers."""

from __future__ import annotations

import json
import time

import pytest
from django.urls import reverse

from apps.chain.models import Context
from apps.chat.builtin import BUILTIN_NAME, starting
from apps.chat.models import RegisteredModel
from modelserver.progress import StartupStatus, read_status
from tests.chat.factories import make_contexts
from tests.chat.test_chat_limits import endpoint_model
from tests.personas import user

pytestmark = pytest.mark.django_db


@pytest.fixture
def builtin(settings, tmp_path):
    settings.LLMCHAIN_BUILTIN_STATUS_FILE = tmp_path / "builtin-model.json"
    make_contexts("writing")
    model = endpoint_model("http://127.0.0.1:9/v1", BUILTIN_NAME)
    RegisteredModel.objects.filter(pk=model.pk).update(name=BUILTIN_NAME, healthy=False)
    return RegisteredModel.objects.get(pk=model.pk), StartupStatus(settings.LLMCHAIN_BUILTIN_STATUS_FILE)


def test_a_converting_built_in_model_is_shown_starting_with_its_progress(client, builtin):
    model, status = builtin
    status.step("converting", 109, 272)
    words = "first start: converting the model, step 2 of 3, its weights, 40%"
    assert starting(model) == words
    listed = client.get(reverse("models")).content.decode()
    assert f"<td>starting: {words}</td>" in listed and "<td>not answering</td>" not in listed
    assert f"starting: {words}" in client.get(reverse("model", args=[model.pk])).content.decode()
    client.force_login(user("alice"), backend="apps.chat.limits.AccountBackend")
    page = client.get(reverse("chat")).content.decode()
    assert f"The built-in model is starting ({words})" in page
    assert reverse("chat-builtin-status") in page  # the note asks again until the model answers


def test_once_it_answers_the_chat_page_offers_it_and_stops_asking(client, builtin):
    model, status = builtin
    client.force_login(user("alice"), backend="apps.chat.limits.AccountBackend")
    status.step("loading")
    assert client.get(reverse("chat-builtin-status")).status_code == 200
    status.serving("http://127.0.0.1:9/v1")
    assert "checking that it answers" in client.get(reverse("chat-builtin-status")).content.decode()
    RegisteredModel.objects.filter(pk=model.pk).update(healthy=True)  # the check the start ran passed
    writing = Context.objects.get(name="writing")
    up = client.get(reverse("chat-builtin-status"), {"context": writing.context_id})
    assert up.status_code == 286  # htmx stops polling
    assert "The built-in model is up" in up.content.decode()
    assert f'<option value="{model.pk}" selected>{BUILTIN_NAME}</option>' in up.content.decode()


def test_a_start_that_died_is_not_shown_as_starting_for_ever(builtin):
    model, status = builtin
    status.step("converting", 10, 272)
    data = json.loads(status.path.read_text())
    status.path.write_text(json.dumps({**data, "updated": time.time() - 600}))
    assert read_status(status.path) is None and starting(model) is None


@pytest.mark.slow
def test_a_first_start_reports_its_conversion_tensor_by_tensor(tmp_path):
    from modelserver.loading import load_model
    from modelserver.progress import conversion_progress

    written = []

    class Recorded(StartupStatus):
        def _write(self):
            super()._write()
            written.append(read_status(self.path))

    status = Recorded(tmp_path / "status.json")
    with conversion_progress(status):
        load_model(tmp_path / "cache", threads=1, progress=status.step)
    steps = list(dict.fromkeys(w["step"] for w in written))
    assert steps == ["reading", "converting", "finishing"]
    converting = [(w["done"], w["total"]) for w in written if w["step"] == "converting" and w["total"]]
    assert converting[0][0] == 0 and converting[0][1] > 100  # SmolLM2's tensors, counted
    assert converting[-1][0] == converting[-1][1]
    assert [done for done, _ in converting] == sorted(done for done, _ in converting)


def test_a_start_under_way_is_shown_even_while_the_model_still_counts_as_healthy(builtin):
    """Registered on this start, the model is healthy until a check says otherwise: its start says more."""
    model, status = builtin
    RegisteredModel.objects.filter(pk=model.pk).update(healthy=True)
    status.step("launching")
    assert starting(RegisteredModel.objects.get(pk=model.pk)) == "launching its server"


@pytest.mark.slow
def test_serve_model_says_it_is_starting_then_serving_and_clears_its_status_when_stopped(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    status_file = tmp_path / "status.json"
    proc = subprocess.Popen([sys.executable, "manage.py", "serve_model", "--port", "0", "--status-file", str(status_file)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        seen = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "serving" not in seen:
            status = read_status(status_file)
            if status is not None and status["state"] not in seen:
                seen.append(status["state"])
                served = status
            assert proc.poll() is None, "serve_model exited"
            time.sleep(0.05)
        assert seen == ["starting", "serving"]
        assert served["pid"] == proc.pid and served["url"].startswith("http://127.0.0.1:")
    finally:
        proc.terminate()
        proc.wait(30)
    assert not status_file.exists()


class _Exited:
    """A server process that exited before it served."""

    def __init__(self, code: int):
        self.code = code

    def poll(self) -> int:
        return self.code


def test_a_server_that_dies_while_starting_is_recorded_as_failed_at_once(builtin):
    from ops.management.commands.up import Command

    model, status = builtin
    status.step("converting", 10, 272)
    assert starting(model) is not None
    began = time.monotonic()
    Command._offer_when_up(BUILTIN_NAME, status.path, _Exited(137), poll_s=0.01)
    assert time.monotonic() - began < 5  # it returns, rather than waiting for the status to go stale
    assert read_status(status.path)["state"] == "failed"
    model.refresh_from_db()
    assert starting(model) is None and not model.healthy
    assert model.health_error == "its server stopped while starting (exit code 137)"


def test_a_server_still_starting_is_waited_for(builtin):
    import threading

    from ops.management.commands.up import Command

    class Running:
        def poll(self):
            return None

    model, status = builtin
    status.step("loading")
    waiter = threading.Thread(target=Command._offer_when_up, args=(BUILTIN_NAME, status.path, Running(), 0.01),
                              daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # a live server's start is not cut short
    status.failed("stopped by the test")
    waiter.join(5)
    assert not waiter.is_alive()
    model.refresh_from_db()
    assert model.health_error != "its server stopped while starting (exit code 137)"
