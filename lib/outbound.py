"""The one way out to hosts that someone else names: model endpoints (chat, the oracle's references,
health checks, the registration test), IPFS nodes and the sites `leaderboard verify` reads.

A developer who registers a model, or anyone who hands verify a URL, chooses where this site
connects. So every such connection goes through here, and:

- the host is resolved once (`resolve`, the one DNS lookup) and every address it gives must be
  public: loopback, private, link-local, multicast, unspecified, reserved and cloud-metadata
  addresses are refused, in IPv4 and IPv6, IPv4-mapped and other IPv6 spellings of an IPv4
  address, and the decimal, octal and hex spellings of IPv4 (`2130706433`, `0x7f.1`, `0177.0.0.1`);
- unless the operator's allowlist (`LLMCHAIN_OUTBOUND_ALLOW`) admits the name or the address;
- the connection goes to the address that was checked (a second lookup could answer otherwise:
  DNS rebinding), while the URL's host name stays in the Host header and in TLS (SNI and the
  certificate check);
- redirects are never followed, proxies from the environment never used;
- every answer is capped in bytes and in total time.

No Django here: callers pass the allowlist (settings.LLMCHAIN_OUTBOUND_ALLOW) and the caps.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import anyio
import httpcore
import httpx

from lib.errors import ServiceError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud instance-metadata services (AWS, GCP, Azure, OpenStack; Alibaba; Oracle; AWS over IPv6):
# refused by name before any lookup, and by address whatever the allowlist says.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "100.100.100.200", "192.0.0.192", "fd00:ec2::254"))
METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal"})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_INET_ATON_PART = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")


class OutboundError(ServiceError, RuntimeError):
    """A call out was refused or cut short before it could do harm."""


class OutboundRefused(OutboundError):
    """Nothing was sent: the URL or the address it leads to is not one this site may call."""

    permanent = True


class HostUnresolved(OutboundError):
    """The host name does not resolve (now): nothing was sent; DNS may answer later. A connection
    raises it as httpx's ConnectError, as any unreachable host."""

    permanent = False


class AnswerTooLarge(OutboundError):
    """The answer went past its byte cap; reading stopped there."""

    permanent = True


class AnswerTooSlow(OutboundError):
    """The answer went past its total time; reading stopped there."""

    permanent = False


# --- addresses ------------------------------------------------------------------------------------

def resolve(host: str, port: int) -> list[str]:
    """The host's addresses: the one DNS lookup of every call out (tests stub this function)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """IPv4 as the C library's inet_aton reads it (what getaddrinfo connects to): one to four
    parts, each decimal, octal (leading 0) or hex (0x), the last filling the remaining bytes."""
    parts = text[:-1].split(".") if text.endswith(".") else text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_INET_ATON_PART.fullmatch(p) for p in parts):
        return None
    numbers = []
    for part in parts:
        if part[:2].lower() == "0x":
            numbers.append(int(part[2:] or "0", 16))
        elif part[0] == "0" and len(part) > 1:
            if set(part) & set("89"):
                return None  # not octal: a name, not an address
            numbers.append(int(part, 8))
        else:
            numbers.append(int(part))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def ip_literal(host: str) -> IPAddress | None:
    """The address a host written as an address means (any spelling), or None for a name."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return _inet_aton(text)


def _embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address reaches: mapped, NAT64, 6to4, Teredo, IPv4-compatible."""
    if ip.version == 4:
        return []
    found = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    found += list(ip.teredo or ())
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def refusal(ip: IPAddress) -> str | None:
    """Why this address is not one to call (e.g. "a loopback address"), or None for a public one."""
    for inner in _embedded_ipv4(ip):
        reason = refusal(inner)
        if reason:
            return f"{reason} ({inner} inside an IPv6 address)"
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for test, what in ((ip.is_unspecified, "the unspecified address"), (ip.is_loopback, "a loopback address"),
                       (ip.is_link_local, "a link-local address"), (ip.is_multicast, "a multicast address"),
                       (ip.is_private, "a private address")):
        if test:
            return what
    if ip.is_reserved or not ip.is_global:
        return "a reserved address, not a public one"
    return None


# --- the operator's allowlist ---------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    name: str | None  # a host name as the URL writes it, lower case
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    port: int | None  # None: any port

    def admits(self, name: str | None, ip: IPAddress, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return ip in self.network or any(inner in self.network for inner in _embedded_ipv4(ip))
        return name is not None and name == self.name


@dataclass(frozen=True)
class Allowlist:
    """Comma-separated entries, each a host name, an address or a network, with an optional port:
    `127.0.0.1:8100`, `localhost`, `10.0.0.0/8`, `[::1]:8100`, `ollama.internal:11434`. A name
    admits whatever it resolves to; an address or network admits itself. Metadata addresses and
    names are refused whatever it says."""

    rules: tuple[Rule, ...]

    def admits(self, name: str | None, ip: IPAddress, port: int) -> bool:
        return ip not in METADATA_ADDRESSES and any(rule.admits(name, ip, port) for rule in self.rules)


def _rule(entry: str) -> Rule:
    host, port = entry, None
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"LLMCHAIN_OUTBOUND_ALLOW: {entry!r} has no valid port")
    literal = ip_literal(host)
    try:
        network = ipaddress.ip_network(literal if literal is not None else host, strict=False)
    except ValueError:
        network = None
    if network is None and not re.fullmatch(r"[a-z0-9.-]+", host.lower()):
        raise ValueError(f"LLMCHAIN_OUTBOUND_ALLOW: {entry!r} is not a host, an address or a network")
    return Rule(None if network else host.lower().rstrip("."), network, int(port) if port else None)


@lru_cache(maxsize=32)
def allowlist(text: str) -> Allowlist:
    """The allowlist a setting's text describes (parsed once per text)."""
    return Allowlist(tuple(_rule(e.strip()) for e in (text or "").split(",") if e.strip()))


