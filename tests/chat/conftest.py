from __future__ import annotations

import httpx
import pytest


@pytest.fixture
def api(model_server) -> httpx.Client:
    """An HTTP client for the built-in model server (tests/conftest.py) that sends the right API key."""
    with httpx.Client(base_url=model_server.url, timeout=120,
                      headers={"Authorization": f"Bearer {model_server.api_key}"}) as client:
        yield client
