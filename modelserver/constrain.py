"""Constrained decoding for the built-in model: OpenAI's `response_format` JSON schema (the subset
judges need) and vLLM's `guided_choice` list, as a small automaton over the model's vocabulary.

Why hand-written: the output shapes judges ask for are few and fixed (an object whose properties
are strings or enums, in order; or one of a list of strings), and the verdict must fit within
`max_tokens` whatever the model wants to say before it. A general JSON-schema engine does not know
the token budget; this one reserves the tokens the rest of the object needs before every free token.

A compiled `Plan` is a list of segments:
- `Literal(text)`: forced tokens (the object's braces, keys, separators and quotes);
- `Free(max_chars)`: the inside of a JSON string: any token whose bytes are whole UTF-8 with no
  quote, backslash or control character, until the model picks the closing quote (the first byte
  of the next literal), the string's `maxLength` is reached, or the token budget left is only what
  the rest of the object needs;
- `Choice(values)`: exactly one of the allowed values (their JSON text), none a prefix of another.
  Its first token is the *choice position* (the verdict position): the server reports there, as
  top_logprobs, the allowed first tokens with the model's own (unconstrained) logprobs.

Supported schema: {"type": "object", "properties": {name: property, ...}} where every property is
{"type": "string"} (optional "maxLength"), or has an "enum" of strings, integers or booleans, or is
{"type": "integer", "minimum": a, "maximum": b} with at most 100 values. All properties are written,
in the order given. Anything else is refused (SchemaError) rather than half-honoured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

MAX_CHOICES = 100


class SchemaError(ValueError):
    """A response_format or choice list this server cannot honour; the message says why."""


@dataclass(frozen=True)
class Literal:
    text: str


@dataclass(frozen=True)
class Free:
    max_chars: int | None = None


@dataclass(frozen=True)
class Choice:
    values: tuple[str, ...]


Segment = Literal | Free | Choice


@dataclass(frozen=True)
class Plan:
    segments: tuple[Segment, ...]


def _json_value(v) -> str:
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return json.dumps(v, ensure_ascii=False)
    raise SchemaError(f"enum values must be strings, integers or booleans, not {v!r}")


def _choice(values: list[str], where: str) -> Choice:
    if not values:
        raise SchemaError(f"{where}: no allowed values")
    if len(values) > MAX_CHOICES:
        raise SchemaError(f"{where}: at most {MAX_CHOICES} allowed values")
    if len(set(values)) != len(values):
        raise SchemaError(f"{where}: a value is given twice")
    for a in values:
        if not a:
            raise SchemaError(f"{where}: an allowed value is empty")
        for b in values:
            if a != b and b.startswith(a):
                raise SchemaError(f"{where}: {a!r} is a prefix of {b!r}; allowed values must not be prefixes "
                                  "of one another")
    return Choice(tuple(values))


def _property(name: str, spec) -> list[Segment]:
    where = f"property {name!r}"
    if not isinstance(spec, dict):
        raise SchemaError(f"{where} must be a schema object")
    if "enum" in spec:
        enum = spec["enum"]
        if not isinstance(enum, list):
            raise SchemaError(f"{where}: enum must be an array")
        return [_choice([_json_value(v) for v in enum], where)]
    kind = spec.get("type")
    if kind == "string":
        limit = spec.get("maxLength")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise SchemaError(f"{where}: maxLength must be a non-negative integer")
        return [Literal('"'), Free(limit), Literal('"')]
    if kind == "integer":
        low, high = spec.get("minimum"), spec.get("maximum")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (low, high)) or low > high:
            raise SchemaError(f"{where}: an integer needs an enum, or integer minimum <= maximum")
        if high - low >= MAX_CHOICES:
            raise SchemaError(f"{where}: at most {MAX_CHOICES} integers")
        values = [str(v) for v in range(low, high + 1)]
        # "1" and "10" would be prefixes of one another: only one-digit-long ranges are prefix-free.
        return [_choice(values, where)]
    raise SchemaError(f"{where}: only strings, enums and integer ranges are supported, not {kind!r}")


def compile_schema(schema) -> Plan:
    """The plan of a JSON schema (see the module docs); raises SchemaError."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise SchemaError("the schema must be an object schema ({\"type\": \"object\", \"properties\": ...})")
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        raise SchemaError("the object schema needs at least one property")
    segments: list[Segment] = [Literal("{")]
    for i, (name, spec) in enumerate(props.items()):
        segments.append(Literal(("" if i == 0 else ", ") + json.dumps(name, ensure_ascii=False) + ": "))
        segments += _property(name, spec)
    segments.append(Literal("}"))
    return Plan(_merge(segments))


def compile_choices(values) -> Plan:
    """The plan of a plain list of allowed strings (vLLM's guided_choice)."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SchemaError("guided_choice must be an array of strings")
    return Plan((_choice(list(values), "guided_choice"),))


def parse_response_format(value) -> Plan | None:
    """OpenAI's response_format: None for plain text, a Plan for a json_schema; SchemaError otherwise."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SchemaError("response_format must be an object")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind != "json_schema":
        raise SchemaError(f"response_format type {kind!r} is not supported; use \"json_schema\" (or \"text\")")
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise SchemaError("response_format.json_schema needs a \"schema\"")
    return compile_schema(spec["schema"])


def _merge(segments: list[Segment]) -> tuple[Segment, ...]:
    out: list[Segment] = []
    for s in segments:
        if isinstance(s, Literal) and out and isinstance(out[-1], Literal):
            out[-1] = Literal(out[-1].text + s.text)
        elif not (isinstance(s, Literal) and not s.text):
            out.append(s)
    return tuple(out)


# --- the vocabulary ---------------------------------------------------------------------------


class Vocabulary:
    """What the automaton needs to know of a tokenizer: each token's bytes, which tokens may stand
    inside a JSON string, and how a literal is tokenized."""

    def __init__(self, model):  # a sampling.LocalModel
        self.model = model
        size = int(model.model.config.vocab_size)
        self.size = size
        self.by_bytes: dict[bytes, int] = {}
        safe = torch.zeros(size, dtype=torch.bool)
        chars = torch.zeros(size, dtype=torch.long)
        for token in range(min(size, len(model.tokenizer))):
            if token in model.stop_ids:
                continue
            raw = model.token_bytes(token)
            self.by_bytes.setdefault(raw, token)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if text and all(c not in '"\\' and ord(c) >= 0x20 and c != "\x7f" for c in text):
                safe[token] = True
                chars[token] = len(text)
        self.string_safe, self.char_lengths = safe, chars
        self._literals: dict[str, list[int]] = {}

    def literal(self, text: str) -> list[int]:
        if text not in self._literals:
            ids = list(self.model.tokenizer(text, add_special_tokens=False)["input_ids"])
            if b"".join(self.model.token_bytes(t) for t in ids) != text.encode():
                ids = self._greedy(text.encode())
            self._literals[text] = ids
        return self._literals[text]

    def _greedy(self, raw: bytes) -> list[int]:
        ids, i = [], 0
        while i < len(raw):
            for j in range(len(raw), i, -1):
                if raw[i:j] in self.by_bytes:
                    ids.append(self.by_bytes[raw[i:j]])
                    i = j
                    break
            else:
                raise SchemaError(f"the tokenizer cannot write {raw[i:i + 8]!r}")
        return ids

    def continuations(self, values: tuple[str, ...], done: bytes) -> dict[int, bytes]:
        """Tokens that continue `done` towards one of `values`: token id -> the bytes it adds."""
        found: dict[int, bytes] = {}
        for v in values:
            raw = v.encode()
            if not raw.startswith(done) or raw == done:
                continue
            rest = raw[len(done):]
            for k in range(1, len(rest) + 1):
                token = self.by_bytes.get(rest[:k])
                if token is not None:
                    found.setdefault(token, rest[:k])
        return found


# --- one generation under a plan ------------------------------------------------------------


class Constrained:
    """The state of one generation under a plan. Each step: `allowed(max_new)` gives the token ids
    the model may choose among (a bool mask), then `advance(token)`; `done` once the plan is written."""

    def __init__(self, plan: Plan, vocab: Vocabulary):
        self.plan, self.vocab = plan, vocab
        self.index = 0  # current segment
        self.pos = 0  # literal: tokens of it written; choice: bytes written; free: chars written
        self.choice_bytes = b""
        self.skip_quote = False  # the free string's closing quote already wrote the next literal's '"'
        self.written = 0
        self.at_choice = False  # the last allowed() was the first step of a Choice

    @property
    def done(self) -> bool:
        return self.index >= len(self.plan.segments)

    def _literal_ids(self, i: int) -> list[int]:
        seg = self.plan.segments[i]
        text = seg.text
        if i == self.index and self.skip_quote:
            text = text[1:]
        return self.vocab.literal(text) if text else []

    def reserve(self, start: int) -> int:
        """Tokens the segments from `start` on need at the least (the longest choice counted)."""
        need = 0
        for i in range(start, len(self.plan.segments)):
            seg = self.plan.segments[i]
            if isinstance(seg, Literal):
                text = seg.text[1:] if (i > 0 and isinstance(self.plan.segments[i - 1], Free)) else seg.text
                need += len(self.vocab.literal(text)) if text else 0
            elif isinstance(seg, Choice):
                # the model may spell a value in more tokens than the tokenizer would: one a byte at most
                need += max(len(v.encode()) for v in seg.values)
            else:  # a free string's closing quote
                need += 1
        return need

    def minimum_tokens(self) -> int:
        return self.reserve(0)

    def allowed(self, max_new: int) -> torch.Tensor:
        """The mask of tokens allowed next, `max_new` being how many tokens may still be generated
        (this one included)."""
        seg = self.plan.segments[self.index]
        mask = torch.zeros(self.vocab.size, dtype=torch.bool)
        self.at_choice = False
        if isinstance(seg, Literal):
            mask[self._literal_ids(self.index)[self.pos]] = True
        elif isinstance(seg, Choice):
            self.at_choice = not self.choice_bytes
            for token in self.vocab.continuations(seg.values, self.choice_bytes):
                mask[token] = True
        else:
            quote = self.vocab.literal('"')[0]
            # this token, then the closing quote and the rest of the object must still fit
            room = max_new - 2 - self.reserve(self.index + 1)
            if room >= 0:
                mask |= self.vocab.string_safe
                if seg.max_chars is not None:
                    mask &= self.vocab.char_lengths <= seg.max_chars - self.pos
            mask[quote] = True
        return mask

    def advance(self, token: int) -> None:
        seg = self.plan.segments[self.index]
        self.written += 1
        if isinstance(seg, Literal):
            self.pos += 1
            if self.pos >= len(self._literal_ids(self.index)):
                self._next()
        elif isinstance(seg, Choice):
            self.choice_bytes += self.vocab.model.token_bytes(token)
            if self.choice_bytes.decode("utf-8", "replace") in seg.values:
                self._next()
        else:
            if token == self.vocab.literal('"')[0]:
                self._next()
                self.skip_quote = True
                if self.index < len(self.plan.segments) and not self._literal_ids(self.index):
                    self._next()
            else:
                self.pos += int(self.vocab.char_lengths[token])

    def _next(self) -> None:
        self.index += 1
        self.pos, self.choice_bytes, self.skip_quote = 0, b"", False
