"""The gateway to OpenAI-compatible endpoints: streaming, typed errors, retries only before the first token."""

import json

import httpx
import pytest

from apps.chat.gateway import BadResponse, Endpoint, EndpointRefused, EndpointUnavailable, Gateway

ENDPOINT = Endpoint("http://models.test/v1", "tiny", api_key="sk-x")


def sse(*pieces, error=None):
    lines = [f"data: {json.dumps({'choices': [{'delta': {'content': p}}]})}\n\n" for p in pieces]
    if error:
        lines.append(f"data: {json.dumps({'error': error})}\n\n")
    else:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def gateway(handler, **kw):
    return Gateway(transport=httpx.MockTransport(handler), backoff=0, **kw)


async def test_pieces_stream_in_order_and_the_key_is_sent():
    seen = {}

    def handler(request):
        seen["auth"] = request.headers.get("authorization")
        seen["body"] = json.loads(request.content)
        return httpx.Response(200, content=sse("Hel", "lo", "!"))

    pieces = [p async for p in gateway(handler).stream_chat(ENDPOINT, [{"role": "user", "content": "hi"}])]
    assert pieces == ["Hel", "lo", "!"]
    assert seen["auth"] == "Bearer sk-x" and seen["body"]["stream"] is True and seen["body"]["model"] == "tiny"


async def test_a_busy_endpoint_is_retried_before_the_first_token():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(503, json={"error": {"message": "busy"}}) if len(calls) < 3 else httpx.Response(200, content=sse("ok"))

    assert await gateway(handler, retries=2).complete(ENDPOINT, []) == "ok"
    assert len(calls) == 3


async def test_retries_are_bounded_and_the_error_is_typed():
    def handler(request):
        raise httpx.ConnectError("refused")

    with pytest.raises(EndpointUnavailable, match="unreachable"):
        await gateway(handler, retries=1).complete(ENDPOINT, [])


async def test_a_refusal_is_permanent_and_not_retried():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(401, json={"error": {"message": "bad key"}})

    with pytest.raises(EndpointRefused, match="answered HTTP 401") as err:
        await gateway(handler).complete(ENDPOINT, [])
    assert err.value.permanent and len(calls) == 1
    assert "bad key" not in str(err.value) and "models.test" not in str(err.value)  # for any page
    assert err.value.detail == "models.test answered 401: bad key"  # for the model's owner


async def test_a_failure_after_the_first_token_is_not_retried():
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(200, content=sse("partial", error="out of memory"))

    pieces = []
    with pytest.raises(EndpointUnavailable, match="mid-answer"):
        async for p in gateway(handler, retries=3).stream_chat(ENDPOINT, []):
            pieces.append(p)
    assert pieces == ["partial"] and len(calls) == 1


async def test_garbage_in_the_stream_is_a_bad_response():
    def handler(request):
        return httpx.Response(200, content=b"data: {not json\n\n")

    with pytest.raises(BadResponse):
        await gateway(handler).complete(ENDPOINT, [])


async def test_a_whole_completion_comes_back_as_the_endpoint_sent_it_with_its_logprobs():
    seen, calls = {}, []
    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "4"},
                               "logprobs": {"content": [{"token": "4", "logprob": -0.1, "top_logprobs": []}]}}]}

    def handler(request):
        calls.append(1)
        seen["body"] = json.loads(request.content)
        return httpx.Response(503, json={"error": {"message": "busy"}}) if len(calls) < 2 else \
            httpx.Response(200, json=completion)

    reply = await gateway(handler).chat(ENDPOINT, [{"role": "user", "content": "rate it"}], logprobs=True,
                                        top_logprobs=20)
    assert reply == completion and len(calls) == 2
    assert seen["body"]["stream"] is False and seen["body"]["top_logprobs"] == 20


async def test_a_whole_completion_that_is_not_one_is_a_bad_response_and_a_refusal_is_not_retried():
    with pytest.raises(BadResponse, match="not a chat completion"):
        await gateway(lambda request: httpx.Response(200, json={"choices": []})).chat(ENDPOINT, [])
    calls = []

    def refuse(request):
        calls.append(1)
        return httpx.Response(400, json={"error": {"message": "'n' must be <= 8"}})

    with pytest.raises(EndpointRefused) as err:
        await gateway(refuse).chat(ENDPOINT, [], n=20)
    assert "must be <= 8" in err.value.detail
    assert len(calls) == 1


def test_base_urls_with_or_without_v1_reach_the_same_path():
    assert Endpoint("http://h:1", "m").url("models") == Endpoint("http://h:1/v1/", "m").url("models") == "http://h:1/v1/models"


@pytest.mark.slow
async def test_the_built_in_model_server_streams_a_real_answer(model_server):
    endpoint = Endpoint(model_server.url, model_server.model, model_server.api_key)
    gw = Gateway()
    await gw.check(endpoint)
    pieces = [p async for p in gw.stream_chat(endpoint, [{"role": "user", "content": "Name a colour."}],
                                              max_tokens=12, temperature=0)]
    assert len(pieces) >= 2 and "".join(pieces).strip()
    with pytest.raises(EndpointRefused):
        await gw.check(Endpoint(model_server.url, model_server.model, "wrong-key"))


@pytest.mark.slow
async def test_an_answer_cut_at_the_token_limit_says_so(model_server):
    """The built-in server ends a capped answer with finish_reason "length"; the gateway passes it on,
    and says "length" itself when it cuts a stream that goes on past max_tokens."""
    endpoint = Endpoint(model_server.url, model_server.model, model_server.api_key)
    ask = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    outcome: dict = {}
    pieces = [p async for p in Gateway().stream_chat(endpoint, ask, max_tokens=4, temperature=0, outcome=outcome)]
    assert 1 <= len(pieces) <= 4 and outcome == {"finish_reason": "length"}
    outcome = {}
    whole = [p async for p in Gateway().stream_chat(endpoint, [{"role": "user", "content": "Say yes."}],
                                                    max_tokens=200, temperature=0, outcome=outcome)]
    assert whole and outcome == {"finish_reason": "stop"}


async def test_a_non_streamed_call_waits_for_the_whole_reply_as_long_as_its_caller_allows():
    seen = []

    def handler(request):
        seen.append(request.extensions["timeout"]["read"])
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    g = gateway(handler)
    await g.chat(ENDPOINT, [{"role": "user", "content": "hi"}])
    await g.chat(ENDPOINT, [{"role": "user", "content": "hi"}], read_timeout=500)
    assert seen == [60.0, 500]


async def test_a_non_streamed_reply_that_did_not_come_in_time_is_not_asked_for_again():
    """The endpoint still works on a request whose reply timed out: a second ask would queue the same
    work behind it. A refused connection reached no one, and is tried again."""
    calls = []

    def slow(request):
        calls.append(request.extensions["timeout"]["read"])
        raise httpx.ReadTimeout("", request=request)

    with pytest.raises(EndpointUnavailable, match="timed out"):
        await gateway(slow, retries=2).chat(ENDPOINT, [{"role": "user", "content": "hi"}], read_timeout=180)
    assert calls == [180]

    refused = []

    def down(request):
        refused.append(1)
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(EndpointUnavailable, match="unreachable"):
        await gateway(down, retries=2).chat(ENDPOINT, [{"role": "user", "content": "hi"}], read_timeout=180)
    assert len(refused) == 3
