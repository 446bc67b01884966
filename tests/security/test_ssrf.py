"""SSRF: whoever names a host (a developer registering a model endpoint, a visitor handing verify a
site or an IPFS node) never makes this site connect where it should not.

Each attempt is refused with a clear error and nothing is sent: the listener on 127.0.0.1, which the
allowlist does not admit, gets no connection, and no socket is opened to it (Python's audit events
record every connect). Private and metadata addresses are given as literals or through the stubbed
lookup, and refused before any socket exists; the suite's safety net stops any connect past 127.0.0.1.
"""

from __future__ import annotations

import time

import httpx
import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from apps.chain.ipfs import IpfsError, KuboClient
from apps.chat.gateway import BadResponse, Endpoint, EndpointRefused, EndpointUnavailable, Gateway
from apps.chat.registry import check_endpoint_url
from apps.leaderboard.verify import RemoteSite, VerifyError
from lib import outbound

NOT_CALLED = "the model's endpoint is at an address this site does not call"

# Every way of writing the listener's address, 127.0.0.1 (the last ones are other local addresses).
LOOPBACK_SPELLINGS = [
    ("dotted", "127.0.0.1", "a loopback address"),
    ("name", "localhost", "a loopback address"),
    ("name in capitals with the root dot", "LOCALHOST.", "a loopback address"),
    ("a name under localhost", "models.localhost", "a loopback address"),
    ("decimal", "2130706433", "a loopback address"),
    ("hex", "0x7f000001", "a loopback address"),
    ("octal", "0177.0.0.1", "a loopback address"),  # httpx already refuses these two as URLs
    ("zero-padded octal parts", "127.000.000.001", "a loopback address"),
    ("two parts", "127.1", "a loopback address"),
    ("hex and decimal parts", "0x7f.0.0.1", "a loopback address"),
    ("IPv4-mapped IPv6", "[::ffff:127.0.0.1]", "a loopback address"),
    ("IPv4-mapped IPv6 in hex", "[::ffff:7f00:1]", "a loopback address"),
    ("IPv4-compatible IPv6", "[::127.0.0.1]", "a loopback address"),
    ("NAT64 IPv6", "[64:ff9b::7f00:1]", "a loopback address"),
    ("6to4 IPv6", "[2002:7f00:1::]", "a loopback address"),
    ("IPv6 loopback", "[::1]", "a loopback address"),
    ("the unspecified address", "0.0.0.0", "the unspecified address"),
    ("zero", "0", "the unspecified address"),
]

# Addresses no test ever connects to: refused before a socket exists (and the safety net would stop one).
FORBIDDEN_LITERALS = [
    ("AWS, GCP and Azure metadata", "169.254.169.254", "a cloud metadata address"),
    ("ECS task metadata", "169.254.170.2", "a cloud metadata address"),
    ("AWS metadata over IPv6", "[fd00:ec2::254]", "a cloud metadata address"),
    ("Alibaba metadata", "100.100.100.200", "a cloud metadata address"),
    ("metadata as an IPv4-mapped IPv6 address", "[::ffff:169.254.169.254]", "a cloud metadata address"),
    ("metadata in decimal", "2852039166", "a cloud metadata address"),
    ("private 10/8", "10.0.0.5", "a private address"),
    ("private 172.16/12", "172.16.0.1", "a private address"),
    ("private 192.168/16", "192.168.1.10", "a private address"),
    ("private in hex", "0xc0a8010a", "a private address"),
    ("unique local IPv6", "[fc00::1]", "a private address"),
    ("link-local IPv4", "169.254.1.1", "a link-local address"),
    ("link-local IPv6", "[fe80::1]", "a link-local address"),
    ("multicast IPv4", "224.0.0.1", "a multicast address"),
    ("multicast IPv6", "[ff02::1]", "a multicast address"),
    ("shared address space (carrier NAT)", "100.64.0.1", "a reserved address"),
    ("documentation range", "192.0.2.1", "a private address"),
    ("broadcast", "255.255.255.255", "a private address"),
]


def ask(url: str):
    """What chat, the oracle's references and health checks do first: reach the endpoint through the gateway."""
    return Gateway(retries=0, backoff=0).check(Endpoint(url, "tiny"))


def refused_at_registration(url: str) -> str:
    with pytest.raises(ValidationError) as error:
        check_endpoint_url(url)
    return error.value.message_dict["endpoint_url"][0]


def assert_nothing_sent(listener, sockets) -> None:
    time.sleep(0.05)
    assert sockets.to(listener.port) == [] and listener.connections == []


@pytest.mark.parametrize("host, reason", [(h, r) for _, h, r in LOOPBACK_SPELLINGS],
                         ids=[i for i, _, _ in LOOPBACK_SPELLINGS])
async def test_the_listener_is_not_reached_however_its_address_is_written(host, reason, listener, sockets):
    url = listener.url(host)
    with pytest.raises(EndpointRefused) as error:
        await ask(url)
    assert error.value.permanent
    if str(error.value) == "the model's endpoint URL is not valid":  # httpx's parser refused it first
        assert "Invalid IPv4 address" in error.value.detail
    else:
        assert str(error.value) == NOT_CALLED
        assert reason in error.value.detail and "LLMCHAIN_OUTBOUND_ALLOW" in error.value.detail
    assert_nothing_sent(listener, sockets)


