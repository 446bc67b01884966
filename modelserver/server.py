"""The built-in model's HTTP server: `GET /v1/models`, `GET /v1/models/{id}`, vLLM's `POST /tokenize`
and `POST /v1/chat/completions` (plain or streamed as server-sent events, logprobs, n, seed) over
one LocalModel, on the standard library's threading HTTP server."""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .api import ApiError, ChatRequest, ServerConfig, fit_context, parse_messages, parse_chat_request
from .sampling import LocalModel, SamplingParams, seeded_rng

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20


class ModelServer(ThreadingHTTPServer):
    """Serves one LocalModel; `serve_forever()` in one thread, `shutdown()` from another."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: LocalModel, config: ServerConfig):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.model = model
        self.config = config
        self.context_length = min(config.context_length, model.context_length)
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address) -> None:
        """A client that drops its connection (an idle keep-alive socket reset when its event loop
        ends, say) is not a server error: one debug line, no traceback on the console."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            log.debug("client %s dropped its connection", client_address)
            return
        super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}/v1" if ":" in host else f"http://{host}:{port}/v1"

    def model_card(self) -> dict:
        # max_model_len: the context length, under vLLM's name for it (clients read it to fit prompts).
        return {"id": self.config.model_name, "object": "model", "created": 0, "owned_by": "llmchain",
                "max_model_len": self.context_length}

    def serve_until(self, stop: threading.Event) -> None:
        """Serve until `stop` is set (or serving dies), then close the socket. serve_forever runs
        in a thread because shutdown() must be called from another one."""
        worker = threading.Thread(target=self.serve_forever, name="model-server", daemon=True)
        worker.start()
        try:
            while not stop.wait(0.5) and worker.is_alive():
                pass
        finally:
            self.shutdown()
            self.server_close()
            worker.join(5)


