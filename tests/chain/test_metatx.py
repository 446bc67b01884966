"""The relayer's executeBatch calldata, written directly (metatx.encode_batch), is byte for byte what
eth_abi writes from the contract's ABI, for any requests (hypothesis)."""

from __future__ import annotations

from eth_account import Account
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.chain.abi import ContractAbi
from apps.chain.metatx import ForwardRequest, encode_batch, request_tuple

EXECUTE_BATCH = ContractAbi.load("Forwarder").fn("executeBatch")
addresses = st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())
requests = st.builds(ForwardRequest, sender=addresses, to=addresses, gas=st.integers(0, 2**64),
                     nonce=st.integers(0, 2**64), deadline=st.integers(0, 2**48 - 1), data=st.binary(max_size=300),
                     signature=st.binary(max_size=70), value=st.integers(0, 2**128))


@settings(max_examples=200, deadline=None)
@given(st.lists(requests, max_size=6), addresses)
def test_the_direct_encoding_is_eth_abis(batch, refund):
    assert encode_batch(EXECUTE_BATCH.selector, batch, refund) == EXECUTE_BATCH.encode(
        [request_tuple(r) for r in batch], refund)


def test_it_decodes_back_to_the_requests():
    batch = [ForwardRequest(Account.create().address, Account.create().address, 200_000, n, 1_900_000_000,
                            bytes(range(n, n + 100)), bytes([n]) * 65) for n in range(5)]
    refund = Account.create().address
    from eth_abi import decode

    decoded, receiver = decode(EXECUTE_BATCH.inputs, encode_batch(EXECUTE_BATCH.selector, batch, refund)[4:])
    assert receiver.lower() == refund.lower()
    assert [tuple(d) for d in decoded] == [tuple(x.lower() if isinstance(x, str) else x for x in request_tuple(r))
                                           for r in batch]
