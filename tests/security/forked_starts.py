"""Several starts of the site's commands, each a process of its own, from one process that imported
Django and the site once (tests/security/test_startup.py).

    python -m tests.security.forked_starts CASES OUT TIMEOUT

run in the repository with the commands' own environment. CASES is a JSON list of [entry, argv], entry
"manage.py" (manage.py's main) or "daphne" (daphne's own script); for the n-th case a child forked from
here runs it with sys.argv = argv, its stdout and stderr in OUT/n.out and OUT/n.err, stopped after TIMEOUT
seconds. The exit codes are printed as a JSON list (a negative code: the signal that ended it).

Before forking, this process does what every one of those starts does first with the same environment:
it reads the settings and loads the apps (django.setup(), as manage.py and the ASGI module call it) and
imports the URL configuration (which the system checks load). That is the bulk of a start (about 1.5 of
the 1.7 CPU-seconds a refused `manage.py check` takes here); a child then runs everything after it, the
checks included, as the command run on its own would. So the cases must share the environment, which
the settings were read from here.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def main() -> None:
    cases, out, timeout = json.loads(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmchain_site.settings")  # as manage.py and asgi.py do
    import django

    django.setup()
    from django.urls import get_resolver

    get_resolver().url_patterns  # imports every view
    codes = []
    for n, (entry, argv) in enumerate(cases):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run(entry, argv, out / f"{n}.out", out / f"{n}.err", timeout)
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    print(json.dumps(codes))


def _run(entry: str, argv: list[str], stdout: Path, stderr: Path, timeout: int) -> None:
    """In the child: run the case as the interpreter runs a script, exit with its code (never return)."""
    signal.alarm(timeout)  # SIGALRM's default action ends the process
    for fd, path in ((1, stdout), (2, stderr)):
        file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(file, fd)
        os.close(file)
    sys.argv = argv
    code = 0
    try:
        if entry == "manage.py":
            import manage

            manage.main()
        elif entry == "daphne":
            from daphne.cli import CommandLineInterface

            sys.exit(CommandLineInterface.entrypoint())
        else:
            raise ValueError(f"no entry {entry!r}")
    except SystemExit as exc:  # what the interpreter makes of it
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - an uncaught exception: its traceback and code 1
        sys.excepthook(*sys.exc_info())
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code & 0xFF)


if __name__ == "__main__":
    main()
