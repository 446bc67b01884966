from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("apps.chain.urls")),
    path("", include("apps.chat.urls")),
    path("", include("apps.leaderboard.urls")),
    path("", include("apps.annotate.urls")),
    path("api/", include("apps.chat.api_urls")),
    path("api/", include([path("schema", SpectacularAPIView.as_view(), name="api-schema"),
                          path("docs", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs")])),
]