@pytest.mark.parametrize("host, reason", [(h, r) for _, h, r in LOOPBACK_SPELLINGS if "." in h or ":" in h],
                         ids=[i for i, h, _ in LOOPBACK_SPELLINGS if "." in h or ":" in h])
def test_registration_refuses_an_endpoint_at_the_listener(host, reason, listener, sockets):
    message = refused_at_registration(listener.url(host))
    assert message.startswith("Refused: ") and reason in message
    assert_nothing_sent(listener, sockets)


@pytest.mark.parametrize("host, reason", [(h, r) for _, h, r in FORBIDDEN_LITERALS],
                         ids=[i for i, _, _ in FORBIDDEN_LITERALS])
async def test_private_and_metadata_addresses_are_refused_before_any_socket(host, reason, sockets):
    with pytest.raises(EndpointRefused) as error:
        await ask(f"http://{host}/latest/meta-data")
    assert reason in error.value.detail
    assert sockets.connects == [] and sockets.lookups == []


async def test_a_metadata_name_is_refused_without_even_a_lookup(dns, sockets):
    for name in ("metadata.google.internal", "METADATA.GOOGLE.INTERNAL.", "metadata"):
        with pytest.raises(EndpointRefused) as error:
            await ask(f"http://{name}/computeMetadata/v1")
        assert "cloud metadata service" in error.value.detail
    assert dns.asked == [] and sockets.connects == []


@pytest.mark.parametrize("answer, reason", [
    (["10.1.2.3"], "a private address"),
    (["169.254.169.254"], "a cloud metadata address"),
    (["fd12::1"], "a private address"),
    (["::ffff:127.0.0.1"], "a loopback address"),
    (["127.0.0.1"], "a loopback address"),
    (["93.184.216.34", "127.0.0.1"], "a loopback address"),  # one bad address among good ones is enough
], ids=["private", "metadata", "unique local IPv6", "mapped loopback", "loopback", "public and loopback"])
async def test_a_name_that_resolves_to_a_forbidden_address_is_refused(answer, reason, dns, listener, sockets):
    dns.answer("models.example.test", answer)
    with pytest.raises(EndpointRefused) as error:
        await ask(f"http://models.example.test:{listener.port}/v1")
    assert reason in error.value.detail and "models.example.test" in error.value.detail
    assert dns.asked == ["models.example.test"] and sockets.connects == []
    assert_nothing_sent(listener, sockets)


async def test_a_name_that_does_not_resolve_is_unreachable_for_now(dns, sockets):
    with pytest.raises(EndpointUnavailable) as error:  # DNS may answer later: not a refusal for good
        await ask("http://nowhere.example.test/v1")
    assert "cannot be resolved" in error.value.detail and sockets.connects == []


async def test_the_allowlist_never_admits_a_metadata_address(settings, sockets):
    settings.LLMCHAIN_OUTBOUND_ALLOW = "169.254.0.0/16,100.64.0.0/10,[fd00::]/8"
    for host in ("169.254.169.254", "100.100.100.200", "[fd00:ec2::254]"):
        with pytest.raises(EndpointRefused) as error:
            await ask(f"http://{host}/")
        assert "cloud metadata" in error.value.detail
    assert sockets.connects == []


@pytest.mark.parametrize("url, said", [
    ("http://127.0.0.1:{allowed}/api/v0/shutdown?x=", "has a query"),
    ("http://127.0.0.1:{allowed}/v1?", "has a query"),
    ("http://127.0.0.1:{allowed}/v1#fragment", "has a fragment"),
    ("http://user:secret@127.0.0.1:{allowed}/v1", "Put credentials in the API key field"),
    ("http://127.0.0.1:{allowed}@127.0.0.1:{listener}/v1", "Put credentials in the API key field"),
    ("http://127.0.0.1:{allowed}\\@127.0.0.1:{listener}/v1", "Put credentials in the API key field"),
    ("file:///etc/passwd", "Give the endpoint's base URL"),
    ("gopher://127.0.0.1:{listener}/_SHUTDOWN", "Give the endpoint's base URL"),
], ids=["the issue's query that swallows the path", "an empty query", "a fragment", "credentials",
        "credentials that look like the allowed host", "a backslash", "a file URL", "gopher"])
def test_registration_refuses_endpoint_urls_that_carry_more_than_a_base(url, said, hostile, listener, sockets):
    message = refused_at_registration(url.format(allowed=hostile.port, listener=listener.port))
    assert said in message
    assert sockets.connects == [] and hostile.requests == []
    assert_nothing_sent(listener, sockets)


async def test_a_redirect_to_the_listener_is_not_followed(hostile, listener, sockets):
    hostile.mode, hostile.redirect_to = "redirect", listener.url()
    with pytest.raises(EndpointRefused) as error:
        await ask(hostile.url())
    assert str(error.value) == "the model's endpoint answered HTTP 302"
    assert len(hostile.requests) == 1
    assert_nothing_sent(listener, sockets)


