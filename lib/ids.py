"""bytes32 ids: interactions, models and contexts, as the contracts take them (32 raw bytes) and as
the site's tables, URLs and records spell them (0x + 64 lowercase hex digits)."""

from __future__ import annotations

import re

HEX32_PATTERN = r"0x[0-9a-fA-F]{64}"  # unanchored, for patterns that embed it (a URL's path)
HEX32 = re.compile(HEX32_PATTERN)


def is_hex32(value) -> bool:
    """0x followed by exactly 64 hex digits (either case)."""
    return isinstance(value, str) and HEX32.fullmatch(value) is not None


def b32(value: str | bytes) -> bytes:
    """A bytes32 id from 0x-hex (the outbox keeps ids as hex strings), or 32 bytes unchanged."""
    if isinstance(value, bytes):
        raw = value
    else:
        raw = bytes.fromhex(value[2:] if value.startswith("0x") else value)
    if len(raw) != 32:
        raise ValueError(f"expected 32 bytes, got {len(raw)}")
    return raw


def hex32(value: bytes) -> str:
    """An id as the site spells it: 0x + lowercase hex."""
    return "0x" + bytes(value).hex()
