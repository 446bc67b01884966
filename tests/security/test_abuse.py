"""The abuse suite's limits, tried as an attacker would: password guessing
on every door, bursts past the rates (and the usual ways around them), tokens past their time,
sign-ups under the site's own names or without the invitation, self-rating and rating stuffing,
suspended accounts and models, lists too long to serve. Each attempt is refused with a clear error,
and each test checks that nothing changed."""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from apps.chain.models import OutboxItem
from apps.chat import limits, moderation, registry
from apps.chat.accounts import UNAVAILABLE, service_account
from apps.chat.conversations import start_conversation
from apps.chat.health import running_models
from apps.chat.models import Conversation, Interaction, Invitation, Profile, Rating, RegisteredModel
from apps.chat.ratings import ALREADY_RATED, OWN_MODEL
from tests.chat.factories import make_contexts
from tests.chat.test_chat_limits import endpoint_model
from tests.personas import PASSWORD, user

pytestmark = pytest.mark.django_db
User = get_user_model()
QUESTIONS = ("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")
ANSWERS = {q: 4 for q in QUESTIONS}
ATTACKER = "203.0.113.9"


def api(client, method, path, token=None, ip=ATTACKER, **data):
    headers = {"HTTP_AUTHORIZATION": f"Token {token}"} if token else {}
    return getattr(client, method)(path, data, content_type="application/json", REMOTE_ADDR=ip, **headers)


def token_of(account) -> str:
    return Token.objects.create(user=account).key


# --- password guessing ---------------------------------------------------------------------------

def _try_login(client, where: str, username: str, password: str, ip: str = ATTACKER, **headers):
    if where == "page":
        return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=ip, **headers)
    if where == "admin":
        return client.post("/admin/login/", {"username": username, "password": password, "next": "/admin/"},
                           REMOTE_ADDR=ip, **headers)
    return client.post("/api/token", {"username": username, "password": password}, REMOTE_ADDR=ip, **headers)


def _logged_in(where: str, response) -> bool:
    if where == "token":
        return response.status_code == 200 and "token" in response.json()
    return response.status_code == 302


@pytest.fixture
def victim():
    account = user("victim")
    User.objects.filter(pk=account.pk).update(is_staff=True)  # the admin's door opens for them too
    return account


@pytest.mark.parametrize("where", ["page", "admin", "token"])
def test_five_wrong_passwords_lock_the_name_out_from_that_address_even_for_the_right_one(client, victim, where):
    for _ in range(5):
        assert not _logged_in(where, _try_login(client, where, "victim", "guess"))
    locked = _try_login(client, where, "victim", PASSWORD)
    assert locked.status_code == 429, (where, locked.status_code)
    assert not Token.objects.filter(user=victim).exists()
    if where != "token":
        assert "Too many failed logins" in locked.content.decode()
        assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("where", ["page", "token"])
