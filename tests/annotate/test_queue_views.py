"""The expert queue page: experts answer one disagreement at a time; nobody else gets in. The page
reads only; it asks for its item to be held with an htmx POST (`hold`), as the browser does here."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.annotate.models import ExpertVerdict, QueueItem
from tests.annotate.queue_factories import disagreement
from tests.personas import PASSWORD, expert, user

pytestmark = pytest.mark.django_db
QUEUE = "/annotate/"


def hold(client, item, **filters):
    """What the page does as soon as it shows an item: ask for it to be held (htmx)."""
    return client.post(reverse("annotate-hold", args=[item.pk]), filters, HTTP_HX_REQUEST="true")


@pytest.fixture
def erin(client):
    account = expert("erin")
    client.login(username="erin", password=PASSWORD)
    return account


def test_anonymous_visitors_are_sent_to_log_in(client):
    response = client.get(QUEUE)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_accounts_without_the_expert_role_get_a_clear_403(client):
    user("alice")
    item = disagreement(1)
    client.login(username="alice", password=PASSWORD)
    response = client.get(QUEUE)
    assert response.status_code == 403
    assert b"Only accounts with the expert role" in response.content
    assert b"Answer A1" not in response.content
    assert client.post(reverse("annotate-verdict", args=[item.pk]), {"verdict": "1"}).status_code == 403
    assert client.post(reverse("annotate-skip", args=[item.pk])).status_code == 403
    assert client.post(reverse("annotate-hold", args=[item.pk])).status_code == 403
    assert b">Annotate<" not in client.get(reverse("models")).content


def test_an_expert_sees_the_item_with_every_round_and_the_nav_link(client, erin):
    disagreement(1)
    page = client.get(QUEUE).content.decode()
    for text in ("Question 1?", "Answer A1", "Answer B1", "Criterion: helpfulness", "Does the answer help the user?",
                 "Round 0", "Round 1", "Submission 1 handles the edge case.", "Now 2.",
                 "no verdict could be read (no verdict marker)", ">Annotate<", 'data-key="s"', "js/annotate.js",
                 "csrfmiddlewaretoken"):
        assert text in page, text


def test_model_texts_are_escaped(client, erin):
    disagreement(1, reasoning="<script>alert('x')</script> <b>bold</b>")
    page = client.get(QUEUE).content.decode()
    assert "<script>alert" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert('x')&lt;/script&gt;" in page  # shown as text (rendered as sanitized Markdown)


def test_a_verdict_is_saved_and_the_next_item_shown(client, erin):
    first, second = disagreement(1), disagreement(2)
    client.get(QUEUE)
    hold(client, first)
    response = client.post(reverse("annotate-verdict", args=[first.pk]), {"verdict": "2", "note": "B is right"})
    assert response.status_code == 302
    saved = ExpertVerdict.objects.get()
    assert (saved.item_id, saved.expert, saved.verdict, saved.note) == (first.pk, erin, 2, "B is right")
    page = client.get(response["Location"]).content.decode()
    assert "Answer A2" in page and "Answered by you: <strong>1</strong>" in page
    assert f'hx-post="{reverse("annotate-hold", args=[second.pk])}"' in page and "Not held for you yet" in page
    assert not QueueItem.objects.filter(status="claimed").exists(), "showing the item holds nothing"
    shown = hold(client, second)
    assert shown.status_code == 200 and "Held for you for 15 minutes" in shown.content.decode()
    assert second.pk == QueueItem.objects.get(status="claimed", claimed_by=erin).pk


def test_the_page_shows_an_item_it_holds_as_held_and_asks_for_no_hold(client, erin):
    item = disagreement(1)
    hold(client, item)
    page = client.get(QUEUE).content.decode()
    assert "Held for you for 15 minutes" in page and "annotate-hold" not in page and "/hold" not in page


def test_a_verdict_without_the_pages_hold_takes_the_item_as_it_is_recorded(client, erin):
    item = disagreement(1)
    client.get(QUEUE)  # without JavaScript no hold is asked for
    response = client.post(reverse("annotate-verdict", args=[item.pk]), {"verdict": "1"})
    assert response.status_code == 302 and ExpertVerdict.objects.get().item_id == item.pk
    item.refresh_from_db()
    assert item.status == "resolved"


def test_an_item_another_expert_holds_is_not_shown_nor_held(client, erin):
    first, _ = disagreement(1), disagreement(2)
    frank = expert("frank")
    page = client.get(QUEUE).content.decode()
    assert "Answer A1" in page
    QueueItem.objects.filter(pk=first.pk).update(status="claimed", claimed_by=frank,
                                                 claim_expires_at=timezone.now() + timedelta(minutes=5))
    late = hold(client, first, scenario="coding").content.decode()  # frank's page asked first
    assert "Another expert has just taken this item" in late and 'href="/annotate/?scenario=coding"' in late
    assert QueueItem.objects.get(pk=first.pk).claimed_by == frank
    refused = client.post(reverse("annotate-verdict", args=[first.pk]), {"verdict": "1"})
    assert refused.status_code == 409 and b"not held for you" in refused.content
    assert "Answer A2" in client.get(QUEUE).content.decode()
    assert not ExpertVerdict.objects.exists()


def test_a_hold_asked_for_after_a_skip_is_refused(client, erin):
    item = disagreement(1)
    client.post(reverse("annotate-skip", args=[item.pk]))
    assert "You skipped this item" in hold(client, item).content.decode()
    assert QueueItem.objects.get(pk=item.pk).status == "open"


def test_a_hold_outside_htmx_goes_back_to_the_page(client, erin):
    item = disagreement(1)
    response = client.post(reverse("annotate-hold", args=[item.pk]), {"scenario": "coding"})
    assert response.status_code == 302 and response["Location"] == f"{QUEUE}?scenario=coding"
    assert QueueItem.objects.get(pk=item.pk).claimed_by == erin
    assert client.get(reverse("annotate-hold", args=[item.pk])).status_code == 405


def test_a_bad_verdict_shows_the_form_again_with_the_error_and_the_note(client, erin):
    item = disagreement(1)
    client.get(QUEUE)
    response = client.post(reverse("annotate-verdict", args=[item.pk]), {"verdict": "7", "note": "my note"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Choose 1 (submission 1 is better)" in page and "my note" in page and "Answer A1" in page
    assert not ExpertVerdict.objects.exists()


def test_a_double_submission_is_refused_clearly(client, erin):
    item = disagreement(1)
    client.get(QUEUE)
    client.post(reverse("annotate-verdict", args=[item.pk]), {"verdict": "1"})
    response = client.post(reverse("annotate-verdict", args=[item.pk]), {"verdict": "2"})
    assert response.status_code == 409
    assert b"already given your verdict" in response.content
    assert ExpertVerdict.objects.get().verdict == 1


def test_an_expired_claim_is_refused_clearly(client, erin):
    item = disagreement(1)
    client.get(QUEUE)
    hold(client, item)
    QueueItem.objects.filter(pk=item.pk).update(claim_expires_at=timezone.now() - timedelta(minutes=1))
    response = client.post(reverse("annotate-verdict", args=[item.pk]), {"verdict": "1"})
    assert response.status_code == 409 and b"expired" in response.content
    # Shown again as free (the page asks for a new hold): answered again, it counts.
    assert "Answer A1" in response.content.decode() and "Not held for you yet" in response.content.decode()
    assert client.post(reverse("annotate-verdict", args=[item.pk]), {"verdict": "1"}).status_code == 302
    assert ExpertVerdict.objects.get().item_id == item.pk


def test_verdicts_need_a_post(client, erin):
    item = disagreement(1)
    assert client.get(reverse("annotate-verdict", args=[item.pk])).status_code == 405


def test_filters_pick_the_item_and_are_kept_after_answering(client, erin):
    disagreement(1, scenario="coding")
    writing = disagreement(2, scenario="writing")
    page = client.get(QUEUE, {"scenario": "writing"}).content.decode()
    assert "Answer A2" in page and '<option value="writing" selected>' in page
    response = client.post(reverse("annotate-verdict", args=[writing.pk]), {"verdict": "0", "scenario": "writing"})
    assert response["Location"] == f"{QUEUE}?scenario=writing"
    page = client.get(response["Location"]).content.decode()
    assert "Nothing left for you here under these filters" in page


def test_skipping_moves_on_and_the_skips_can_be_cleared(client, erin):
    first, _ = disagreement(1), disagreement(2)
    client.get(QUEUE)
    hold(client, first)
    client.post(reverse("annotate-skip", args=[first.pk]))
    assert QueueItem.objects.get(pk=first.pk).status == "open"
    assert "Answer A2" in client.get(QUEUE).content.decode()
    client.post(reverse("annotate-skip", args=[first.pk + 1]))
    page = client.get(QUEUE).content.decode()
    assert "Nothing left for you here" in page and "Show the 2 skipped items again" in page
    client.post(reverse("annotate-clear-skips"))
    assert "Answer A1" in client.get(QUEUE).content.decode()


def test_the_agreement_between_experts_is_shown(client, erin):
    frank = expert("frank")
    for n, verdicts in enumerate([(1, 1), (2, 2), (1, 2)], start=1):
        item = disagreement(n, required=2)
        for who, verdict in zip((erin, frank), verdicts):
            ExpertVerdict.objects.create(item=item, expert=who, verdict=verdict)
    page = client.get(QUEUE).content.decode()
    assert "<td>coding</td><td>3</td><td>6</td>" in page and "<td>0.33</td>" in page
