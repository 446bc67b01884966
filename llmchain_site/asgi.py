import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmchain_site.settings")
django_asgi_app = get_asgi_application()

# daphne runs no system checks: refuse here to serve an unsafe deployment (ops/checks.py), as runserver does.
from django.core import checks  # noqa: E402
from django.core.management.base import SystemCheckError  # noqa: E402

if unsafe := [e for e in checks.run_checks(tags=["deploy"]) if e.is_serious()]:
    raise SystemCheckError("\n".join(str(e) for e in unsafe))

# These need the apps loaded.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ChannelNameRouter, ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from apps.chain.consumers import SubmitConsumer  # noqa: E402
from apps.chat.routing import websocket_urlpatterns  # noqa: E402
from apps.leaderboard import board_renders  # noqa: E402
from apps.leaderboard.fastpath import BoardResponseCache  # noqa: E402
from apps.oracle.consumers import DebateWakeConsumer, OracleWakeConsumer  # noqa: E402

# Background workers (`manage.py runworker <channel>`), woken on commit when their rows are saved.
WORKERS = (OracleWakeConsumer, DebateWakeConsumer, SubmitConsumer)

application = ProtocolTypeRouter({
    "http": BoardResponseCache(django_asgi_app, renderer=board_renders.Renderer(), shared=board_renders.shared_cache()),
    "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    "channel": ChannelNameRouter({worker.channel: worker.as_asgi() for worker in WORKERS}),
})