def origin(url: str) -> str:
    """The allowlist entry that admits exactly the host and port of `url` (an operator's own service)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _name(host: str) -> str:
    return host.strip().lower().rstrip(".")


def checked_address(host: str, port: int, allow: Allowlist | str, *, lookup: bool = True) -> str:
    """Resolve `host` once and return the address to connect to; raise OutboundRefused unless
    every address it resolves to is public or admitted by the allowlist. Without `lookup`, a host
    name that needs DNS passes as it is (what it resolves to is checked when it is called)."""
    allow = allowlist(allow) if isinstance(allow, str) else allow
    literal = ip_literal(host)
    name = None if literal is not None else _name(host)
    if name in METADATA_NAMES:
        raise OutboundRefused(f"{host} is a cloud metadata service; it is never called")
    if literal is not None:
        addresses = [literal]
    elif name == "localhost" or name.endswith(".localhost"):
        addresses = [ipaddress.ip_address("127.0.0.1")]  # RFC 6761: loopback, never asked of DNS
    elif not lookup:
        return host
    else:
        try:
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in resolve(name, port)]
        except (OSError, UnicodeError, ValueError) as exc:
            raise HostUnresolved(f"{host} cannot be resolved ({exc})") from exc
        if not addresses:
            raise HostUnresolved(f"{host} resolves to no address")
    for ip in addresses:
        reason = refusal(ip)
        if reason and not allow.admits(name, ip, port):
            shown = host if str(ip) == host.strip("[]") else f"{host} ({ip})"
            raise OutboundRefused(f"{shown}:{port} is {reason}: this site does not call it "
                                  f"unless the operator lists it in LLMCHAIN_OUTBOUND_ALLOW")
    return str(addresses[0])


def check_url(url: str, allow: Allowlist | str, *, endpoint: bool = False, lookup: bool = True) -> str:
    """Refuse a URL this site would not call, before anything is sent; returns the URL.

    http(s) with a host only, and an address the guard admits. `endpoint`: a base URL that paths
    are appended to (a model endpoint, an IPFS API): no credentials, query or fragment either,
    which would carry secrets or swallow the appended path (`...?x=` + `/v1/chat/completions`).
    `lookup=False` checks a host name without asking DNS (every connection checks it again anyway).
    """
    if any(c.isspace() or ord(c) < 32 or c == "\\" for c in url):
        raise OutboundRefused("the URL has spaces, control characters or backslashes")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OutboundRefused("the URL must start with http:// or https:// and name a host")
    if "@" in parts.netloc:
        raise OutboundRefused("the URL carries credentials (user@host): put a key in the API key field")
    if endpoint and ("?" in url or parts.query):
        raise OutboundRefused("the URL has a query (?...): give the base URL only, e.g. https://host/v1")
    if endpoint and ("#" in url or parts.fragment):
        raise OutboundRefused("the URL has a fragment (#...): give the base URL only, e.g. https://host/v1")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise OutboundRefused("the URL's port is not a number from 1 to 65535") from None
    checked_address(parts.hostname, port, allow, lookup=lookup)
    return url


# --- the transports -------------------------------------------------------------------------------

class _Backend(httpcore.NetworkBackend):
    """Connects to the checked address of the URL's host, and nowhere else."""

    def __init__(self, allow: Allowlist):
        self._allow, self._inner = allow, httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            address = checked_address(host, port, self._allow)
        except HostUnresolved as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return self._inner.connect_tcp(address, port, timeout, local_address, socket_options)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise OutboundRefused("a Unix socket is never a destination")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, allow: Allowlist):
        self._allow, self._inner = allow, httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            address = await anyio.to_thread.run_sync(checked_address, host, port, self._allow)
        except HostUnresolved as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise OutboundRefused("a Unix socket is never a destination")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@dataclass(frozen=True)
