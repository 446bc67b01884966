"""Errors in plain words with a way on: a failed answer says what happened and whether trying
again can help, with a Try again button that asks the same turn again; a rating sent from a second tab
after the answer was rated in another one says so instead of failing silently."""

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse
from django.utils.html import escape

from apps.chat import conversations
from apps.chat.conversations import start_conversation
from apps.chat.gateway import BadResponse, EndpointRefused, EndpointUnavailable
from apps.chat.models import Interaction, Rating
from apps.chat.ratings import ALREADY_RATED
from tests.chat.factories import make_contexts
from tests.personas import PASSWORD, user

from .test_chat_flow import send, until
from .test_chat_limits import open_endpoint_chat

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def failing_then_fine(monkeypatch):
    """The model fails the first time with `error`, then answers."""
    calls = []

    def arm(error):
        async def stream(model, messages, gateway=None, **params):
            calls.append(messages)
            if len(calls) == 1:
                yield "Partial "
                raise error
            yield "Fine now."
        monkeypatch.setattr(conversations, "stream_answer", stream)

        async def no_count(*args, **kwargs):
            return None
        monkeypatch.setattr(conversations, "measure_fit", no_count)
        return calls
    return arm


@pytest.mark.parametrize("error, says", [
    (EndpointUnavailable("the model's endpoint timed out", "http://tiny.example/v1 timed out: ReadTimeout"),
     "could not answer just now (the model's endpoint timed out). This is usually brief: try again in a moment."),
    (EndpointRefused("the model's endpoint answered HTTP 400", "tiny.example answered 400: secret words"),
     "refused this request (the model's endpoint answered HTTP 400). Trying again will probably fail"),
    (BadResponse("the model's endpoint streamed something that is not JSON", "not a JSON event: '<html>'"),
     "answered in a form this site cannot read"),
])
async def test_a_failed_answer_says_what_happened_and_try_again_asks_again(failing_then_fine, error, says):
    failing_then_fine(error)
    communicator, conversation = await open_endpoint_chat()
    await send(communicator, prompt="Hello?")
    failed = (await until(communicator, "outerHTML:#turn-"))[-1]
    assert escape(says) in failed and "builtin-under-test" in failed
    assert "tiny.example" not in failed and "secret words" not in failed  # the endpoint's own words stay out
    assert 'class="retry"' in failed and "Try again" in failed and "it is not evaluated" in failed
    first = await sync_to_async(Interaction.objects.get)()
    assert (first.status, first.answer) == ("failed", "Partial ")
    await send(communicator, action="regenerate", interaction=first.pk)
    done = (await until(communicator, "outerHTML:#turn-"))[-1]
    assert "Fine now." in done and "Try again" not in done
    await communicator.disconnect()
    turns = await sync_to_async(list)(Interaction.objects.order_by("id").values_list("status", "replaces"))
    assert turns == [("failed", None), ("done", first.pk)]


def test_a_rating_from_a_second_tab_says_the_answer_was_rated_meanwhile(client):
    from .test_chat_limits import endpoint_model as make_model
    writing, = make_contexts("writing")
    alice = user("alice")
    conversation = start_conversation(alice, make_model("http://tiny.example/v1", "tiny"), writing)
    answered = Interaction.objects.create(conversation=conversation, prompt="Hi", answer="Hello",
                                          status=Interaction.Status.DONE, interaction_id="0x" + "cd" * 32)
    client.login(username="alice", password=PASSWORD)
    url = reverse("rating", args=[answered.pk])
    first_tab = {f: "4" for f in ("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")}
    assert client.post(url, first_tab, HTTP_HX_REQUEST="true").status_code == 200
    second_tab = {**first_tab, "reliability": "1"}
    shown = client.post(url, second_tab, HTTP_HX_REQUEST="true")  # htmx swaps only a 2xx answer
    page = shown.content.decode()
    assert shown.status_code == 200 and 'class="error conflict" role="alert"' in page
    assert "already rated, perhaps in another tab" in page and "reliability 4" in page
    assert Rating.objects.get().reliability == 4  # the first one counts; nothing changed
    plain = client.post(url, second_tab)  # without JavaScript: a 400 with the same words
    assert plain.status_code == 400 and ALREADY_RATED.split(":")[0] in plain.content.decode()
