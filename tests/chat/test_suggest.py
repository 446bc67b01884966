"""The site suggests a context for a prompt by embedding similarity with the bundled encoder."""

import pytest

from apps.chat.suggest import suggest
from tests.personas import user

from .factories import make_contexts

pytestmark = pytest.mark.django_db

CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


@pytest.mark.parametrize("prompt, expected", [
    ("Write a Python function that reverses a linked list", "coding"),
    ("Solve for x: 2x^2 - 8 = 0", "math"),
    ("Draft an email to my landlord asking to fix the heating", "writing"),
    ("Pull out every email address in the following text and return them as a list", "extraction"),
])
def test_a_prompt_is_matched_to_its_context(prompt, expected):
    contexts = make_contexts(*CATEGORIES)
    ranked = suggest(prompt, contexts)
    assert ranked[0][0].name == expected
    assert len(ranked) == len(CATEGORIES) and ranked[0][1] >= ranked[-1][1]


def test_an_empty_prompt_suggests_nothing():
    assert suggest("   ", make_contexts(*CATEGORIES)) == []


def test_the_suggestion_endpoint_returns_an_escaped_fragment(client):
    make_contexts(*CATEGORIES)
    client.force_login(user())
    page = client.get("/chat/suggest", {"prompt": "Implement quicksort in Rust <script>"})
    html = page.content.decode()
    assert page.status_code == 200 and "coding" in html and "<script>" not in html
