"""A tiny OpenAI-compatible endpoint on 127.0.0.1 for tests: its model list and one-shot chat
completions, behind an API key when it is given one, answering 401 as OpenAI does otherwise."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from apps.chain.node import free_port


class OpenAIEndpoint:
    def __init__(self, models: tuple[str, ...] = ("tiny",), api_key: str = "", answer: str = "OK"):
        self.models, self.api_key, self.answer = models, api_key, answer
        self.requests: list[tuple[str, str, dict]] = []  # (method, path, JSON body)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> OpenAIEndpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def dead_url() -> str:
    """The base URL of a port on 127.0.0.1 where nothing listens."""
    return f"http://127.0.0.1:{free_port()}/v1"


def _handler(endpoint: OpenAIEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self._answer({})

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            self._answer(json.loads(self.rfile.read(length) or b"{}"))

        def _answer(self, body: dict) -> None:
            endpoint.requests.append((self.command, self.path, body))
            if endpoint.api_key and self.headers.get("Authorization") != f"Bearer {endpoint.api_key}":
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})
            elif (self.command, self.path) == ("GET", "/v1/models"):
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in endpoint.models]})
            elif (self.command, self.path) == ("POST", "/v1/chat/completions"):
                self._send(200, {"object": "chat.completion", "model": body.get("model"), "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": endpoint.answer},
                     "finish_reason": "length"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler
