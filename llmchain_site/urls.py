from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

handler403 = "llmchain_site.errors.permission_denied"
handler404 = "llmchain_site.errors.page_not_found"


def favicon(request):
    """Pages link static/favicon.svg; what asks for /favicon.ico anyway (the API docs, a bookmark) finds it."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("", include("apps.chain.urls")),
    path("", include("apps.chat.urls")),
    path("", include("apps.leaderboard.urls")),
    path("", include("apps.annotate.urls")),
    path("api/", include("apps.chat.api_urls")),
    path("api/", include([path("schema", SpectacularAPIView.as_view(), name="api-schema"),
                          path("docs", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs")])),
]
