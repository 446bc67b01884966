"""A tiny OpenAI-compatible endpoint on 127.0.0.1 for tests: its model list and chat completions
(one-shot, or streamed as server-sent events when asked to stream), behind an API key when it is
given one, answering 401 as OpenAI does otherwise."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from apps.chain.node import free_port


class OpenAIEndpoint:
    def __init__(self, models: tuple[str, ...] = ("tiny",), api_key: str = "", answer: str = "OK",
                 delay: float = 0.02):
        self.models, self.api_key, self.answer, self.delay = models, api_key, answer, delay
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
            elif (self.command, self.path) == ("POST", "/v1/chat/completions") and body.get("stream"):
                self._stream(body)
            elif (self.command, self.path) == ("POST", "/v1/chat/completions"):
                self._send(200, {"object": "chat.completion", "model": body.get("model"), "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": endpoint.answer},
                     "finish_reason": "length"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def _stream(self, body: dict) -> None:
            """The answer as an OpenAI event stream, a word per event, `endpoint.delay` seconds apart."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            words = endpoint.answer.split(" ")
            for k, word in enumerate(words):
                chunk = {"object": "chat.completion.chunk", "model": body.get("model"), "choices": [
                    {"index": 0, "delta": {"content": word + (" " if k < len(words) - 1 else "")},
                     "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(endpoint.delay)
            end = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()

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
