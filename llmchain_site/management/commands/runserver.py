"""`manage.py runserver` served by daphne (http and websockets), as `make run` serves the site.

Daphne's own app (`"daphne"` in INSTALLED_APPS) imports its server, with twisted, autobahn and numpy,
into every process at start-up: about 0.5 s of CPU for each worker, command and test subprocess that
never serves a page. This app takes its place before `django.contrib.staticfiles`, whose `runserver`
it overrides, and imports daphne's command, and with it the server, only when the site is served."""

from daphne.management.commands.runserver import Command  # noqa: F401
