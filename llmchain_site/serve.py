"""The web process: `python -m llmchain_site.serve [daphne's options]` serves llmchain_site.asgi with daphne.

It is daphne's own command line (every option of `python -m daphne`; the application defaults to the
site's) with no per-request log lines: nginx in front of the web processes writes the access log
(deploy/nginx/llmchain.conf), and daphne wrote two more lines per request, its own access line and
Twisted's, formatted and then dropped by the logging level: ~7% of a web process's CPU serving boards
from memory (py-spy, `bench boards` at rest). `--access-log PATH` (or `-`, standard
output) still writes daphne's access log where it is wanted; daphne's other messages are unchanged.
And a response is sent in one call to the kernel, not in 128 KiB pieces (SEND_LIMIT). Measured with
`bench boards` at rest, each against the server without it in alternating 15 s windows (four each):
the log lines 3-5% of the requests a second, the single send 5-15% more and p95 3.5-6 ms lower."""

from __future__ import annotations

import re
import sys

from daphne import http_protocol
from daphne.cli import CommandLineInterface
from daphne.server import Server
from twisted.internet import tcp

APPLICATION = "llmchain_site.asgi:application"
# Twisted sends at most 128 KiB per pass of the event loop, then waits for the socket to be writable
# again: a board page (~270 KB) took three passes and two changes of the selector's interest. The
# kernel takes the whole answer at once where its buffer has room, so one send does it.
SEND_LIMIT = 1 << 20
_APP_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")  # module.path:attribute, not an endpoint (fd:fileno=7)


def _no_request_line(factory, request) -> None:
    """Twisted's HTTPFactory.log: a combined-log-format line per request, sent to daphne's logger."""


class QuietServer(Server):
    """Daphne's server with an access log only when one is asked for (`--access-log`)."""

    access_log_asked = False

    def __init__(self, *args, action_logger=None, **kwargs):
        super().__init__(*args, action_logger=action_logger if self.access_log_asked else None, **kwargs)


class Command(CommandLineInterface):
    server_class = QuietServer


def arguments(argv: list[str]) -> list[str]:
    """daphne's arguments: the site's application unless one is named (the last positional argument)."""
    if not argv or not _APP_PATH.fullmatch(argv[-1]):
        return [*argv, APPLICATION]
    return argv


def configure(argv: list[str]) -> list[str]:
    """Set daphne and Twisted up for this process's web server; returns daphne's arguments."""
    argv = arguments(argv)
    QuietServer.access_log_asked = Command().parser.parse_args(argv).access_log is not None
    http_protocol.HTTPFactory.log = _no_request_line
    tcp.Connection.SEND_LIMIT = SEND_LIMIT
    return argv


def main(argv: list[str] | None = None) -> None:
    Command().run(configure(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
