"""python manage.py serve_model: the built-in SmolLM2 behind an OpenAI-compatible API (the
`modelserver` package), wired to the settings."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from modelserver.api import DEFAULT_MODEL_NAME, ServerConfig
from modelserver.progress import StartupStatus, conversion_progress


def default_cache_dir() -> Path:
    """The converted model's cache: LLMCHAIN_MODEL_CACHE, else var/models/ (never committed)."""
    return Path(settings.LLMCHAIN_MODEL_CACHE or settings.VAR_DIR / "models" / DEFAULT_MODEL_NAME)


class Command(BaseCommand):
    help = "Serve the built-in SmolLM2-135M-Instruct over an OpenAI-compatible API (/v1/chat/completions)."
    requires_system_checks = []  # needs neither the database nor the static files

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8100, help="0 picks a free port (the URL is printed)")
        parser.add_argument("--api-key", default=settings.LLMCHAIN_MODEL_API_KEY,
                            help="require 'Authorization: Bearer KEY' (default: LLMCHAIN_MODEL_API_KEY)")
        parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME, help="the id clients send as 'model'")
        parser.add_argument("--cache-dir", type=Path, default=None,
                            help="where the converted model is kept (default: LLMCHAIN_MODEL_CACHE or var/models/)")
        parser.add_argument("--threads", type=int, default=None, help="torch threads (default: half the cores)")
        parser.add_argument("--context-length", type=int, default=2048, help="prompt plus answer, in tokens")
        parser.add_argument("--status-file", type=Path, default=None,
                            help="write what the server is doing while it starts here (JSON; the site shows it)")

    def handle(self, *args, host, port, api_key, model_name, cache_dir, threads, context_length, verbosity,
               status_file=None, **opts):
        if verbosity >= 2:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
        cache_dir = cache_dir or default_cache_dir()
        if verbosity >= 1:
            self.stdout.write(f"Loading {model_name} (cache: {cache_dir}; the first run converts the GGUF)")
            self.stdout.flush()
        status = StartupStatus(status_file)
        status.step("loading")
        status.beat()
        # torch and transformers take seconds to import: after the status says the server is loading.
        from modelserver.loading import ModelLoadError, load_model
        from modelserver.server import ModelServer

        try:
            with conversion_progress(status):
                model = load_model(cache_dir, threads=threads, progress=status.step)
        except ModelLoadError as exc:
            status.failed(str(exc))
            raise CommandError(str(exc)) from exc
        config = ServerConfig(model_name=model_name, api_key=api_key or None, context_length=context_length)
        try:
            server = ModelServer((host, port), model, config)
        except OSError as exc:
            status.failed(f"cannot listen on {host}:{port}: {exc}")
            raise CommandError(f"cannot listen on {host}:{port}: {exc}") from exc
        status.serving(server.url)

        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        self.stdout.write(f"Serving {model_name} on {server.url} (Ctrl-C stops it)")
        self.stdout.flush()
        try:
            server.serve_until(stop)
        finally:
            status.stopped()
        self.stdout.write("Model server stopped")