def test_a_forged_forwarded_for_header_does_not_reset_the_count(client, victim, where):
    """Not behind a proxy, X-Forwarded-For is the client's own word: the address is REMOTE_ADDR."""
    for n in range(5):
        _try_login(client, where, "victim", "guess", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}")
    assert _try_login(client, where, "victim", PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.77").status_code == 429


def test_the_lockout_holds_one_name_at_one_address_so_the_victim_still_gets_in_from_home(client, victim):
    for _ in range(5):
        _try_login(client, "page", "victim", "guess")
    assert _try_login(client, "page", "victim", PASSWORD, ip="192.0.2.50").status_code == 302


def test_a_locked_out_name_cannot_be_reached_by_changing_its_case(client, victim):
    for _ in range(5):
        _try_login(client, "page", "victim", "guess")
    # Django user names are case-sensitive: "VICTIM" is nobody, so it can never log in as victim.
    assert _try_login(client, "page", "VICTIM", PASSWORD).status_code == 200
    assert "_auth_user_id" not in client.session


# --- rates -----------------------------------------------------------------------------------------

@pytest.fixture
def chat():
    writing, = make_contexts("writing")
    model = endpoint_model("http://tiny.example/v1", "tiny")
    alice = user("alice")
    conversation = start_conversation(alice, model, writing)
    return conversation, alice, token_of(alice)


def _refused_with_wait(response) -> None:
    assert response.status_code == 429, response.content
    assert int(response["Retry-After"]) >= 1
    assert "throttled" in response.json()["detail"].lower() or "available in" in response.json()["detail"]


def test_prompts_past_the_rate_are_refused_before_anything_is_saved_or_sent(client, chat, settings, monkeypatch):
    conversation, alice, token = chat
    monkeypatch.setitem(settings.LLMCHAIN_RATES, "prompts", "2/min")
    path = f"/api/conversations/{conversation.pk}/messages"
    for _ in range(2):  # invalid prompts count as tries: the rate counts requests
        assert api(client, "post", path, token, prompt="").status_code == 400
    _refused_with_wait(api(client, "post", path, token, prompt="Hello"))
    assert not Interaction.objects.filter(conversation=conversation).exists()


def test_the_socket_and_the_api_share_one_prompt_rate(client, chat, settings, monkeypatch):
    conversation, alice, token = chat
    monkeypatch.setitem(settings.LLMCHAIN_RATES, "prompts", "1/min")
    assert api(client, "post", f"/api/conversations/{conversation.pk}/messages", token, prompt="").status_code == 400
    assert limits.take("prompts", alice.pk) is not None  # the socket's check finds the API's count


@pytest.mark.parametrize("scope, method, path, body", [
    ("conversations", "post", "/api/conversations", {"model": 0, "context": "nope"}),
    ("models", "post", "/api/models", {"name": ""}),
])
def test_writes_past_their_rate_are_refused(client, chat, settings, monkeypatch, scope, method, path, body):
    conversation, alice, token = chat
    monkeypatch.setitem(settings.LLMCHAIN_RATES, scope, "1/min")
    before = (Conversation.objects.count(), RegisteredModel.objects.count())
    api(client, method, path, token, **body)
    _refused_with_wait(api(client, method, path, token, **body))
    assert (Conversation.objects.count(), RegisteredModel.objects.count()) == before


def test_reading_lists_is_not_rate_limited(client, chat, settings, monkeypatch):
    conversation, alice, token = chat
    monkeypatch.setitem(settings.LLMCHAIN_RATES, "conversations", "1/min")
    assert all(api(client, "get", "/api/conversations", token).status_code == 200 for _ in range(5))


def test_ratings_past_the_rate_are_refused(client, chat, settings, monkeypatch):
    conversation, alice, token = chat
    monkeypatch.setitem(settings.LLMCHAIN_RATES, "ratings", "1/min")
    done = Interaction.objects.create(conversation=conversation, prompt="Hi", answer="Hello",
                                      status=Interaction.Status.DONE, interaction_id="0x" + "ab" * 32)
    assert api(client, "post", f"/api/interactions/{done.pk}/rating", token, reliability=9).status_code == 400
    _refused_with_wait(api(client, "post", f"/api/interactions/{done.pk}/rating", token, **ANSWERS))
    assert not Rating.objects.exists()


def test_token_requests_past_the_rate_are_refused(client, victim, settings, monkeypatch):
    monkeypatch.setitem(settings.LLMCHAIN_RATES, "tokens", "2/min")
    for n in range(2):
        client.post("/api/token", {"username": f"nobody{n}", "password": "x"}, REMOTE_ADDR=ATTACKER)
    refused = client.post("/api/token", {"username": "victim", "password": PASSWORD}, REMOTE_ADDR=ATTACKER)
    assert refused.status_code == 429 and not Token.objects.exists()


@pytest.mark.parametrize("spoof", [False, True])
def test_sign_ups_past_the_rate_per_address_are_refused(client, settings, monkeypatch, spoof):
    monkeypatch.setitem(settings.LLMCHAIN_RATES, "signups", "2/hour")
    for n in range(2):
        headers = {"HTTP_X_FORWARDED_FOR": f"198.51.100.{n}"} if spoof else {}
        client.post(reverse("signup"), {"username": f"bot{n}", "password": PASSWORD}, REMOTE_ADDR=ATTACKER, **headers)
    client.logout()
    headers = {"HTTP_X_FORWARDED_FOR": "198.51.100.99"} if spoof else {}
    refused = client.post(reverse("signup"), {"username": "bot9", "password": PASSWORD}, REMOTE_ADDR=ATTACKER,
                          **headers)
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert "Too many sign-ups from your address" in refused.content.decode()
    assert not User.objects.filter(username="bot9").exists()


# --- tokens ----------------------------------------------------------------------------------------

def test_an_expired_token_is_refused_and_says_how_to_get_a_new_one(client, chat, settings):
    conversation, alice, token = chat
    Token.objects.filter(key=token).update(created=timezone.now() - datetime.timedelta(days=31))
    refused = api(client, "get", "/api/conversations", token)
    assert refused.status_code == 401 and "expired" in refused.json()["detail"]
    assert "POST /api/token" in refused.json()["detail"]
    renewed = client.post("/api/token", {"username": "alice", "password": PASSWORD}, REMOTE_ADDR="192.0.2.1")
    assert renewed.status_code == 200 and renewed.json()["token"] != token
    assert api(client, "get", "/api/conversations", renewed.json()["token"]).status_code == 200


def test_an_unexpired_token_is_kept_when_asked_again(client, chat):
    conversation, alice, token = chat
    again = client.post("/api/token", {"username": "alice", "password": PASSWORD}, REMOTE_ADDR="192.0.2.1")
    assert again.json()["token"] == token and "expires" in again.json()


@pytest.mark.parametrize("token", ["", "nonsense", "a" * 40])
def test_a_made_up_token_is_refused(client, chat, token):
    refused = client.get("/api/conversations", HTTP_AUTHORIZATION=f"Token {token}")
    assert refused.status_code == 401


# --- sign-up -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mt-bench-replayer", "MT-Bench-Replayer", "llmchain-builtin", "admin", "Oracle",
                                  "registrar", "service-payments", "llmchain-anything", "mt-bench-judge"])
