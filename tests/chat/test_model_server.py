"""The built-in model server answers like an OpenAI endpoint: plain, streamed, with logprobs."""

from __future__ import annotations

import json
import re
import socket
import struct
import time

import httpx
import pytest

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]


def chat(api: httpx.Client, model_server, **body) -> httpx.Response:
    return api.post("/chat/completions", json={"model": model_server.model, **body})


def stream_events(api: httpx.Client, model_server, **body) -> list[tuple[float, object]]:
    """Each SSE event with the time it arrived; '[DONE]' stays a string."""
    events = []
    with api.stream("POST", "/chat/completions", json={"model": model_server.model, "stream": True, **body}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                events.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
    return events


def streamed_text(events) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for _, e in events
                   if isinstance(e, dict) and e["choices"])


def test_it_lists_its_model(api, model_server):
    r = api.get("/models")
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == [model_server.model]
    assert api.get(f"/models/{model_server.model}").json()["id"] == model_server.model


def test_it_answers_a_question(api, model_server):
    r = chat(api, model_server, messages=QUESTION, max_tokens=16, temperature=0)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert "Paris" in choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_a_streamed_answer_is_the_greedy_answer_in_pieces(api, model_server):
    plain = chat(api, model_server, messages=STORY, max_tokens=24, temperature=0).json()
    events = stream_events(api, model_server, messages=STORY, max_tokens=24, temperature=0)
    chunks = [e for _, e in events if isinstance(e, dict)]
    assert events[-1][1] == "[DONE]"
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len([c for c in chunks if c["choices"][0]["delta"].get("content")]) > 5
    assert chunks[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"] == "length"
    assert streamed_text(events) == plain["choices"][0]["message"]["content"]


def test_tokens_arrive_while_the_answer_is_still_being_generated(api, model_server):
    started = time.monotonic()
    events = stream_events(api, model_server, messages=STORY, max_tokens=32, temperature=0)
    first_token = next(t for t, e in events if isinstance(e, dict) and e["choices"][0]["delta"].get("content"))
    done = events[-1][0]
    assert done - first_token > 0.5 * (done - started)


def test_two_answers_asked_at_once_stream_together_and_stay_their_own(api, model_server):
    """An arena battle between two models served here asks both at once: both stream from the start
    (token by token in turn, not one after the other), and each is the answer it would be alone."""
    from concurrent.futures import ThreadPoolExecutor

    asks = [dict(messages=STORY, max_tokens=40, temperature=0), dict(messages=QUESTION, max_tokens=40, temperature=0)]
    alone = [chat(api, model_server, **ask).json()["choices"][0]["message"]["content"] for ask in asks]
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda ask: stream_events(api, model_server, **ask), asks))
    assert [streamed_text(events) for events in together] == alone

    def first_and_last(events):
        times = [t for t, e in events if isinstance(e, dict) and e["choices"] and e["choices"][0]["delta"].get("content")]
        return times[0], times[-1]

    (first_a, last_a), (first_b, last_b) = map(first_and_last, together)
    assert first_b < last_a and first_a < last_b, "one answer waited for the other to finish"


def test_logprobs_come_with_the_requested_alternatives(api, model_server):
    r = chat(api, model_server, messages=QUESTION, max_tokens=8, temperature=0, logprobs=True, top_logprobs=5)
    choice = r.json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == r.json()["usage"]["completion_tokens"]
    assert bytes(b for entry in content for b in entry["bytes"]).decode() == choice["message"]["content"]
    for entry in content:
        assert entry["logprob"] <= 0
        top = entry["top_logprobs"]
        assert len(top) == 5
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        # Greedy decoding picks the most likely token.
        assert (entry["token"], entry["logprob"]) == (top[0]["token"], top[0]["logprob"])


