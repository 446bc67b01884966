"""The abuse suite's props: a listener on 127.0.0.1 that records every connection it gets and that
the allowlist never admits (the address an attacker aims at), a hostile endpoint the allowlist does
admit, a stand-in for the guard's one DNS lookup, and a record of every socket this process opens.

Every connection a test makes goes to 127.0.0.1: private and metadata addresses come only from the
stubbed lookup or as literals the guard refuses before any socket exists.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lib import outbound


class Listener:
    """Accepts on 127.0.0.1 and keeps what each connection sent: the proof that nothing was."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        self._open = True
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self._open:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # the accept timed out, or the listener closed
                continue
            conn.settimeout(0.5)
            try:
                self.connections.append(conn.recv(65536))
            except OSError:
                self.connections.append(b"")
            conn.close()

    def url(self, host: str = "127.0.0.1", path: str = "/v1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self._open = False
        self.sock.close()


class Sockets:
    """Every TCP connect and every host-name lookup this process makes while a test runs (Python's
    audit events, which asyncio's and the standard library's sockets all raise). A safety net too:
    a connect to anything but 127.0.0.1, or a real DNS lookup, is stopped (Blocked) and recorded."""

    active: Sockets | None = None

    def __init__(self):
        self.connects: list[tuple[str, int]] = []
        self.lookups: list[str] = []

    def to(self, port: int) -> list[tuple[str, int]]:
        return [c for c in self.connects if c[1] == port]


class Blocked(RuntimeError):
    """A test was about to reach past 127.0.0.1: stopped here, whatever the guard did."""


def _audit(event: str, args: tuple) -> None:
    record = Sockets.active
    if record is None:
        return
    if event == "socket.connect" and isinstance(args[1], tuple):
        host, port = str(args[1][0]), int(args[1][1])
        record.connects.append((host, port))
        if host != "127.0.0.1":
            raise Blocked(f"a connection to {host}:{port}")
    elif event == "socket.getaddrinfo" and outbound.ip_literal(str(args[0] or "")) is None:
        record.lookups.append(str(args[0]))
        raise Blocked(f"a DNS lookup of {args[0]}")


sys.addaudithook(_audit)  # hooks cannot be removed: this one records only while a test asks it to


SECRET_BODY = "internal: db password is hunter2"


class HostileEndpoint:
    """An OpenAI-compatible endpoint on 127.0.0.1 that the allowlist admits, and that misbehaves as
    told: `mode` is "ok", "redirect" (to `redirect_to`), "huge" (megabytes of answer), "drip" (a
    piece every 0.2 s, forever), "chatty" (many more pieces than max_tokens) or "error" (a 500 whose
    body says `SECRET_BODY`)."""

    def __init__(self):
        self.mode = "ok"
        self.redirect_to = ""
        self.requests: list[tuple[str, str, str]] = []  # (method, path, Host header)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _event(text: str) -> bytes:
    return f"data: {json.dumps({'choices': [{'delta': {'content': text}}]})}\n\n".encode()


def _handler(endpoint: HostileEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            self._answer()

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer()

        def _answer(self) -> None:
            endpoint.requests.append((self.command, self.path, self.headers.get("Host", "")))
            if endpoint.mode == "error":
                return self._json(500, {"error": {"message": SECRET_BODY}})
            if endpoint.mode == "redirect":
                self.send_response(302)
                self.send_header("Location", endpoint.redirect_to)
                self.end_headers()
                return
            if self.path.endswith("/models"):
                return self._json(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                self._stream()
            except OSError:  # the client hung up: what the caps are for
                pass

        def _json(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream(self) -> None:
            if endpoint.mode == "huge":
                for _ in range(64):
                    self.wfile.write(_event("x" * 65536))
            elif endpoint.mode == "drip":
                for _ in range(300):
                    self.wfile.write(_event("."))
                    self.wfile.flush()
                    time.sleep(0.2)
            elif endpoint.mode == "chatty":
                for i in range(1000):
                    self.wfile.write(_event(f"w{i} "))
            else:
                self.wfile.write(_event("OK"))
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


@pytest.fixture(scope="session")
def listener():
    target = Listener()
    yield target
    time.sleep(0.3)  # a connection made by the last test would be accepted by now
    assert target.connections == [], f"the listener was reached: {target.connections!r}"
    target.close()


@pytest.fixture(scope="session")
def hostile():
    endpoint = HostileEndpoint()
    yield endpoint
    endpoint.close()


@pytest.fixture(autouse=True)
def allow_only_the_hostile_endpoint(settings, hostile):
    """The operator admits one loopback service (as `127.0.0.1:8100` admits the built-in model):
    the hostile endpoint, never the listener."""
    settings.LLMCHAIN_OUTBOUND_ALLOW = f"127.0.0.1:{hostile.port}"
    hostile.mode = "ok"
    hostile.requests.clear()


@pytest.fixture(autouse=True)
def sockets():
    record = Sockets()
    Sockets.active = record
    yield record
    Sockets.active = None


class FakeDns:
    """Answers the guard's one lookup from a table; a name not in it does not resolve."""

    def __init__(self):
        self.answers: dict[str, list[list[str]]] = {}
        self.asked: list[str] = []

    def answer(self, host: str, *answers: list[str]) -> None:
        """Each lookup of `host` gets the next answer, the last one for good (several: a rebinding DNS)."""
        self.answers[host] = list(answers)

    def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        answers = self.answers.get(host)
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.fixture
def dns(monkeypatch):
    fake = FakeDns()
    monkeypatch.setattr(outbound, "resolve", fake.resolve)
    return fake


@pytest.fixture
def quick_passwords(settings):
    """Django's MD5 hasher for the people a test signs up in this process: PBKDF2 took 0.22 CPU-s a
    password, for nothing the tests that take this look at (a site a test starts in another process
    keeps the real hashers, so its logins are not tried with these users)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