def test_the_site_s_own_names_cannot_be_taken(client, name):
    refused = client.post(reverse("signup"), {"username": name, "password": PASSWORD})
    assert refused.status_code == 400 and UNAVAILABLE in refused.content.decode()
    assert not User.objects.filter(username__iexact=name).exists()


def test_a_taken_name_gets_the_same_answer_as_a_reserved_one(client):
    user("carol")
    taken = client.post(reverse("signup"), {"username": "Carol", "password": PASSWORD}).content.decode()
    reserved = client.post(reverse("signup"), {"username": "admin", "password": PASSWORD}).content.decode()
    assert UNAVAILABLE in taken and UNAVAILABLE in reserved
    assert "taken" not in taken and "reserved" not in taken
    assert User.objects.filter(username__iexact="carol").count() == 1


def test_the_operator_still_gets_its_service_accounts_and_they_never_log_in(client):
    replayer = service_account("mt-bench-replayer")
    assert Profile.objects.get(user=replayer).is_service
    replayer.set_password(PASSWORD)  # even if a password were set on it by mistake
    replayer.save()
    assert _try_login(client, "page", "mt-bench-replayer", PASSWORD).status_code == 200
    assert "_auth_user_id" not in client.session
    assert client.post("/api/token", {"username": "mt-bench-replayer", "password": PASSWORD}).status_code == 400
    client.force_login(replayer, backend="apps.chat.limits.AccountBackend")  # a session made some other way
    assert client.get(reverse("chat")).status_code == 302  # ...is not honoured
    refused = api(client, "get", "/api/conversations", token_of(replayer))
    assert refused.status_code == 401 and "cannot use the API" in refused.json()["detail"]


def test_a_closed_site_takes_no_sign_up(client, settings):
    settings.LLMCHAIN_SIGNUP = "closed"
    assert client.get(reverse("signup")).status_code == 403
    assert client.post(reverse("signup"), {"username": "newcomer", "password": PASSWORD}).status_code == 403
    assert not User.objects.filter(username="newcomer").exists()


@pytest.fixture
def invitations(settings):
    settings.LLMCHAIN_SIGNUP = "invite"
    fresh = Invitation.objects.create(note="for Nina")
    used = Invitation.objects.create(note="used", used_by=user("olga"), used_at=timezone.now())
    old = Invitation.objects.create(note="old", expires_at=timezone.now() - datetime.timedelta(days=1))
    return {"fresh": fresh.code, "used": used.code, "expired": old.code, "none": "", "made-up": "abc123"}


@pytest.mark.parametrize("which", ["none", "made-up", "used", "expired"])
def test_an_invitation_site_refuses_a_missing_wrong_used_or_expired_code(client, invitations, which):
    refused = client.post(reverse("signup"), {"username": "nina", "password": PASSWORD,
                                              "invitation": invitations[which]})
    assert refused.status_code == 400 and "invitation code is not valid" in refused.content.decode()
    assert not User.objects.filter(username="nina").exists()


