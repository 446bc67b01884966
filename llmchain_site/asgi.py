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


# Everything built by now (the apps, their modules, and every view's, which the URL patterns import)
# lives as long as the process: frozen, it is left out of the collector's passes. And a collection
# waits for 50,000 new objects, not 700: the requests in flight alone hold more than 700, so every
# pass moved them on to the older generations, and a full pass over the ~180,000 objects of a web
# process came every second or two under load, 140-220 ms during which every request of the process
# waited. Measured with `bench boards` at rest (py-spy, gc.callbacks): p99 230 ms before, 67 ms after.
import gc  # noqa: E402

from django.urls import get_resolver  # noqa: E402

GC_YOUNG_THRESHOLD = 50_000

get_resolver().url_patterns
gc.freeze()
gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
