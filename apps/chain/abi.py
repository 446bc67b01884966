"""Encode calls and decode errors and events from a compiled contract's ABI (eth_abi only).

Hot paths (the submitter encodes thousands of calls a second) use precomputed selectors and
types instead of web3's contract objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from eth_abi import decode, encode
from eth_utils import keccak, to_checksum_address

BUILD_DIR = Path(__file__).resolve().parents[2] / "contracts" / "build"


def _type(param: dict) -> str:
    t = param["type"]
    if t.startswith("tuple"):
        return "(" + ",".join(_type(c) for c in param["components"]) + ")" + t[len("tuple"):]
    return t


def _signature(item: dict) -> str:
    return f"{item['name']}({','.join(_type(p) for p in item['inputs'])})"


def _plain(value: Any, abi_type: str) -> Any:
    if abi_type == "address":
        return to_checksum_address(value)
    if isinstance(value, tuple):
        return list(value)
    return value


@dataclass(frozen=True)
class Function:
    name: str
    selector: bytes
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def encode(self, *args: Any) -> bytes:
        return self.selector + encode(self.inputs, args)

    def decode_output(self, data: bytes) -> tuple:
        return tuple(_plain(v, t) for v, t in zip(decode(self.outputs, data), self.outputs))


@dataclass(frozen=True)
class Event:
    name: str
    topic: bytes
    indexed: tuple[tuple[str, str], ...]
    data: tuple[tuple[str, str], ...]

    def decode(self, topics: list[bytes], data: bytes) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for (name, t), topic in zip(self.indexed, topics[1:]):
            out[name] = decode([t], topic)[0] if t not in ("string", "bytes") else topic
        values = decode([t for _, t in self.data], data)
        for (name, t), value in zip(self.data, values):
            out[name] = value
        return {k: _plain(v, dict(self.indexed + self.data)[k]) for k, v in out.items()}


@dataclass(frozen=True)
class ErrorDef:
    name: str
    selector: bytes
    inputs: tuple[str, ...]


class ContractAbi:
    def __init__(self, name: str, abi: list[dict], bytecode: str = "0x"):
        self.name = name
        self.abi = abi
        self.bytecode = bytecode

    @classmethod
    def load(cls, name: str, build_dir: Path = BUILD_DIR) -> "ContractAbi":
        art = json.loads((build_dir / f"{name}.json").read_text())
        return cls(name, art["abi"], art["bytecode"])

    @cached_property
    def functions(self) -> dict[str, Function]:
        out = {}
        for item in self.abi:
            if item["type"] == "function":
                out[item["name"]] = Function(
                    item["name"], keccak(text=_signature(item))[:4],
                    tuple(_type(p) for p in item["inputs"]), tuple(_type(p) for p in item["outputs"]))
        return out

    @cached_property
    def events(self) -> dict[bytes, Event]:
        out = {}
        for item in self.abi:
            if item["type"] == "event":
                ins = item["inputs"]
                out[keccak(text=_signature(item))] = Event(
                    item["name"], keccak(text=_signature(item)),
                    tuple((p["name"], _type(p)) for p in ins if p["indexed"]),
                    tuple((p["name"], _type(p)) for p in ins if not p["indexed"]))
        return out

    def event_topic(self, name: str) -> bytes:
        return next(e.topic for e in self.events.values() if e.name == name)

    @cached_property
    def errors(self) -> dict[bytes, ErrorDef]:
        out = {}
        for item in self.abi:
            if item["type"] == "error":
                sel = keccak(text=_signature(item))[:4]
                out[sel] = ErrorDef(item["name"], sel, tuple(_type(p) for p in item["inputs"]))
        return out

    def fn(self, name: str) -> Function:
        return self.functions[name]

    def decode_revert(self, data: bytes) -> tuple[str, tuple]:
        """Name and arguments of a revert, from the contract's custom errors or Error(string)."""
        if len(data) < 4:
            return ("Reverted", ())
        sel, body = data[:4], data[4:]
        if sel == keccak(text="Error(string)")[:4]:
            return ("Error", tuple(decode(["string"], body)))
        if sel == keccak(text="Panic(uint256)")[:4]:
            return ("Panic", tuple(decode(["uint256"], body)))
        err = self.errors.get(sel)
        if err is None:
            return ("UnknownError", ("0x" + data.hex(),))
        return (err.name, tuple(decode(err.inputs, body)))

    def decode_log(self, topics: list[bytes], data: bytes) -> tuple[str, dict[str, Any]] | None:
        if not topics:
            return None
        ev = self.events.get(bytes(topics[0]))
        if ev is None:
            return None
        return ev.name, ev.decode([bytes(t) for t in topics], bytes(data))
