"""Ratings people finish: familiarity and trust prefilled from the user's last
answers, optional reasons and a comment kept with the rating on the site (never on the chain), and
what a rating on-chain did, in words."""

from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from apps.chain.models import LedgerInteraction, OutboxItem
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import Rating
from apps.chat.ratings import prefill, queue_waiting, submit_rating, what_it_did
from apps.chat.registry import ModelFields, register_model
from tests.personas import PASSWORD, developer

from .factories import make_contexts
from .test_ratings import GOOD, answered, auto_eval_queued  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def another_answer(alice, model, context, prompt="And 3+3?"):
    conv = start_conversation(alice, model, context)
    turn = begin_interaction(alice, conv, prompt)
    finish_interaction(turn, "6")
    return turn


def test_reasons_and_a_comment_are_kept_with_the_rating_and_never_sent(answered):
    alice, interaction = answered
    rating = submit_rating(alice, interaction, {**GOOD, "tags": ["accurate", "clear", "accurate"],
                                                "comment": "  Short and right.  "})
    assert (rating.tags, rating.comment) == (["accurate", "clear"], "Short and right.")
    auto_eval_queued(interaction)
    queue_waiting(interaction)
    hum = OutboxItem.objects.get(function="humEval")
    assert "tags" not in hum.payload and "comment" not in hum.payload
    assert "Short and right" not in str(hum.payload)


@pytest.mark.parametrize("extra, field", [({"tags": ["nonsense"]}, "tags"), ({"tags": "accurate"}, "tags"),
                                         ({"comment": "x" * 1001}, "comment"), ({"comment": 5}, "comment")])
def test_unknown_reasons_or_a_long_comment_are_refused_and_change_nothing(answered, extra, field):
    alice, interaction = answered
    with pytest.raises(ValidationError) as info:
        submit_rating(alice, interaction, {**GOOD, **extra})
    assert field in info.value.message_dict
    assert not Rating.objects.exists()


def test_the_form_posts_reasons_and_shows_them_after(answered):
    alice, interaction = answered
    client = Client()
    client.login(username="alice", password=PASSWORD)
    url = f"/chat/interactions/{interaction.pk}/rating"
    form = client.get(url).content.decode()
    assert 'name="tags" value="made-up"' in form and 'name="comment"' in form
    assert "Keyboard: on a question, press 1 to 5" in form
    shown = client.post(url, {**GOOD, "tags": ["made-up", "incomplete"], "comment": "It <b>guessed</b>."})
    page = shown.content.decode()
    assert shown.status_code == 200 and "Reasons: made-up, incomplete." in page
    assert "It &lt;b&gt;guessed&lt;/b&gt;." in page  # escaped
    assert Rating.objects.get().tags == ["made-up", "incomplete"]


def test_the_api_takes_reasons_and_says_them_back(answered):
    alice, interaction = answered
    client = Client()
    client.login(username="alice", password=PASSWORD)
    made = client.post(f"/api/interactions/{interaction.pk}/rating",
                       {**{k: int(v) for k, v in GOOD.items()}, "tags": ["unsafe"], "comment": "no"},
                       content_type="application/json")
    assert made.status_code == 201 and made.json()["tags"] == ["unsafe"] and made.json()["comment"] == "no"


def test_familiarity_comes_from_the_context_and_trust_from_the_model(answered, settings, tmp_path):
    alice, first = answered
    assert prefill(alice, first) == {}
    submit_rating(alice, first, {**GOOD, "familiarity": "5", "trust": "2"})
    model, coding = first.conversation.model, first.conversation.context
    same_model_same_context = another_answer(alice, model, coding)
    assert prefill(alice, same_model_same_context) == {"familiarity": 5, "trust": 2}
    other = register_model(developer("dora"), ModelFields(name="other", provider="p",
                                                          endpoint_url="http://127.0.0.1:9/v1", endpoint_model="o"))
    writing, = make_contexts("writing")
    assert prefill(alice, another_answer(alice, other, coding)) == {"familiarity": 5}  # the topic, not the model
    assert prefill(alice, another_answer(alice, model, writing)) == {"trust": 2}  # the model, not the topic
    client = Client()
    client.login(username="alice", password=PASSWORD)
    form = client.get(f"/chat/interactions/{same_model_same_context.pk}/rating").content.decode()
    assert 'class="likert prefilled" data-field="familiarity"' in form
    assert 'name="familiarity" value="5" required checked' in form and 'name="trust" value="2" required checked' in form
    assert "Prefilled with your last answer (5)" in form
    assert 'name="reliability" value="4" required checked' not in form  # only those two are prefilled