def test_an_invitation_is_used_once(client, invitations):
    first = client.post(reverse("signup"), {"username": "nina", "password": PASSWORD,
                                            "invitation": invitations["fresh"]})
    assert first.status_code == 302
    client.logout()
    second = client.post(reverse("signup"), {"username": "nino", "password": PASSWORD,
                                             "invitation": invitations["fresh"]})
    assert second.status_code == 400 and not User.objects.filter(username="nino").exists()
    assert Invitation.objects.get(code=invitations["fresh"]).used_by.username == "nina"


# --- lists ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("asked, served", [("100000", 500), ("-1", 100), ("nonsense", 100)])
def test_no_list_is_served_in_one_piece_however_it_is_asked(client, asked, served):
    owner = User.objects.create(username="bulk-owner")
    RegisteredModel.objects.bulk_create(RegisteredModel(
        owner=owner, name=f"m{n}", provider="test", endpoint_url="http://tiny.example/v1", endpoint_model="tiny",
        model_id="0x" + f"{n:064x}", metadata_cid="bafytest") for n in range(600))
    listed = client.get("/api/models", {"page_size": asked})
    assert listed.status_code == 200 and len(listed.json()) == served
    assert listed["X-Total-Count"] == "600" and 'rel="next"' in listed["Link"]


def test_a_page_past_the_end_is_a_clear_404(client):
    assert client.get("/api/models", {"page": 99}).status_code == 404


# --- ratings that cannot be stuffed --------------------------------------------------------------------

def _answered(conversation) -> Interaction:
    return Interaction.objects.create(conversation=conversation, prompt="Hi", answer="Hello",
                                      status=Interaction.Status.DONE,
                                      interaction_id="0x" + f"{Interaction.objects.count() + 1:064x}")


@pytest.fixture
def own_chat():
    """Dave owns the model and chats with it himself."""
    writing, = make_contexts("writing")
    model = endpoint_model("http://tiny.example/v1", "tiny")
    dave = model.owner
    return _answered(start_conversation(dave, model, writing)), dave, model, writing


@pytest.mark.parametrize("how", ["api", "page"])
def test_an_owner_cannot_rate_their_own_model(client, own_chat, how):
    answer, dave, _, _ = own_chat
    if how == "api":
        refused = api(client, "post", f"/api/interactions/{answer.pk}/rating", token_of(dave), **ANSWERS)
        assert refused.status_code == 400 and OWN_MODEL in str(refused.json())
    else:
        client.force_login(dave, backend="apps.chat.limits.AccountBackend")
        refused = client.post(reverse("rating", args=[answer.pk]), {q: "5" for q in QUESTIONS})
        assert refused.status_code == 400 and "You own this model" in refused.content.decode()
    assert not Rating.objects.exists() and not OutboxItem.objects.filter(function="humEval").exists()


def test_an_account_an_admin_linked_to_the_owner_cannot_rate_the_model_either(client, own_chat):
    _, dave, model, writing = own_chat
    sock = user("dave-sock")
    Profile.objects.filter(user=sock).update(same_person_as=dave)
    answer = _answered(start_conversation(sock, model, writing))
    refused = api(client, "post", f"/api/interactions/{answer.pk}/rating", token_of(sock), **ANSWERS)
    assert refused.status_code == 400 and OWN_MODEL in str(refused.json())
    assert not Rating.objects.exists()


def test_no_one_rates_another_person_s_answer(client, chat):
    conversation, alice, _ = chat
    answer = _answered(conversation)
    mallory = token_of(user("mallory"))
    refused = api(client, "post", f"/api/interactions/{answer.pk}/rating", mallory, **ANSWERS)
    assert refused.status_code in (403, 404) and not Rating.objects.exists()


@pytest.mark.parametrize("forged", [{"reliability": 0}, {"reliability": 6}, {"trust": "5; DROP TABLE"},
                                    {"utility": 4.5}, {"uncertainty": None}])
def test_answers_outside_the_questionnaire_are_refused(client, chat, forged):
    conversation, alice, token = chat
    answer = _answered(conversation)
    refused = api(client, "post", f"/api/interactions/{answer.pk}/rating", token, **{**ANSWERS, **forged})
    assert refused.status_code == 400 and not Rating.objects.exists()


