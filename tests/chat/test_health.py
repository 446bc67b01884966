"""An endpoint that stops answering leaves the running list, and comes back when it answers again."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apps.chat.health import run_checks, running_models
from apps.chat.models import RegisteredModel
from apps.chat.registry import ModelFields, register_model
from tests.personas import developer

from .factories import make_contexts

pytestmark = pytest.mark.django_db


class _Models(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Endpoint:
    """A minimal OpenAI-compatible model list on a fixed port that can go down and come back."""

    def __init__(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
        self.port = self.server.server_address[1]
        self._serve()

    def _serve(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self):
        self.server.shutdown()
        self.server.server_close()

    def up(self):
        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), _Models)
        self._serve()


@pytest.fixture
def endpoint():
    e = Endpoint()
    yield e
    e.down()


@pytest.fixture
def models(endpoint, settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    coding, = make_contexts("coding")
    dave = developer()
    up = register_model(dave, ModelFields(name="tiny", provider="p", endpoint_url=f"http://127.0.0.1:{endpoint.port}/v1",
                                          endpoint_model="tiny", contexts=(coding.context_id,)))
    wrong = register_model(dave, ModelFields(name="misnamed", provider="p",
                                             endpoint_url=f"http://127.0.0.1:{endpoint.port}/v1",
                                             endpoint_model="not-served"))
    return up, wrong, coding


def test_a_model_that_fails_its_check_leaves_the_running_list_and_returns(endpoint, models):
    up, wrong, coding = models
    results = run_checks()
    assert results["tiny"] == ""
    assert "does not serve 'not-served'" in results["misnamed"]
    assert list(running_models(coding)) == [up]
    endpoint.down()
    assert "unreachable" in run_checks()["tiny"]
    assert not running_models(coding).exists()
    assert "unreachable" in RegisteredModel.objects.get(pk=up.pk).health_error
    endpoint.up()
    assert run_checks()["tiny"] == ""
    assert list(running_models(coding)) == [up]


def test_a_model_taken_offline_is_not_checked_nor_listed(models):
    up, wrong, coding = models
    RegisteredModel.objects.filter(pk=up.pk).update(enabled=False)
    assert "tiny" not in run_checks()
    assert not running_models(coding).exists()