class Caps:
    max_bytes: int
    max_seconds: float

    def check(self, request: httpx.Request, received: int, started: float) -> None:
        if received > self.max_bytes:
            raise AnswerTooLarge(f"{request.url.host} answered more than {self.max_bytes} bytes; reading stopped")
        if time.monotonic() - started > self.max_seconds:
            raise AnswerTooSlow(f"{request.url.host} took longer than {self.max_seconds:g} s in all; reading stopped")

    def check_length(self, request: httpx.Request, response: httpx.Response) -> None:
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise AnswerTooLarge(f"{request.url.host} announced {length} bytes, more than {self.max_bytes}")


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, stream, caps: Caps, request: httpx.Request, started: float):
        self._stream, self._caps, self._request, self._started = stream, caps, request, started

    def __iter__(self):
        received = 0
        for chunk in self._stream:
            received += len(chunk)
            self._caps.check(self._request, received, self._started)
            yield chunk

    def close(self) -> None:
        self._stream.close()


class _AsyncCappedStream(httpx.AsyncByteStream):
    def __init__(self, stream, caps: Caps, request: httpx.Request, started: float):
        self._stream, self._caps, self._request, self._started = stream, caps, request, started

    async def __aiter__(self):
        received = 0
        chunks = self._stream.__aiter__()
        while True:
            left = self._caps.max_seconds - (time.monotonic() - self._started)
            try:
                with anyio.fail_after(max(left, 0)):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise AnswerTooSlow(f"{self._request.url.host} took longer than {self._caps.max_seconds:g} s "
                                    f"in all; reading stopped") from None
            received += len(chunk)
            self._caps.check(self._request, received, self._started)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def _guard_pool(transport, backend) -> None:
    """Make the transport's connection pool connect through `backend`.

    This reaches into httpx's private state on purpose: httpcore takes a network backend publicly
    (`ConnectionPool(network_backend=...)`), but httpx's HTTPTransport, which builds that pool, has
    no argument to pass one (httpx 0.28; adding it is proposed upstream, not released). The public
    way round, a transport of our own over an httpcore pool, would have to copy how HTTPTransport
    turns requests, answers and httpcore's errors into httpx's, itself private code (the error
    mapping lives in httpx._transports.default), and would drift from it silently; setting the one
    attribute keeps all of that httpx's, and fails loudly below if httpx changes its shape."""
    pool = transport._pool  # httpx builds the pool; the guard supplies how it connects
    if not isinstance(pool, (httpcore.ConnectionPool, httpcore.AsyncConnectionPool)) \
            or not hasattr(pool, "_network_backend"):
        raise RuntimeError("httpx's transport changed: the outbound guard cannot pin its connections")
    pool._network_backend = backend


class GuardedTransport(httpx.HTTPTransport):
    def __init__(self, allow: Allowlist, caps: Caps):
        super().__init__(trust_env=False, retries=0)
        _guard_pool(self, _Backend(allow))
        self._caps = caps

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        response = super().handle_request(request)
        self._caps.check_length(request, response)
        response.stream = _CappedStream(response.stream, self._caps, request, started)
        return response


class AsyncGuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, allow: Allowlist, caps: Caps):
        super().__init__(trust_env=False, retries=0)
        _guard_pool(self, _AsyncBackend(allow))
        self._caps = caps

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        try:
            with anyio.fail_after(self._caps.max_seconds):
                response = await super().handle_async_request(request)
        except TimeoutError:
            raise AnswerTooSlow(f"{request.url.host} did not answer within {self._caps.max_seconds:g} s") from None
        self._caps.check_length(request, response)
        response.stream = _AsyncCappedStream(response.stream, self._caps, request, started)
        return response


def client(allow: Allowlist | str, *, timeout: httpx.Timeout | float, max_bytes: int,
           max_seconds: float) -> httpx.Client:
    """An httpx client that calls out only through the guard: checked and pinned addresses, no
    redirects, no proxies from the environment, capped answers."""
    allow = allowlist(allow) if isinstance(allow, str) else allow
    return httpx.Client(transport=GuardedTransport(allow, Caps(max_bytes, max_seconds)), timeout=timeout,
                        follow_redirects=False, trust_env=False)


def async_client(allow: Allowlist | str, *, timeout: httpx.Timeout | float, max_bytes: int,
                 max_seconds: float) -> httpx.AsyncClient:
    """The asynchronous `client`."""
    allow = allowlist(allow) if isinstance(allow, str) else allow
    return httpx.AsyncClient(transport=AsyncGuardedTransport(allow, Caps(max_bytes, max_seconds)), timeout=timeout,
                             follow_redirects=False, trust_env=False)
