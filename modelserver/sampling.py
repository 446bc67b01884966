"""Generating with the built-in model: one token at a time from a causal LM, with temperature,
top_p and a seeded RNG, yielding text as soon as it is whole UTF-8 and the logprobs OpenAI reports."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from .constrain import Constrained, Plan, Vocabulary


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    logprobs: bool = False
    top_logprobs: int = 0
    plan: Plan | None = None  # constrained decoding (constrain.py): a JSON schema or a list of choices


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
    """A causal LM and its tokenizer. Generations running at once take turns token by token (one forward
    pass at a time, each with its own cache), so that two answers asked together both stream — as an
    arena battle between two models served here asks — instead of the second waiting for the first."""

    def __init__(self, tokenizer, model):
        self.tokenizer = tokenizer
        self.model = model
        self.context_length = int(getattr(model.config, "max_position_embeddings", 2048))
        self._lock = threading.Lock()  # the model: one forward pass at a time
        # The tokenizer, which is not made to be used by two threads at once; reentrant, since building the
        # vocabulary holds it while it asks token_bytes for every token.
        self._words = threading.RLock()
        self._bytes: dict[int, bytes] = {}
        self._byte_decoder = _byte_decoder()
        self.stop_ids = set(tokenizer.all_special_ids)
        eos = model.generation_config.eos_token_id
        self.stop_ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self._vocabulary: Vocabulary | None = None

    @property
    def vocabulary(self) -> Vocabulary:
        """The vocabulary as constrained decoding sees it (built on first use, about a second)."""
        if self._vocabulary is None:
            with self._words:
                if self._vocabulary is None:
                    self._vocabulary = Vocabulary(self)
        return self._vocabulary

    def constrained(self, plan: Plan) -> Constrained:
        return Constrained(plan, self.vocabulary)

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The chat template applied to `messages`, ending with the assistant's turn."""
        with self._words:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompt_ids: list[int], params: SamplingParams, rng: torch.Generator) -> Iterator[Piece]:
        """Yield the answer piece by piece as it is generated; each step holds the model only for its
        forward pass, so other generations advance between this one's tokens."""
        yield from self._generate(prompt_ids, params, rng)

    def _generate(self, prompt_ids, params, rng):
        cache = None
        input_ids = torch.tensor([prompt_ids])
        generated: list[int] = []
        pending: list[dict] = []
        emitted = 0
        finish = "length"
        constraint = self.constrained(params.plan) if params.plan is not None else None
        for step in range(params.max_tokens):
            if constraint is not None and constraint.done:
                finish = "stop"
                break
            with torch.inference_mode():
                with self._lock:
                    out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                logits = out.logits[0, -1].float()
                allowed = None
                if constraint is None:
                    token = _choose(logits, params, rng)
                else:
                    allowed = constraint.allowed(params.max_tokens - step)
                    token = _choose(logits.masked_fill(~allowed[:logits.shape[0]], float("-inf")), params, rng)
                    constraint.advance(token)
                if token in self.stop_ids:
                    finish = "stop"
                    break
                if params.logprobs:
                    only = allowed if constraint is not None and constraint.at_choice else None
                    pending.append(self._logprob_entry(logits, token, params.top_logprobs, only))
            generated.append(token)
            input_ids = torch.tensor([[token]])
            text = self._decode(generated)
            if text.endswith("\ufffd"):
                continue  # half of a multi-byte character: wait for the rest
            if len(text) > emitted or pending:
                yield Piece(text[emitted:], pending)
                emitted, pending = len(text), []
        if constraint is not None and constraint.done:
            finish = "stop"
        yield Piece(self._decode(generated)[emitted:], pending, finish, len(generated))

    def _decode(self, ids: list[int]) -> str:
        with self._words:
            return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes a token stands for (a token may hold part of a UTF-8 character)."""
        if token_id not in self._bytes:
            with self._words:
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

    def _logprob_entry(self, logits: torch.Tensor, token: int, top: int, only: torch.Tensor | None = None) -> dict:
        # Logprobs of the model's own distribution, before temperature, top_p and any constraint, as
        # OpenAI reports them. At a choice position of constrained decoding (`only`: the allowed
        # tokens) top_logprobs lists the allowed tokens, with those same unconstrained logprobs: their
        # sum is the mass the model put on the allowed values by itself.
        logp = torch.log_softmax(logits, dim=-1)
        entry = self._token_info(token, float(logp[token]))
        if only is not None and top:
            ids = torch.nonzero(only[:logp.shape[0]]).flatten()
            order = torch.argsort(logp[ids], descending=True)[:20]  # OpenAI's most
            entry["top_logprobs"] = [self._token_info(int(ids[i]), float(logp[ids[i]])) for i in order]
            return entry
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


def seeded_rng(seed: int | None) -> torch.Generator:
    """A torch RNG seeded with `seed`, or randomly when it is None."""
    rng = torch.Generator()
    rng.manual_seed(seed if seed is not None else secrets.randbits(63))
    return rng