async def test_dns_rebinding_after_a_good_answer_is_refused_at_the_next_connection(dns, hostile, sockets):
    """The name resolves to the admitted 127.0.0.1 when the endpoint is registered and first called,
    then to the metadata address: each connection checks the answer it connects to."""
    dns.answer("rebind.example.test", ["127.0.0.1"], ["169.254.169.254"])
    url = f"http://rebind.example.test:{hostile.port}/v1"
    assert check_endpoint_url(url) == url and dns.asked == []  # registration asks no DNS
    await ask(url)
    with pytest.raises(EndpointRefused) as error:
        await ask(url)
    assert "a cloud metadata address" in error.value.detail
    assert dns.asked == ["rebind.example.test"] * 2
    assert sockets.connects == [("127.0.0.1", hostile.port)] and len(hostile.requests) == 1


async def test_the_connection_goes_to_the_address_checked_and_the_host_name_stays(dns, hostile, sockets):
    dns.answer("pinned.example.test", ["127.0.0.1"], ["169.254.169.254"])
    await ask(f"http://pinned.example.test:{hostile.port}/v1")  # admitted: 127.0.0.1 on the hostile port
    assert dns.asked == ["pinned.example.test"]  # one lookup, and the connection used its answer
    assert sockets.connects == [("127.0.0.1", hostile.port)]
    assert hostile.requests == [("GET", "/v1/models", f"pinned.example.test:{hostile.port}")]


async def test_proxies_from_the_environment_are_never_used(monkeypatch, hostile, listener, sockets):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, listener.url(path=""))
    await ask(hostile.url())
    assert len(hostile.requests) == 1
    assert_nothing_sent(listener, sockets)


async def test_an_answer_past_its_byte_cap_is_cut_off(settings, hostile, sockets):
    settings.LLMCHAIN_ANSWER_MAX_BYTES = 256 * 1024
    hostile.mode = "huge"
    with pytest.raises(BadResponse) as error:
        await Gateway(retries=0).complete(Endpoint(hostile.url(), "tiny"), [{"role": "user", "content": "hi"}])
    assert str(error.value) == "the model's answer was larger than this site accepts"
    assert "more than 262144 bytes" in error.value.detail


async def test_an_answer_that_drips_forever_is_cut_at_its_total_time(settings, hostile, sockets):
    settings.LLMCHAIN_ANSWER_MAX_S = 1
    hostile.mode = "drip"
    started = time.monotonic()
    pieces = []
    with pytest.raises(EndpointUnavailable) as error:
        async for piece in Gateway(retries=0).stream_chat(Endpoint(hostile.url(), "tiny"), [], max_tokens=10_000):
            pieces.append(piece)
    assert time.monotonic() - started < 3 and 1 <= len(pieces) <= 10
    assert str(error.value) == "the model's answer took longer than this site waits"


async def test_an_endpoint_that_ignores_max_tokens_is_cut_at_max_tokens(hostile, sockets):
    hostile.mode = "chatty"
    pieces = [p async for p in Gateway(retries=0).stream_chat(Endpoint(hostile.url(), "tiny"), [], max_tokens=5)]
    assert pieces == ["w0 ", "w1 ", "w2 ", "w3 ", "w4 "]


def test_an_ipfs_node_at_the_listener_is_refused(listener, sockets):
    client = KuboClient(listener.url(path=""), timeout=2, retries=0)
    with pytest.raises(IpfsError, match="a loopback address") as error:
        client.version()
    assert error.value.permanent
    assert_nothing_sent(listener, sockets)


def test_verify_does_not_read_a_site_at_the_listener(listener, sockets):
    with pytest.raises(VerifyError, match="a loopback address"):
        RemoteSite(listener.url(path="")).context_ids()
    for option in ("--served", "--ipfs"):
        with pytest.raises(CommandError, match=f"{option}: .*a loopback address"):
            call_command("leaderboard", "verify", option, listener.url(path=""))
    assert_nothing_sent(listener, sockets)


def test_verify_caps_what_a_site_answers(monkeypatch, hostile, sockets):
    monkeypatch.setattr(RemoteSite, "MAX_BOARD_BYTES", 64 * 1024)
    hostile.mode = "huge"
    with pytest.raises(VerifyError, match="more than 65536 bytes"):
        RemoteSite(f"http://127.0.0.1:{hostile.port}").board("0x" + "00" * 32)


def test_the_guard_refuses_unix_sockets_and_other_transports_of_its_own():
    transport = outbound.GuardedTransport(outbound.allowlist(""), outbound.Caps(1024, 1))
    with pytest.raises(outbound.OutboundRefused):
        transport._pool._network_backend.connect_unix_socket("/var/run/docker.sock")
    with pytest.raises(httpx.UnsupportedProtocol):
        outbound.client("", timeout=1, max_bytes=1024, max_seconds=1).get("ftp://127.0.0.1/")
