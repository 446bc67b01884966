"""ERC-2771 meta-transactions: requests signed by their senders (EIP-712) and relayed through the
trusted forwarder (contracts/Forwarder.sol, OpenZeppelin's ERC2771Forwarder).

A request names its sender (`from`), the contract it calls (`to`), the gas that call gets, the
sender's forwarder nonce and a deadline (unix seconds); its signature is the sender's EIP-712
signature over them under the domain ("LLMChain", "1", chainId, forwarder). The forwarder checks
the signature, the nonce (so a replay fails) and the deadline, then calls `to` with the sender's
address appended, which the Reputation contract reads as `_msgSender()`.

`typed_data` is the exact message a wallet signs with `eth_signTypedData_v4`; `sign_request` signs
it with a key the site holds (custodial accounts); `request_tuple` is the calldata form
`execute`/`executeBatch` take.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils import to_checksum_address

from .client import from_hex, to_hex

DOMAIN_NAME, DOMAIN_VERSION = "LLMChain", "1"
FORWARD_REQUEST = [
    {"name": "from", "type": "address"},
    {"name": "to", "type": "address"},
    {"name": "value", "type": "uint256"},
    {"name": "gas", "type": "uint256"},
    {"name": "nonce", "type": "uint256"},
    {"name": "deadline", "type": "uint48"},
    {"name": "data", "type": "bytes"},
]
EIP712_DOMAIN = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]


@dataclass(frozen=True)
class ForwardRequest:
    sender: str
    to: str
    gas: int
    nonce: int
    deadline: int
    data: bytes
    signature: bytes = b""
    value: int = 0

    def signed(self, signature: bytes) -> "ForwardRequest":
        return ForwardRequest(self.sender, self.to, self.gas, self.nonce, self.deadline, self.data, signature,
                              self.value)


def typed_data(request: ForwardRequest, chain_id: int, forwarder: str) -> dict:
    """The EIP-712 message of `request`, as `eth_signTypedData_v4` takes it (JSON-ready: bytes as 0x hex)."""
    return {
        "types": {"EIP712Domain": EIP712_DOMAIN, "ForwardRequest": FORWARD_REQUEST},
        "primaryType": "ForwardRequest",
        "domain": {"name": DOMAIN_NAME, "version": DOMAIN_VERSION, "chainId": chain_id,
                   "verifyingContract": to_checksum_address(forwarder)},
        "message": {"from": to_checksum_address(request.sender), "to": to_checksum_address(request.to),
                    "value": request.value, "gas": request.gas, "nonce": request.nonce,
                    "deadline": request.deadline, "data": to_hex(request.data)},
    }


def _signable(request: ForwardRequest, chain_id: int, forwarder: str):
    message = typed_data(request, chain_id, forwarder)
    message["message"] = {**message["message"], "data": request.data}
    return encode_typed_data(full_message=message)


def sign_request(request: ForwardRequest, private_key: bytes | str, chain_id: int, forwarder: str) -> ForwardRequest:
    """`request` signed with `private_key`, which must be the key of `request.sender`."""
    signed = Account.sign_message(_signable(request, chain_id, forwarder), private_key)
    return request.signed(bytes(signed.signature))


def recover_signer(request: ForwardRequest, chain_id: int, forwarder: str) -> str:
    """Who signed `request` (to check a signature a browser wallet sent before storing it)."""
    return Account.recover_message(_signable(request, chain_id, forwarder), signature=request.signature)


def request_tuple(request: ForwardRequest) -> tuple:
    """The ForwardRequestData struct: (from, to, value, gas, deadline, data, signature)."""
    return (to_checksum_address(request.sender), to_checksum_address(request.to), request.value, request.gas,
            request.deadline, request.data, request.signature)


def from_json(data: dict) -> ForwardRequest:
    """A request as stored or sent by a browser (0x hex for bytes)."""
    return ForwardRequest(sender=data["from"], to=data["to"], gas=int(data["gas"]), nonce=int(data["nonce"]),
                          deadline=int(data["deadline"]), data=from_hex(data["data"]),
                          signature=from_hex(data.get("signature") or "0x"), value=int(data.get("value", 0)))


def to_json(request: ForwardRequest) -> dict:
    return {"from": request.sender, "to": request.to, "value": request.value, "gas": request.gas,
            "nonce": request.nonce, "deadline": request.deadline, "data": to_hex(request.data),
            "signature": to_hex(request.signature)}


def _word(n: int) -> bytes:
    return n.to_bytes(32, "big")


def _address_word(address: str) -> bytes:
    raw = bytes.fromhex(address[2:] if address.startswith(("0x", "0X")) else address)
    if len(raw) != 20:
        raise ValueError(f"not an address: {address!r}")
    return bytes(12) + raw


def _dynamic(data: bytes) -> bytes:
    return _word(len(data)) + data + bytes(-len(data) % 32)


def encode_batch(selector: bytes, requests: list[ForwardRequest], refund_receiver: str) -> bytes:
    """`executeBatch(ForwardRequestData[], address)` calldata, written directly: the ABI encoding of
    the array of (from, to, value, gas, deadline, data, signature) tuples and the refund receiver,
    byte for byte what eth_abi writes (tests/chain/test_metatx.py), at a tenth of its cost (the relayer
    encodes thousands of requests a second)."""
    elements = []
    for r in requests:
        data, signature = _dynamic(r.data), _dynamic(r.signature)
        elements.append(_address_word(r.sender) + _address_word(r.to) + _word(r.value) + _word(r.gas)
                        + _word(r.deadline) + _word(7 * 32) + _word(7 * 32 + len(data)) + data + signature)
    offsets, position = [], 32 * len(elements)
    for element in elements:
        offsets.append(_word(position))
        position += len(element)
    return (selector + _word(64) + _address_word(refund_receiver) + _word(len(elements)) + b"".join(offsets)
            + b"".join(elements))
