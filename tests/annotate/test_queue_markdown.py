"""The expert queue shows submissions and the agents' reasoning as sanitized Markdown."""

import pytest

from apps.annotate.models import Debate
from tests.annotate.queue_factories import disagreement
from tests.personas import PASSWORD, expert

pytestmark = pytest.mark.django_db


def test_submissions_and_reasoning_are_rendered_as_safe_markdown(client):
    expert("erin")
    item = disagreement(1, reasoning="Submission 1 is **right**. <script>window.__pwned=1</script>")
    Debate.objects.filter(pk=item.debate_id).update(
        submission_1="```python\nprint(1)\n```", submission_2="[x](javascript:alert(1)) <img src=x onerror=alert(2)>")
    client.login(username="erin", password=PASSWORD)
    html = client.get("/annotate/").content.decode()
    assert '<div class="markdown reasoning"><p>Submission 1 is <strong>right</strong>.' in html
    assert '<span class="code-lang">python</span>' in html
    assert "<script>window.__pwned" not in html and "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "<img src=x" not in html and 'href="javascript' not in html
