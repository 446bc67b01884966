"""The OpenAI chat-completions request as the built-in server accepts it: validation of a
/v1/chat/completions body into a ChatRequest, and refusals in OpenAI's error shape (ApiError)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .constrain import Plan, SchemaError, compile_choices, parse_response_format
from .sampling import SamplingParams

DEFAULT_MODEL_NAME = "smollm2-135m-instruct"  # the id clients send as 'model'
MAX_TOP_LOGPROBS = 20
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ApiError(Exception):
    """A request the server refuses, rendered in OpenAI's error shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", allow: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type
        self.allow = allow  # the Allow header of a 405

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


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


def parse_messages(body: dict) -> list[dict]:
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
    messages = parse_messages(body)
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
    plan = parse_structure(body)
    params = SamplingParams(
        max_tokens=max_tokens or config.default_max_tokens,
        temperature=_number(body, "temperature", 1.0, 0, 2),
        top_p=_number(body, "top_p", 1.0, 0, 1, low_open=True),
        logprobs=logprobs, top_logprobs=top, plan=plan)
    return ChatRequest(messages=messages, params=params, max_tokens_given=max_tokens is not None,
                       n=_integer(body, "n", 1, 1, config.max_n), seed=seed, stream=_flag(body, "stream"),
                       include_usage=bool(options and options.get("include_usage")))


def parse_structure(body: dict) -> Plan | None:
    """The constrained-decoding plan a request asks for: OpenAI's `response_format` (a json_schema),
    or a plain list of allowed strings as vLLM's `guided_choice` (or `choices`); None for free text."""
    lists = [name for name in ("guided_choice", "choices") if body.get(name) is not None]
    if len(lists) > 1 or (lists and body.get("response_format") is not None):
        raise ApiError(400, "give at most one of 'response_format', 'guided_choice' and 'choices'",
                       param=lists[-1], code="invalid_value")
    try:
        if lists:
            return compile_choices(body[lists[0]])
        return parse_response_format(body.get("response_format"))
    except SchemaError as exc:
        raise ApiError(400, f"'{lists[0] if lists else 'response_format'}': {exc}",
                       param=lists[0] if lists else "response_format", code="invalid_value") from None


def fit_context(request: ChatRequest, prompt_tokens: int, context_length: int) -> SamplingParams:
    """The request's sampling parameters with max_tokens cut to the room the prompt leaves; a
    400 when no room is left or an explicit max_tokens does not fit."""
    room = context_length - prompt_tokens
    if room < 1 or (request.max_tokens_given and request.params.max_tokens > room):
        asked = request.params.max_tokens if request.max_tokens_given else 1
        raise ApiError(400, f"This model's maximum context length is {context_length} tokens; the messages have "
                       f"{prompt_tokens} tokens and {asked} more were requested", param="messages",
                       code="context_length_exceeded")
    return replace(request.params, max_tokens=min(request.params.max_tokens, room))
