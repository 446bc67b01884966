"""The one error kind of the adapters to outside systems (the chain node, the IPFS node, model
endpoints), so that a worker decides "try again later, or give up?" the same way for all of them.

Each adapter has its own subclass (apps/chain/client.py ChainError, apps/chain/ipfs.py IpfsError,
apps/chat/gateway.py GatewayError) and says, per failure, whether it is `permanent`: the same
request can never succeed (a refusal, a revert, an answer that is not what was asked for), or
it may succeed later (the node is down, busy or timing out).
"""

from __future__ import annotations


class ServiceError(Exception):
    """An outside system failed; `permanent` says whether trying the same request again can help."""

    permanent: bool = True


def is_permanent(error: BaseException) -> bool:
    """Whether retrying cannot help: a ServiceError says so itself; a timeout or a broken
    connection passes; any other error is a fault that would only happen again."""
    if isinstance(error, ServiceError):
        return error.permanent
    return not isinstance(error, (TimeoutError, ConnectionError))
