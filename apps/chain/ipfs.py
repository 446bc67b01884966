"""The one adapter to an IPFS node's Kubo RPC API (`/api/v0`): add, cat, pin/add.

Every call has connect and read timeouts and a bounded number of retries for transient
failures; what comes back is checked against the CID, never trusted. Works with Kubo and with
js-ipfs, which speaks the same RPC API.

Calls go out through lib/outbound.py: a node at a loopback or private address must be admitted by
LLMCHAIN_OUTBOUND_ALLOW (or, for this site's own node, be LLMCHAIN_IPFS_API_URL: `kubo_client`),
redirects are not followed and every answer is capped (a blob is at most one 256 KiB chunk).
"""

from __future__ import annotations

import json
import time

import httpx
from django.conf import settings

from lib import cid as cids
from lib import outbound
from lib.errors import ServiceError

MAX_ANSWER_BYTES = 1024 * 1024
MAX_ANSWER_S = 120.0


class IpfsError(ServiceError, RuntimeError):
    """An IPFS call failed; `permanent` says whether retrying can help."""

    permanent = True


class IpfsUnavailable(IpfsError):
    """The node did not answer (down, refusing connections, timing out)."""

    permanent = False


class IpfsNotFound(IpfsError):
    """The node could not find the content within the timeout."""


class IpfsCorrupt(IpfsError):
    """The bytes handed back are not the content the CID names."""


class KuboClient:
    def __init__(self, api_url: str, *, timeout: float = 10.0, connect_timeout: float = 3.0,
                 retries: int = 2, backoff: float = 0.5, allow: str | None = None):
        """`allow`: the outbound allowlist (settings.LLMCHAIN_OUTBOUND_ALLOW by default)."""
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._http = outbound.client(settings.LLMCHAIN_OUTBOUND_ALLOW if allow is None else allow,
                                     timeout=httpx.Timeout(timeout, connect=connect_timeout),
                                     max_bytes=MAX_ANSWER_BYTES, max_seconds=MAX_ANSWER_S)

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, *, params: dict, files: dict | None = None,
              timeout: float | None = None, retry: bool = True) -> httpx.Response:
        url = f"{self.api_url}/api/v0/{path}"
        attempts = 1 + (self.retries if retry else 0)
        for attempt in range(attempts):
            try:
                kwargs = {"params": params, "files": files}
                if timeout is not None:
                    kwargs["timeout"] = httpx.Timeout(timeout, connect=self._http.timeout.connect)
                response = self._http.post(url, **kwargs)
            except httpx.TimeoutException as exc:
                error: IpfsError = IpfsUnavailable(f"IPFS node at {self.api_url} timed out on {path}: {exc}")
            except httpx.TransportError as exc:
                error = IpfsUnavailable(f"IPFS node at {self.api_url} is unreachable: {exc}")
            except outbound.OutboundError as exc:
                error = (IpfsUnavailable if isinstance(exc, outbound.AnswerTooSlow) else IpfsError)(
                    f"IPFS {path} at {self.api_url}: {exc}")
                if error.permanent:
                    raise error from exc
            else:
                if response.status_code == 200:
                    return response
                error = self._http_error(path, response)
                if error.permanent:
                    raise error
            if attempt + 1 < attempts:
                time.sleep(self.backoff * 2**attempt)
        raise error

    def _http_error(self, path: str, response: httpx.Response) -> IpfsError:
        try:
            message = response.json().get("Message", "")
        except (ValueError, AttributeError):
            message = response.text[:300]
        text = f"IPFS {path} failed ({response.status_code}): {message}"
        lowered = message.lower()
        if any(w in lowered for w in ("not found", "timeout", "timed out", "deadline", "aborted")):
            return IpfsNotFound(text)
        if response.status_code >= 500 and not message:
            return IpfsUnavailable(text)
        if response.status_code in (502, 503, 504):
            return IpfsUnavailable(text)
        return IpfsError(text)

    def version(self) -> dict:
        return self._post("version", params={}).json()

    def add(self, data: bytes) -> str:
        """Add one raw block the way `ipfs add --cid-version=1 --raw-leaves` does; returns its CID."""
        expected = cids.cid_for(data)
        response = self._post("add", params={"cid-version": "1", "raw-leaves": "true", "pin": "false",
                                             "cid-base": "base32", "quieter": "true"},
                              files={"file": ("blob", data, "application/octet-stream")})
        lines = [json.loads(line) for line in response.text.splitlines() if line.strip()]
        if not lines or "Hash" not in lines[-1]:
            raise IpfsError(f"IPFS add gave no CID: {response.text[:200]}")
        got = lines[-1]["Hash"]
        if cids.normalize(got) != expected:
            raise IpfsCorrupt(f"the node stored the bytes as {got}, not {expected}")
        return expected

    def pin(self, cid: str) -> None:
        self._post("pin/add", params={"arg": cids.normalize(cid)})

    def cat(self, cid: str, *, timeout: float | None = None) -> bytes:
        """The bytes of `cid`, verified; IpfsNotFound if the node cannot find them in time."""
        cid = cids.normalize(cid)
        wait = timeout or self.timeout
        # The node's own timeout ends its search; ours (a little longer) ends a hung connection.
        response = self._post("cat", params={"arg": cid, "timeout": f"{max(wait - 0.5, 0.5)}s"},
                              timeout=wait + 1, retry=False)
        data = response.content
        if not cids.matches(cid, data):
            raise IpfsCorrupt(f"the node returned {len(data)} bytes that are not {cid}")
        return data
