"""Canonical, versioned JSON records kept on IPFS: model metadata and interaction evidence.

Same content gives the same bytes and so the same CID: keys sorted, no whitespace, UTF-8,
no floats (fixed-point numbers travel as decimal strings, as on-chain), no NaN. Every record
names its schema and version, so a reader years later knows how to read it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .ids import is_hex32

MODEL_SCHEMA = "llmchain/model-metadata"
EVIDENCE_SCHEMA = "llmchain/interaction-evidence"
VERSION = 1
MAX_TEXT = 100_000  # characters in one prompt or answer

ENDPOINT_KINDS = ("openai-chat", "builtin", "replay")
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_WAD = re.compile(r"^(0|[1-9][0-9]{0,18})$")  # 0 .. 1e18 fits; range checked below
WAD = 10**18


class RecordError(ValueError):
    """A record that does not follow its schema; the message says which field and why."""


def canonical(obj: Any) -> bytes:
    """The one byte string for a JSON value built from dicts, lists, str, int, bool, None."""
    _check_value(obj, "record")
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _check_value(value: Any, where: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > 2**53:  # beyond what every JSON reader holds exactly
            raise RecordError(f"{where}: integer {value} is too large; write it as a decimal string")
        return
    if isinstance(value, float):
        raise RecordError(f"{where}: floats are not canonical; use an integer or a decimal string")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise RecordError(f"{where}: keys must be strings")
            _check_value(v, f"{where}.{k}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_value(v, f"{where}[{i}]")
        return
    raise RecordError(f"{where}: {type(value).__name__} is not a JSON value")


# --- field checks ---------------------------------------------------------------------------

def _text(d: dict, key: str, *, required: bool = True, limit: int = MAX_TEXT, where: str = "") -> str:
    value = d.get(key)
    label = f"{where}{key}"
    if value is None or value == "":
        if required:
            raise RecordError(f"{label} is required")
        return ""
    if not isinstance(value, str):
        raise RecordError(f"{label} must be text")
    if len(value) > limit:
        raise RecordError(f"{label} is longer than {limit} characters")
    return value


def _bytes32(d: dict, key: str, where: str = "") -> str:
    value = d.get(key)
    if not is_hex32(value):
        raise RecordError(f"{where}{key} must be a 0x-prefixed 32-byte hex id")
    return value.lower()


def _wad(d: dict, key: str, where: str = "") -> str:
    value = d.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not _WAD.match(value) or int(value) > WAD:
        raise RecordError(f"{where}{key} must be a decimal string between 0 and {WAD} (1e18 = 1.0)")
    return value


def _header(d: Any, schema: str) -> dict:
    if not isinstance(d, dict):
        raise RecordError("a record is a JSON object")
    if d.get("schema") != schema:
        raise RecordError(f"schema must be {schema!r}, not {d.get('schema')!r}")
    if d.get("version") != VERSION:
        raise RecordError(f"{schema} version {d.get('version')!r} is not supported (this site reads {VERSION})")
    return d


def _no_extra(d: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise RecordError(f"{where}unknown field(s): {', '.join(extra)}")


# --- model metadata --------------------------------------------------------------------------

def model_metadata(*, name: str, provider: str, owner: str, endpoint_kind: str,
                   parameters: str = "", licence: str = "", description: str = "",
                   model_name: str = "", contexts: list[str] | None = None) -> dict:
    """Build a model-metadata record; raises RecordError on bad fields."""
    record = {"schema": MODEL_SCHEMA, "version": VERSION, "name": name, "provider": provider,
              "owner": owner, "endpoint_kind": endpoint_kind, "parameters": parameters,
              "licence": licence, "description": description, "model_name": model_name,
              "contexts": sorted(set(contexts or []))}
    return check_model_metadata(record)


def check_model_metadata(d: Any) -> dict:
    _header(d, MODEL_SCHEMA)
    _no_extra(d, {"schema", "version", "name", "provider", "owner", "endpoint_kind", "parameters",
                  "licence", "description", "model_name", "contexts"}, "model metadata: ")
    _text(d, "name", limit=200)
    _text(d, "provider", limit=200)
    if not isinstance(d.get("owner"), str) or not _ADDRESS.match(d["owner"]):
        raise RecordError("owner must be a 0x-prefixed 20-byte address")
    if d.get("endpoint_kind") not in ENDPOINT_KINDS:
        raise RecordError(f"endpoint_kind must be one of {', '.join(ENDPOINT_KINDS)}")
    for key, limit in (("parameters", 100), ("licence", 200), ("description", 5000), ("model_name", 200)):
        _text(d, key, required=False, limit=limit)
    contexts = d.get("contexts", [])
    if not isinstance(contexts, list) or not all(isinstance(c, str) and c for c in contexts):
        raise RecordError("contexts must be a list of context names")
    if contexts != sorted(set(contexts)):
        raise RecordError("contexts must be sorted and distinct")
    return d


# --- interaction evidence --------------------------------------------------------------------

def interaction_evidence(*, interaction_id: str, context_id: str, context_name: str, prompt: str,
                         model_id: str, answer: str, references: list[dict], metric: dict,
                         sa: int | str, wa: int | str, history: list[dict] | None = None,
                         weighting: dict | None = None) -> dict:
    """Build an evidence record: the prompt, the answer, the k reference answers and the scores.

    `references` items: {"model": id, "text": answer, "score": Sa_i as WAD}; `metric`:
    {"name": ..., "params": {...}} describing how the scores were computed; `weighting`: how wA was
    derived (lib/weighting.py), so that it can be rebuilt.
    """
    record = {"schema": EVIDENCE_SCHEMA, "version": VERSION, "interaction": interaction_id,
              "context": {"id": context_id, "name": context_name}, "prompt": prompt,
              "history": list(history or []),
              "answer": {"model": model_id, "text": answer},
              "references": [{"model": r["model"], "text": r["text"], "score": str(r["score"])}
                             for r in references],
              "metric": metric, "hasReference": bool(references),
              "scores": {"sA": str(sa), "wA": str(wa)}}
    if weighting is not None:
        record["weighting"] = weighting
    return check_evidence(record)


def check_evidence(d: Any) -> dict:
    _header(d, EVIDENCE_SCHEMA)
    _no_extra(d, {"schema", "version", "interaction", "context", "prompt", "history", "answer",
                  "references", "metric", "hasReference", "scores", "weighting"}, "evidence: ")
    _bytes32(d, "interaction")
    ctx = d.get("context")
    if not isinstance(ctx, dict):
        raise RecordError("context must be an object with id and name")
    _bytes32(ctx, "id", "context.")
    _text(ctx, "name", limit=200, where="context.")
    _text(d, "prompt")
    history = d.get("history", [])
    if not isinstance(history, list):
        raise RecordError("history must be a list of messages")
    for i, m in enumerate(history):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise RecordError(f"history[{i}] must be a message with role system, user or assistant")
        _text(m, "content", where=f"history[{i}].")
    answer = d.get("answer")
    if not isinstance(answer, dict):
        raise RecordError("answer must be an object with model and text")
    _bytes32(answer, "model", "answer.")
    _text(answer, "text", required=False, where="answer.")
    refs = d.get("references")
    if not isinstance(refs, list):
        raise RecordError("references must be a list")
    for i, r in enumerate(refs):
        if not isinstance(r, dict):
            raise RecordError(f"references[{i}] must be an object")
        _bytes32(r, "model", f"references[{i}].")
        if r["model"].lower() == answer["model"].lower():
            raise RecordError(f"references[{i}] comes from the evaluated model itself")
        _text(r, "text", required=False, where=f"references[{i}].")
        _wad(r, "score", f"references[{i}].")
    if d.get("hasReference") is not bool(refs):
        raise RecordError("hasReference must be true exactly when there are references")
    metric = d.get("metric")
    if not isinstance(metric, dict) or not isinstance(metric.get("name"), str) or not metric["name"]:
        raise RecordError("metric must be an object with a name")
    scores = d.get("scores")
    if not isinstance(scores, dict):
        raise RecordError("scores must be an object with sA and wA")
    _wad(scores, "sA", "scores.")
    _wad(scores, "wA", "scores.")
    if "weighting" in d:
        from .weighting import check_weighting  # it reads records' canonical form

        check_weighting(d["weighting"], len(refs))
    return d


CHECKS = {MODEL_SCHEMA: check_model_metadata, EVIDENCE_SCHEMA: check_evidence}


def parse(data: bytes) -> dict:
    """Read a record's bytes: valid UTF-8 JSON of a known schema, in canonical form."""
    try:
        d = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"not a JSON record: {exc}") from exc
    if not isinstance(d, dict) or d.get("schema") not in CHECKS:
        raise RecordError("not an LLMChain record (unknown or missing schema)")
    CHECKS[d["schema"]](d)
    if canonical(d) != bytes(data):
        raise RecordError("record is not in canonical form (sorted keys, no spaces, UTF-8)")
    return d
