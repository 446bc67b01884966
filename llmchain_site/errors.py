"""The site's error pages, in its layout (templates/404.html, 403.html, 500.html).

Django renders them itself when DEBUG is off. With DEBUG on, as `make run` runs, it would answer a
missing page with its technical 404 page (the URL patterns it tried): someone trying the site should
meet the site's own page there too, so `DebugNotFoundPage` puts it back. A server error keeps
Django's traceback page under DEBUG: that one is for the developer.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import MiddlewareNotUsed
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.csrf import requires_csrf_token


def _message(exception) -> str:
    """What the view said when it refused ("Only the model's owner can edit it."), if it said
    anything meant for the reader: not the resolver's dict of patterns, nor get_object_or_404's
    "No RegisteredModel matches the given query."."""
    message = exception.args[0] if exception is not None and exception.args else ""
    if not isinstance(message, str) or message.endswith(" matches the given query."):
        return ""
    return message


@requires_csrf_token  # a URL that matched nothing never reached the CSRF middleware's view step
def page_not_found(request, exception=None):
    return render(request, "404.html", {"message": _message(exception)}, status=404)


@requires_csrf_token
def permission_denied(request, exception=None):
    return render(request, "403.html", {"message": _message(exception)}, status=403)


class DebugNotFoundPage:
    """With DEBUG on, the site's 404 page instead of Django's technical one (off: not loaded)."""

    def __init__(self, get_response):
        if not settings.DEBUG:
            raise MiddlewareNotUsed
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 404 and request.resolver_match is None:  # no URL pattern matched
            return page_not_found(request)
        return response

    def process_exception(self, request, exception):
        if isinstance(exception, Http404):
            return page_not_found(request, exception)
        return None