class _Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"
    timeout = 120  # drop idle keep-alive connections instead of holding a thread forever

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        try:
            body = self._read_body()
            self._authorize()
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/v1/chat/completions":
                self._allow(method, "POST")
                self._chat(body)
            elif path in ("/tokenize", "/v1/tokenize"):
                self._allow(method, "POST")
                self._tokenize(body)
            elif path == "/v1/models":
                self._allow(method, "GET")
                self._send_json(200, {"object": "list", "data": [self.server.model_card()]})
            elif path.startswith("/v1/models/"):
                self._allow(method, "GET")
                if path[len("/v1/models/"):] != self.server.config.model_name:
                    raise ApiError(404, f"The model '{path[len('/v1/models/'):]}' does not exist",
                                   param="model", code="model_not_found")
                self._send_json(200, self.server.model_card())
            else:
                raise ApiError(404, f"Unknown URL: {method} {path or '/'}", code="unknown_url")
        except ApiError as exc:
            self._send_json(exc.status, exc.body(), allow=exc.allow)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            log.exception("model server failed on %s %s", method, self.path)
            error = ApiError(500, "The model server failed on this request", type="server_error")
            self._send_json(500, error.body())

    def _allow(self, method: str, allowed: str) -> None:
        if method != allowed:
            raise ApiError(405, f"Method {method} is not allowed here; use {allowed}", code="method_not_allowed",
                           allow=allowed)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise ApiError(411, "Send the body with a Content-Length")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise ApiError(400, "Bad Content-Length") from None
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the body stays unread: the connection cannot be reused
            raise ApiError(413, f"The request body is larger than {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length) if length > 0 else b""

    def _authorize(self) -> None:
        key = self.server.config.api_key
        if not key:
            return
        given = self.headers.get("Authorization", "")
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        if not hmac.compare_digest(token.encode(), key.encode()):
            raise ApiError(401, "Incorrect or missing API key", code="invalid_api_key")

    def _tokenize(self, raw: bytes) -> None:
        """vLLM's /tokenize for chat messages: how many tokens the model reads for them (its chat
        template applied, as a completion would), and its context length."""
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "We could not parse the JSON body of your request") from None
        if not isinstance(body, dict):
            raise ApiError(400, "The body must be a JSON object")
        try:
            ids = self.server.model.prompt_ids(parse_messages(body))
        except ApiError:
            raise
        except Exception as exc:  # the chat template is Jinja: any odd conversation may trip it
            raise ApiError(400, f"The messages do not fit the chat template: {exc}", param="messages") from exc
        self._send_json(200, {"count": len(ids), "max_model_len": self.server.context_length})

    def _chat(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "We could not parse the JSON body of your request") from None
        request = parse_chat_request(body, self.server.config)
        model = self.server.model
        try:
            prompt = model.prompt_ids(request.messages)
        except Exception as exc:  # the chat template is Jinja: any odd conversation may trip it
            raise ApiError(400, f"The messages do not fit the chat template: {exc}", param="messages") from exc
        params = fit_context(request, len(prompt), self.server.context_length)
        if params.plan is not None:
            need = model.constrained(params.plan).minimum_tokens()
            if params.max_tokens < need:
                raise ApiError(400, f"The structured output needs at least {need} tokens; {params.max_tokens} "
                               "are left (max_tokens, or the context after the messages)", param="max_tokens",
                               code="invalid_value")
        rng = seeded_rng(request.seed)
        meta = {"id": f"chatcmpl-{secrets.token_hex(12)}", "created": int(time.time()),
                "model": self.server.config.model_name}
        if request.stream:
            self._stream(request, prompt, params, rng, meta)
        else:
            self._complete(request, prompt, params, rng, meta)

    def _complete(self, request: ChatRequest, prompt: list[int], params: SamplingParams, rng, meta: dict) -> None:
        choices, used = [], 0
        for index in range(request.n):
            pieces = []
            generation = self.server.model.generate(prompt, params, rng)
            try:
                for piece in generation:
                    pieces.append(piece)
                    # Nothing is sent before the answer is whole, so a client that gave up (its read timeout)
                    # is seen only here: stop, rather than spend the model on an answer nobody reads while
                    # the client's next request (often the same one, asked again) waits its turn.
                    if self._client_gone():
                        log.info("client %s went away after %d of at most %d tokens: generation stopped",
                                 self.address_string(), len(pieces), params.max_tokens)
                        self.close_connection = True
                        return
            finally:
                generation.close()
            used += pieces[-1].completion_tokens
            choices.append({
                "index": index,
                "message": {"role": "assistant", "content": "".join(p.text for p in pieces)},
                "logprobs": {"content": [e for p in pieces for e in p.logprobs]} if params.logprobs else None,
                "finish_reason": pieces[-1].finish_reason,
            })
        self._send_json(200, {**meta, "object": "chat.completion", "choices": choices, "usage": {
            "prompt_tokens": len(prompt), "completion_tokens": used, "total_tokens": len(prompt) + used}})

    def _stream(self, request: ChatRequest, prompt: list[int], params: SamplingParams, rng, meta: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("X-Accel-Buffering", "no")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        usage = {"usage": None} if request.include_usage else {}

        def chunk(index: int, delta: dict, logprobs=None, finish=None) -> None:
            self._event({**meta, "object": "chat.completion.chunk", **usage, "choices": [
                {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]})

        used = 0
        try:
            for index in range(request.n):
                chunk(index, {"role": "assistant", "content": ""})
                generation = self.server.model.generate(prompt, params, rng)
                try:
                    for piece in generation:
                        if piece.text or piece.logprobs:
                            lp = {"content": piece.logprobs} if params.logprobs else None
                            chunk(index, {"content": piece.text}, lp)
                        if piece.finish_reason:
                            used += piece.completion_tokens
                            chunk(index, {}, None, piece.finish_reason)
                finally:
                    generation.close()  # frees the model at once if the client went away
            if request.include_usage:
                self._event({**meta, "object": "chat.completion.chunk", "choices": [], "usage": {
                    "prompt_tokens": len(prompt), "completion_tokens": used, "total_tokens": len(prompt) + used}})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        except Exception:
            log.exception("generation failed mid-stream")
            self._event(ApiError(500, "Generation failed", type="server_error").body())
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _client_gone(self) -> bool:
        """Whether the client has closed its connection (read as end of file) or reset it; bytes it sent
        meanwhile are only peeked at, never consumed."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):  # reset, or already closed
            return True

    def _event(self, payload: dict) -> None:
        self._write_chunk(b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict, allow: str | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if allow:
            self.send_header("Allow", allow)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        log.info("%s %s", self.address_string(), format % args)
