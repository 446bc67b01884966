"""The one client for OpenAI-compatible chat-completions endpoints (vLLM, Ollama, llama.cpp
server, TGI, hosted APIs, the built-in model server).

Streaming with connect and read timeouts; bounded retries, but only before the first token
arrives (a retry after that would repeat text the user has already seen); typed errors.

Endpoints are named by developers, so every call goes out through lib/outbound.py (public
addresses or the operator's allowlist, the checked address pinned, no redirects) and every answer
is capped: LLMCHAIN_ANSWER_MAX_BYTES, LLMCHAIN_ANSWER_MAX_S, and no more pieces than `max_tokens`.
An error's text is what anyone may read: no URL and nothing the endpoint said; its `detail` has
both, for the model's owner and the logs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
from django.conf import settings

from lib import outbound
from lib.errors import ServiceError

DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=60.0, write=10.0, pool=5.0)


class GatewayError(ServiceError, RuntimeError):
    """A model endpoint failed; `permanent` says whether a retry could help. `str()` is fit for any
    page; `detail` adds the endpoint's URL and its own words, for its owner and the logs."""

    permanent = False

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail or message


class EndpointUnavailable(GatewayError):
    """Unreachable, timing out, or answering 5xx/429."""


class EndpointRefused(GatewayError):
    """The endpoint refused the request (4xx other than 429): fix the request or the key."""

    permanent = True


class BadResponse(GatewayError):
    """The endpoint answered something that is not an OpenAI chat completion."""

    permanent = True


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # e.g. http://127.0.0.1:8100/v1
    model: str
    api_key: str = field(default="", repr=False)

    def url(self, path: str) -> str:
        base = self.base_url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        return f"{base}/{path}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class EndpointTest:
    """What trying an endpoint found: the steps that passed, in plain words, and the failure that
    stopped it (with the endpoint's own answer), or "" when every step passed."""

    passed: tuple[str, ...]
    failure: str = ""

    @property
    def ok(self) -> bool:
        return not self.failure