def test_streamed_logprobs_match_the_plain_ones(api, model_server):
    body = dict(messages=QUESTION, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    plain = chat(api, model_server, **body).json()["choices"][0]["logprobs"]["content"]
    events = stream_events(api, model_server, **body)
    streamed = [entry for _, e in events if isinstance(e, dict) and e["choices"] and e["choices"][0]["logprobs"]
                for entry in e["choices"][0]["logprobs"]["content"]]
    assert streamed == plain


def test_a_seed_makes_sampling_repeatable(api, model_server):
    body = dict(messages=STORY, max_tokens=12, temperature=1.0, top_p=0.95, seed=7, n=2)
    first, second = (chat(api, model_server, **body).json() for _ in range(2))
    assert len(first["choices"]) == 2
    assert [c["message"]["content"] for c in first["choices"]] == [c["message"]["content"] for c in second["choices"]]


def test_stream_usage_comes_last_when_asked(api, model_server):
    events = stream_events(api, model_server, messages=QUESTION, max_tokens=4, stream_options={"include_usage": True})
    usage_chunk = events[-2][1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] <= 4


@pytest.mark.parametrize("body, status, param", [
    ({"max_tokens": 4}, 400, "messages"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 42}]}, 400, "messages[0].content"),
    ({"messages": QUESTION, "max_tokens": 0}, 400, "max_tokens"),
    ({"messages": QUESTION, "max_tokens": 100_000}, 400, "max_tokens"),
    ({"messages": QUESTION, "temperature": 3}, 400, "temperature"),
    ({"messages": QUESTION, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    ({"messages": QUESTION, "top_logprobs": 2}, 400, "top_logprobs"),
    ({"messages": QUESTION, "model": "gpt-17"}, 404, "model"),
])
def test_bad_requests_get_an_openai_error(api, model_server, body, status, param):
    r = api.post("/chat/completions", json={"model": model_server.model, **body})
    assert r.status_code == status
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["message"]


def test_a_body_that_is_not_json_is_refused(api):
    r = api.post("/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_conversation_longer_than_the_context_is_refused(api, model_server):
    long = [{"role": "user", "content": "word " * 3000}]
    r = chat(api, model_server, messages=long, max_tokens=4)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_unknown_paths_and_methods_are_refused(api):
    assert api.get("/completions/nothing").status_code == 404
    assert api.get("/models/gpt-17").status_code == 404
    r = api.get("/chat/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("header", [None, "Bearer wrong-key", "sk-local-test"])
def test_requests_without_the_api_key_are_refused(model_server, header):
    headers = {"Authorization": header} if header else {}
    r = httpx.post(f"{model_server.url}/chat/completions", headers=headers,
                   json={"model": model_server.model, "messages": QUESTION, "max_tokens": 2})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"


def test_a_client_that_resets_its_keep_alive_connection_leaves_no_traceback(model_server):
    """httpx clients closed with their event loop reset idle connections; that is not a server error."""
    before = model_server.log_file.stat().st_size
    host, port = model_server.url.removeprefix("http://").removesuffix("/v1").rsplit(":", 1)
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer "
                         f"{model_server.api_key}\r\n\r\n".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    time.sleep(0.5)
    assert httpx.get(f"{model_server.url}/models", headers={"Authorization": f"Bearer {model_server.api_key}"},
                     timeout=10).status_code == 200  # still serving
    time.sleep(0.2)
    with model_server.log_file.open("rb") as log:
        log.seek(before)
        new = log.read().decode(errors="replace")
    assert new.count('"GET /v1/models HTTP/1.1" 200') == 4
    assert "Traceback" not in new and "Connection reset" not in new


def test_a_non_streamed_answer_stops_when_its_client_goes_away(model_server):
    """A judge whose read timeout ran out closes its connection: the server stops generating the answer
    nobody will read, instead of spending the model on it while the next requests wait their turn."""
    before = model_server.log_file.stat().st_size
    host, port = model_server.url.removeprefix("http://").removesuffix("/v1").rsplit(":", 1)
    body = json.dumps({"model": model_server.model, "messages": STORY, "max_tokens": 1000, "temperature": 0}).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer "
                     f"{model_server.api_key}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     f"\r\n".encode() + body)
        time.sleep(1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with model_server.log_file.open("rb") as log:
            log.seek(before)
            found = re.search(rb"went away after (\d+) of at most 1000 tokens: generation stopped", log.read())
        if found:
            break
        time.sleep(0.2)
    assert found and int(found.group(1)) < 1000