def test_an_answer_is_rated_once(client, chat):
    conversation, alice, token = chat
    answer = _answered(conversation)
    assert api(client, "post", f"/api/interactions/{answer.pk}/rating", token, **ANSWERS).status_code == 201
    again = api(client, "post", f"/api/interactions/{answer.pk}/rating", token, **{**ANSWERS, "reliability": 1})
    assert again.status_code == 400 and ALREADY_RATED.split(":")[0] in str(again.json())
    assert Rating.objects.get().reliability == 4


# --- suspended accounts and models ---------------------------------------------------------------------

def test_a_suspended_account_is_stopped_everywhere_and_its_unsent_rating_is_not_sent(client, chat):
    conversation, alice, token = chat
    answer = _answered(conversation)
    assert api(client, "post", f"/api/interactions/{answer.pk}/rating", token, **ANSWERS).status_code == 201
    rating = Rating.objects.get()
    assert moderation.suspend_account(alice, "stuffing ratings")
    assert not moderation.suspend_account(alice)  # twice changes nothing

    assert api(client, "get", "/api/conversations", token).status_code == 401  # the token is gone
    assert _try_login(client, "page", "alice", PASSWORD).status_code == 200 and "_auth_user_id" not in client.session
    refused = client.post("/api/token", {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 403 and "suspended" in refused.json()["detail"] and "token" not in refused.json()
    rating.refresh_from_db()
    assert rating.status == Rating.Status.FAILED and "suspended" in rating.error
    sent = OutboxItem.objects.filter(pk__in=[i for i in (rating.hum_item_id, rating.update_item_id) if i])
    assert all(item.status == OutboxItem.Status.FAILED for item in sent)
    revoke = OutboxItem.objects.get(function="revokeRole")
    assert revoke.payload["account"] == alice.profile.address and revoke.payload["role"] == "user"

    assert moderation.reinstate_account(alice)
    assert OutboxItem.objects.filter(function="grantRole", payload__account=alice.profile.address).exists()
    assert _try_login(client, "page", "alice", PASSWORD, ip="192.0.2.1").status_code == 302


def test_an_owner_cannot_lift_an_operator_s_suspension_of_their_model(client, own_chat):
    _, dave, model, writing = own_chat
    assert moderation.suspend_model(model, "prompt injection in its answers")
    assert not running_models(writing).filter(pk=model.pk).exists()
    with pytest.raises(PermissionError, match="suspended"):
        registry.set_enabled(dave, model, True)
    refused = api(client, "patch", f"/api/models/{model.pk}", token_of(dave), enabled=True)
    assert refused.status_code == 403 and "suspended" in refused.json()["detail"]
    client.force_login(dave, backend="apps.chat.limits.AccountBackend")
    assert client.post(reverse("model-toggle", args=[model.pk]), {"enabled": "1"}).status_code == 403
    model.refresh_from_db()
    assert model.suspended_at is not None and not model.running
    with pytest.raises(Exception, match="not running"):
        start_conversation(user("pat"), model, writing)
    assert moderation.lift_model_suspension(model)
    assert running_models(writing).filter(pk=model.pk).exists()


def test_behind_the_proxy_only_the_address_it_adds_counts(client, victim, settings):
    """The proxy appends the client's address to whatever X-Forwarded-For the client sent: addresses
    the client made up before it change nothing."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    for n in range(5):
        _try_login(client, "page", "victim", "guess", ip="10.0.0.2", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}, {ATTACKER}")
    locked = _try_login(client, "page", "victim", PASSWORD, ip="10.0.0.2",
                        HTTP_X_FORWARDED_FOR=f"198.51.100.77, {ATTACKER}")
    assert locked.status_code == 429
    # ...while someone else behind the same proxy is not locked out with the attacker.
    assert _try_login(client, "page", "victim", PASSWORD, ip="10.0.0.2",
                      HTTP_X_FORWARDED_FOR="192.0.2.50").status_code == 302


def test_a_second_prompt_while_an_answer_streams_is_refused_and_queues_nothing(client, chat):
    conversation, alice, token = chat
    Interaction.objects.create(conversation=conversation, prompt="Tell me a long story", interaction_id="0x" + "ef" * 32)
    refused = api(client, "post", f"/api/conversations/{conversation.pk}/messages", token, prompt="And another")
    assert refused.status_code == 400 and "Wait for the current answer" in str(refused.json())
    assert Interaction.objects.filter(conversation=conversation).count() == 1