def _root_cause(exc: BaseException) -> str:
    """What the operating system said under httpx's wrapping ("connection refused", not "All
    connection attempts failed")."""
    while (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return str(exc) or type(exc).__name__


def _refusal(step: str, response: httpx.Response) -> str:
    """A non-200 answer to one step of an endpoint test, in plain words with the endpoint's own."""
    said = _error_for(response, response.content).detail
    if response.status_code in (401, 403):
        return f"the endpoint refused the API key: {said}"
    return f"{step} failed: {said}"


def _unavailable(endpoint: Endpoint, exc: httpx.TransportError) -> EndpointUnavailable:
    """A transport failure (timeout, refused connection, broken stream) as the gateway's error."""
    what = "timed out" if isinstance(exc, httpx.TimeoutException) else "is unreachable"
    return EndpointUnavailable(f"the model's endpoint {what}", f"{endpoint.base_url} {what}: {exc!r}")


# What a call to an endpoint can raise before its answer is read: the transport's failures, and what the
# outbound guard (or httpx's URL parser) stopped. `_call_error` maps each to the gateway's error.
CALL_ERRORS = (httpx.TransportError, outbound.OutboundError, httpx.InvalidURL)


def _call_error(endpoint: Endpoint, exc: Exception) -> GatewayError:
    return _unavailable(endpoint, exc) if isinstance(exc, httpx.TransportError) else _guarded(endpoint, exc)


def _guarded(endpoint: Endpoint, exc: outbound.OutboundError | httpx.InvalidURL) -> GatewayError:
    """What the outbound guard (or httpx's URL parser) stopped, as the gateway's error."""
    detail = f"{endpoint.base_url}: {exc}"
    if isinstance(exc, httpx.InvalidURL):
        return EndpointRefused("the model's endpoint URL is not valid", detail)
    if isinstance(exc, outbound.OutboundRefused):
        return EndpointRefused("the model's endpoint is at an address this site does not call", detail)
    if isinstance(exc, outbound.AnswerTooLarge):
        return BadResponse("the model's answer was larger than this site accepts", detail)
    return EndpointUnavailable("the model's answer took longer than this site waits", detail)


def _error_for(response: httpx.Response, body: bytes) -> GatewayError:
    try:
        detail = json.loads(body).get("error", {})
        message = detail.get("message") if isinstance(detail, dict) else str(detail)
    except (ValueError, AttributeError):
        message = body[:300].decode("utf-8", "replace")
    public = f"the model's endpoint answered HTTP {response.status_code}"
    text = f"{response.request.url.host} answered {response.status_code}: {message}"
    if response.status_code == 429 or response.status_code >= 500:
        return EndpointUnavailable(public, text)
    return EndpointRefused(public, text)


class Gateway:
    def __init__(self, *, timeout: httpx.Timeout = DEFAULT_TIMEOUT, retries: int = 2, backoff: float = 0.5,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._transport = transport

    def _client(self) -> httpx.AsyncClient:
        if self._transport is not None:  # a test's stand-in for the network
            return httpx.AsyncClient(timeout=self.timeout, transport=self._transport)
        return outbound.async_client(settings.LLMCHAIN_OUTBOUND_ALLOW, timeout=self.timeout,
                                     max_bytes=settings.LLMCHAIN_ANSWER_MAX_BYTES,
                                     max_seconds=settings.LLMCHAIN_ANSWER_MAX_S)

    async def stream_chat(self, endpoint: Endpoint, messages: list[dict], *, max_tokens: int = 512,
                          temperature: float = 0.7, outcome: dict | None = None, **extra) -> AsyncIterator[str]:
        """Yield the answer's text piece by piece as the endpoint streams it; an endpoint that sends
        more than `max_tokens` pieces is cut off there. `outcome` (a dict), if given, receives the
        stream's `finish_reason` ("length" also when the gateway cut it at `max_tokens`)."""
        outcome = {} if outcome is None else outcome
        payload = {"model": endpoint.model, "messages": messages, "max_tokens": max_tokens,
                   "temperature": temperature, "stream": True, **extra}
        started = False
        for attempt in range(self.retries + 1):
            try:
                async with self._client() as client, client.stream(
                        "POST", endpoint.url("chat/completions"), json=payload,
                        headers=endpoint.headers()) as response:
                    if response.status_code != 200:
                        raise _error_for(response, await response.aread())
                    pieces = 0
                    async for piece in _sse_text(response, outcome):
                        started = True
                        yield piece
                        pieces += 1
                        if pieces >= max_tokens:
                            outcome["finish_reason"] = "length"
                            return
                    return
            except CALL_ERRORS as exc:  # timeouts included
                error: GatewayError = _call_error(endpoint, exc)
            except GatewayError as exc:
                error = exc
            if started or error.permanent or attempt == self.retries:
                raise error
            await asyncio.sleep(self.backoff * 2**attempt)

    async def complete(self, endpoint: Endpoint, messages: list[dict], **params) -> str:
        """The whole answer as one string (streamed underneath, so read timeouts apply per piece)."""
        return "".join([piece async for piece in self.stream_chat(endpoint, messages, **params)])

    async def chat(self, endpoint: Endpoint, messages: list[dict], *, read_timeout: float | None = None,
                   **params) -> dict:
        """One non-streamed completion, the endpoint's JSON as it is (``choices`` with their
        ``message`` and, when asked for, ``logprobs``): for judges that need more than the text.
        Nothing reaches the user before it is whole, so a failure may be retried. Its first byte
        comes only when the whole reply is written, so a caller with its own time limit for a reply
        gives it as `read_timeout` (the gateway's read timeout is meant for the gap between pieces). A reply
        that did not come within it is not asked for again."""
        payload = {"model": endpoint.model, "messages": messages, **params, "stream": False}
        timeout = self.timeout if read_timeout is None else httpx.Timeout(
            connect=self.timeout.connect, read=read_timeout, write=self.timeout.write, pool=self.timeout.pool)
        for attempt in range(self.retries + 1):
            try:
                async with self._client() as client:
                    response = await client.post(endpoint.url("chat/completions"), json=payload,
                                                 headers=endpoint.headers(), timeout=timeout)
                if response.status_code != 200:
                    raise _error_for(response, response.content)
                try:
                    body = response.json()
                except ValueError as exc:
                    raise BadResponse("the model's endpoint answered something that is not JSON",
                                      f"{endpoint.base_url} answered something that is not JSON") from exc
                if not isinstance(body, dict) or not isinstance(body.get("choices"), list) or not body["choices"]:
                    raise BadResponse("the model's endpoint answered JSON that is not a chat completion",
                                      f"{endpoint.base_url} answered JSON that is not a chat completion")
                return body
            except CALL_ERRORS as exc:  # timeouts included
                error: GatewayError = _call_error(endpoint, exc)
                if isinstance(exc, httpx.ReadTimeout):
                    # The endpoint has the request and is still working on it: asking again would queue
                    # the same work behind it and take longer still. The caller's limit has been spent.
                    raise error from exc
            except GatewayError as exc:
                error = exc
            if error.permanent or attempt == self.retries:
                raise error
            await asyncio.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable")

    async def check(self, endpoint: Endpoint) -> None:
        """Raise unless the endpoint lists its models and serves the configured one."""
        try:
            async with self._client() as client:
                response = await client.get(endpoint.url("models"), headers=endpoint.headers())
        except CALL_ERRORS as exc:  # timeouts included
            raise _call_error(endpoint, exc) from exc
        if response.status_code != 200:
            raise _error_for(response, response.content)
        ids = _model_ids(response)
        if ids is None:
            raise BadResponse("the model's endpoint does not list its models the OpenAI way",
                              f"{endpoint.base_url}/models is not an OpenAI model list")
        if endpoint.model not in ids:
            raise EndpointRefused("the model's endpoint does not serve the model",
                                  f"{endpoint.base_url} does not serve {endpoint.model!r} (it lists {ids[:5]})")

    async def test_endpoint(self, endpoint: Endpoint) -> EndpointTest:
        """Try an endpoint before it is registered, once per step and in order, stopping at the
        first failure: its model list, the model's name there, the API key, a one-token completion.
        Never raises for what the endpoint does: the result says it in plain words."""
        passed: list[str] = []

        def failed(why: str) -> EndpointTest:
            return EndpointTest(tuple(passed), why)

        try:
            async with self._client() as client:
                response = await client.get(endpoint.url("models"), headers=endpoint.headers())
                if response.status_code != 200:
                    return failed(_refusal("asking for its model list", response))
                ids = _model_ids(response)
                if ids is None:
                    return failed(f"{endpoint.url('models')} answered, but not with an OpenAI model list: "
                                  f"{response.text[:200]!r}")
                passed.append(f"{endpoint.url('models')} lists {len(ids)} model(s)")
                if endpoint.model not in ids:
                    return failed(f"the endpoint does not list {endpoint.model!r}; "
                                  f"it lists {', '.join(map(repr, ids[:10])) or 'none'}")
                passed.append(f"it lists {endpoint.model!r}")
                response = await client.post(
                    endpoint.url("chat/completions"), headers=endpoint.headers(),
                    json={"model": endpoint.model, "messages": [{"role": "user", "content": "Say OK."}],
                          "max_tokens": 1, "temperature": 0, "stream": False})
                if response.status_code != 200:
                    return failed(_refusal("a one-token completion", response))
                passed.append("it accepted the API key" if endpoint.api_key else "it needs no API key")
                try:
                    text = response.json()["choices"][0]["message"]["content"]
                except (ValueError, KeyError, IndexError, TypeError):
                    return failed("a one-token completion came back as something that is not a chat completion: "
                                  f"{response.text[:200]!r}")
                passed.append(f"it answered a one-token completion ({text!r})")
        except (outbound.OutboundError, httpx.InvalidURL) as exc:
            return failed(str(exc))
        except httpx.TransportError as exc:  # timeouts included
            if isinstance(exc, httpx.TimeoutException):
                return failed(f"{endpoint.base_url} did not answer in time ({type(exc).__name__})")
            return failed(f"{endpoint.base_url} cannot be reached: {_root_cause(exc)}")
        return EndpointTest(tuple(passed))


    async def count_tokens(self, endpoint: Endpoint, messages: list[dict]) -> tuple[int, int | None] | None:
        """How many tokens the model reads for `messages`, and its context length, from the endpoint's
        vLLM-style `POST /tokenize` (the built-in server has one); None when it has none or fails: one
        try, a short wait, since it only sharpens a check the caller can also make by estimate."""
        url = endpoint.url("tokenize").replace("/v1/tokenize", "/tokenize")
        try:
            async with self._client() as client:
                response = await client.post(url, headers=endpoint.headers(), timeout=5,
                                             json={"model": endpoint.model, "messages": messages})
            body = response.json() if response.status_code == 200 else None
            count = body.get("count") if isinstance(body, dict) else None
            limit = body.get("max_model_len") if isinstance(body, dict) else None
        except (*CALL_ERRORS, ValueError):
            return None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return None
        return count, (limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None)

    async def context_length(self, endpoint: Endpoint) -> int | None:
        """The model's context length as its endpoint advertises it on its model card (`GET
        /models/{id}`: vLLM's `max_model_len`, or `context_length`/`context_window` as other servers
        and routers say it); None when it does not say."""
        try:
            async with self._client() as client:
                response = await client.get(endpoint.url(f"models/{endpoint.model}"), headers=endpoint.headers(),
                                            timeout=5)
            card = response.json() if response.status_code == 200 else None
        except (*CALL_ERRORS, ValueError):
            return None
        for key in ("max_model_len", "context_length", "context_window"):
            value = card.get(key) if isinstance(card, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None


def _model_ids(response: httpx.Response) -> list[str] | None:
    """The model ids of an OpenAI model list (`GET /models`), or None when the body is not one."""
    try:
        return [str(m["id"]) for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return None


async def _sse_text(response: httpx.Response, outcome: dict | None = None) -> AsyncIterator[str]:
    """The text pieces of an OpenAI-style event stream; the last `finish_reason` seen goes in `outcome`."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise BadResponse("the model's endpoint streamed something that is not JSON",
                              f"not a JSON event in the stream: {data[:120]!r}") from exc
        if "error" in chunk:
            raise EndpointUnavailable("the model's endpoint failed mid-answer",
                                      f"the endpoint failed mid-answer: {chunk['error']}")
        for choice in chunk.get("choices") or []:
            if outcome is not None and isinstance(choice.get("finish_reason"), str):
                outcome["finish_reason"] = choice["finish_reason"][:32]
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                yield piece


# --- structured output: a JSON-schema response_format, probed once per model -------------

PROBE_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
                "required": ["answer"], "additionalProperties": False}


def json_schema_format(schema: dict, name: str = "verdict") -> dict:
    """OpenAI's response_format asking for output that matches `schema` (the built-in server, vLLM,
    llama.cpp's server and TGI take the same)."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


async def probe_structured_output(gateway: Gateway, endpoint: Endpoint) -> bool:
    """Whether the endpoint honours a JSON-schema response_format: one short request whose answer
    must be exactly the probe's object. A refusal or an answer that ignores the schema is False; an
    endpoint that cannot be reached raises (nothing is learnt from it)."""
    try:
        body = await gateway.chat(endpoint, [{"role": "user", "content": "Is water wet? Answer yes or no."}],
                                  max_tokens=16, temperature=0, response_format=json_schema_format(PROBE_SCHEMA, "probe"))
    except EndpointRefused:
        return False
    try:
        found = json.loads(body["choices"][0]["message"]["content"])
    except (ValueError, KeyError, IndexError, TypeError):
        return False
    return isinstance(found, dict) and set(found) == {"answer"} and found["answer"] in ("yes", "no")


async def structured_support(gateway: Gateway, model, endpoint: Endpoint) -> bool:
    """Whether the registered model (reached at `endpoint`) honours structured output: probed on
    first need and remembered on the model (RegisteredModel.structured_output)."""
    if model.structured_output is None:
        supported = await probe_structured_output(gateway, endpoint)
        await type(model).objects.filter(pk=model.pk).aupdate(structured_output=supported)
        model.structured_output = supported
    return bool(model.structured_output)


async def chat_structured(gateway: Gateway, endpoint: Endpoint, messages: list[dict], schema: dict, *,
                          top_logprobs: int = 5, **params) -> dict:
    """One non-streamed completion asked to match `schema`, with logprobs (`top_logprobs` at each
    position); an endpoint that refuses the logprobs is asked again without them. The reply is the
    endpoint's JSON: its text may still ignore the schema, and the caller's strict parser reads it."""
    fmt = json_schema_format(schema)
    try:
        return await gateway.chat(endpoint, messages, response_format=fmt, logprobs=True, top_logprobs=top_logprobs,
                                  **params)
    except EndpointRefused:
        return await gateway.chat(endpoint, messages, response_format=fmt, **params)