def test_what_a_rating_did_is_said_in_words(answered):
    alice, interaction = answered
    onchain = SimpleNamespace(wh=30 * 10**15, d_minutes=5 * 10**18, has_reference=False, wa=0)
    moves = [{"context": "coding", "done": True, "r": (5 * 10**17, 512 * 10**15)}]
    said = what_it_did(interaction, onchain, moves)
    assert said.startswith("Your rating counted for 0.030 of a full rating (it came 5 minutes after your previous")
    assert "moved m's reputation in coding from 0.5000 to 0.5120 (+0.0120): all of it from your rating" in said
    first = what_it_did(interaction, SimpleNamespace(wh=6 * 10**17, d_minutes=1440 * 10**18, has_reference=False),
                        [{"context": "coding", "done": True, "r": (None, 55 * 10**16)}])
    assert "counted for 0.600" in first and "set m's first reputation in coding at 0.5500" in first
    assert what_it_did(interaction, onchain, [{**moves[0], "done": False}]) == ""  # not known yet
    # A first rating's time counts from signing up, not from a previous rating there was none of.
    said = what_it_did(interaction, onchain, moves, first=True)
    assert "(it is your first, 5 minutes after you signed up, and a rating this soon" in said
    assert "previous rating" not in said
    first = what_it_did(interaction, SimpleNamespace(wh=6 * 10**17, d_minutes=1440 * 10**18, has_reference=False),
                        [{"context": "coding", "done": True, "r": (None, 55 * 10**16)}], first=True)
    assert "time since you signed up raises it" in first and "previous rating" not in first
    # A move that rounds to nothing is said so, not split into two zeros.
    tiny = what_it_did(interaction, SimpleNamespace(wh=10**15, d_minutes=2 * 10**18, has_reference=True, wa=5 * 10**17,
                                                    sh=9 * 10**17, sa=2 * 10**17),
                       [{"context": "coding", "done": True, "r": (5 * 10**17, 5 * 10**17 + 3 * 10**13)}])
    assert "It left m's reputation in coding at 0.5000: a rating of this weight moves it by less than 0.0001." in tiny
    assert "from your rating" not in tiny


def test_a_rating_is_first_when_it_is_its_raters_only_one_in_the_earliest_block_holding_theirs():
    def row(n: int, user: str, block: int | None) -> LedgerInteraction:
        return LedgerInteraction.objects.create(
            interaction_id=f"0x{n:064x}", model_id="0x" + "a" * 64, context_id="0x" + "c" * 64, user=user,
            has_reference=False, sa=0, wa=0, evidence_cid="cid", auto_tx="0x", auto_block=1, human_block=block,
            sh=None if block is None else 5 * 10**17)
    rows = {r.interaction_id: r for r in [row(1, "0xaa", 10), row(2, "0xaa", 12), row(3, "0xbb", 11),
                                          row(4, "0xbb", 11), row(5, "0xcc", None), row(6, "0xdd", 20)]}
    row(7, "0xdd", 15)  # 0xdd's first rating is on another page: the one here is not its first
    assert LedgerInteraction.first_ratings(rows) == {f"0x{1:064x}"}  # 0xbb rated twice in its first block: neither is told "first"
    assert LedgerInteraction.first_ratings({}) == set()


def test_a_move_of_r_is_credited_to_the_rating_and_to_the_automatic_score_that_caused_it(answered):
    """R moves towards 2/3 * S_h + 1/3 * S_a: a rating that agrees with R (S_h 0.5 = R) moves it by
    nothing, so a move down comes all from a low automatic score (S_a 0.2), and the sentence says so;
    a high rating with a low automatic score splits the move by the two terms, adding up to it."""
    alice, interaction = answered
    onchain = SimpleNamespace(wh=2 * 10**15, d_minutes=2 * 10**18, has_reference=True, wa=5 * 10**17,
                              sh=5 * 10**17, sa=2 * 10**17)
    said = what_it_did(interaction, onchain, [{"context": "coding", "done": True, "r": (5 * 10**17, 4819 * 10**14)}])
    assert "from 0.5000 to 0.4819 (-0.0181): +0.0000 from your rating and -0.0181 from the automatic score" in said
    onchain = SimpleNamespace(wh=5 * 10**17, d_minutes=2000 * 10**18, has_reference=True, wa=5 * 10**17,
                              sh=9 * 10**17, sa=2 * 10**17)
    said = what_it_did(interaction, onchain, [{"context": "coding", "done": True, "r": (5 * 10**17, 55 * 10**16)}])
    # 2 * (0.9 - 0.5) = 0.8 against 0.2 - 0.5 = -0.3: the rating +0.08, the automatic score -0.03.
    assert "(+0.0500): +0.0800 from your rating and -0.0300 from the automatic score" in said
