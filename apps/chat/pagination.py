"""Every API list in pages: `?page=N` (from 1) and `?page_size=` (up to MAX_PAGE_SIZE). The body stays
the list it always was; the `Link` header (rel="next"/"prev"/"first"/"last", RFC 8288, as GitHub's
API does) and `X-Total-Count` say where the rest is."""

from __future__ import annotations

from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

MAX_PAGE_SIZE = 500


class LinkHeaderPagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def get_paginated_response(self, data):
        page = self.page
        links = []
        if page.has_next():
            links.append(f'<{self.get_next_link()}>; rel="next"')
            links.append(f'<{self.request.build_absolute_uri(self._url_for(page.paginator.num_pages))}>; rel="last"')
        if page.has_previous():
            links.append(f'<{self.get_previous_link()}>; rel="prev"')
            links.append(f'<{self.request.build_absolute_uri(self._url_for(1))}>; rel="first"')
        headers = {"X-Total-Count": str(page.paginator.count)}
        if links:
            headers["Link"] = ", ".join(links)
        return Response(data, headers=headers)

    def _url_for(self, number: int) -> str:
        from rest_framework.utils.urls import replace_query_param
        return replace_query_param(self.request.get_full_path(), self.page_query_param, number)

    def get_paginated_response_schema(self, schema):
        return schema


def paginate(view, request, queryset, serializer_class, **serializer_kwargs):
    """A list from an APIView, paged as a generic view would page it."""
    paginator = LinkHeaderPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True, **serializer_kwargs).data)
