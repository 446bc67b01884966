"""The evidence page shows the answer and the references as sanitized Markdown, never their markup."""

import pytest

from apps.chain.evidence import default_store
from lib.records import canonical, interaction_evidence

pytestmark = pytest.mark.django_db

ANSWER = "The **answer**:\n\n```python\nx = 1\n```\n\n<script>window.__pwned=1</script>[x](javascript:alert(1))"
REFERENCE = "A *reference* <img src=x onerror=alert(2)>"


def test_the_answer_and_references_are_rendered_as_safe_markdown(client, settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR, settings.LLMCHAIN_IPFS_BACKEND = tmp_path, "local"
    record = interaction_evidence(
        interaction_id="0x" + "11" * 32, context_id="0x" + "22" * 32, context_name="coding", prompt="**Q**",
        model_id="0x" + "33" * 32, answer=ANSWER, references=[{"model": "0x" + "44" * 32, "text": REFERENCE,
                                                             "score": 10**17}],
        metric={"name": "bertscore", "params": {}}, sa=10**17, wa=10**17)
    cid = default_store().put(canonical(record))
    html = client.get(f"/evidence/{cid}/").content.decode()
    assert '<div class="markdown answer-text"><p>The <strong>answer</strong>:</p>' in html
    assert '<span class="code-lang">python</span>' in html
    assert "<em>reference</em>" in html
    assert "<script>window.__pwned" not in html and "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "<img" not in html and 'href="javascript' not in html
    assert '<pre class="text prompt">**Q**</pre>' in html  # what a person typed stays as typed
