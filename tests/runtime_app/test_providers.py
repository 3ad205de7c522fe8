"""The LLM provider clients against a local server speaking both wire protocols (OpenAI-compatible chat completions
and Anthropic's Messages API): replies, streaming, tool calls, wire shapes, errors, retries, cancellation, the
outbound guard and the response cap."""
from __future__ import annotations

import json
import threading

import pytest

from runtime_app.providers import (ChatMessage, ChatRequest, ProviderConfig, ProviderError, ToolCallRequest, ToolSpec,
                                   chat, retry_delay, transport)
from tests.runtime_app.llm_server import LLMServer, Reply, call, text

KEY = "sk-test-4f9a8b7c6d5e4f3a2b1c"
KINDS = ["openai", "anthropic"]
WEATHER = ToolSpec("weather", "The weather in a city.", {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]})


@pytest.fixture
def server():
    with LLMServer() as running:
        yield running


def config(server: LLMServer, kind: str, **overrides) -> ProviderConfig:
    options = {"name": "test", "kind": kind, "base_url": f"{server.url}/v1" if kind == "openai" else server.url,
               "api_key": KEY, "allow_private_network": True, "timeout": 30.0, "backoff_base": 0.01,
               "backoff_max": 0.05, **overrides}
    return ProviderConfig(**options)


def ask(cfg: ProviderConfig, *messages: ChatMessage, **options):
    request = ChatRequest(model="test-model", system=options.pop("system", "Be brief."),
                          messages=messages or (ChatMessage("user", "hello"),), **options)
    return chat(cfg, request)


def failure(cfg: ProviderConfig, **options) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        ask(cfg, **options)
    return caught.value


# --- replies --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_text_reply_comes_back_with_its_usage(server, kind):
    server.script(Reply(content="The sky is blue.", usage=(123, 45)))
    reply = ask(config(server, kind))
    assert reply.content == "The sky is blue."
    assert reply.tool_calls == ()
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (123, 45)
    assert reply.stop_reason == ("stop" if kind == "openai" else "end_turn")
    assert reply.model == "test-model"


@pytest.mark.parametrize("kind", KINDS)
def test_streamed_text_reaches_on_text_piece_by_piece(server, kind):
    server.script(text("one two three four five six"))
    pieces: list[str] = []
    reply = ask(config(server, kind), on_text=pieces.append)
    assert len(pieces) > 1
    assert "".join(pieces) == reply.content == "one two three four five six"
    assert server.requests[0]["stream"] is True


@pytest.mark.parametrize("kind", KINDS)
def test_a_tool_call_comes_back_with_id_name_and_raw_arguments(server, kind):
    server.script(call("weather", city="Paris", days=3))
    reply = ask(config(server, kind), tools=(WEATHER,))
    [tool_call] = reply.tool_calls
    assert tool_call.name == "weather"
    assert json.loads(tool_call.arguments) == {"city": "Paris", "days": 3}
    assert tool_call.id
    assert reply.stop_reason == ("tool_calls" if kind == "openai" else "tool_use")


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_tool_calls_come_back_in_order_with_distinct_ids(server, kind):
    server.script(Reply(content="Checking both.", tool_calls=[("weather", '{"city": "Oslo"}'),
                                                               ("weather", '{"city": "Lima"}'), ("clock", "{}")]))
    reply = ask(config(server, kind), tools=(WEATHER,))
    assert reply.content == "Checking both."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("weather", '{"city": "Oslo"}'), ("weather", '{"city": "Lima"}'), ("clock", "{}")]
    assert len({c.id for c in reply.tool_calls}) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_malformed_tool_call_arguments_are_passed_through_raw(server, kind):
    server.script(Reply(tool_calls=[("weather", '{"city": "Par')]))
    [tool_call] = ask(config(server, kind)).tool_calls
    assert (tool_call.name, tool_call.arguments) == ("weather", '{"city": "Par')


@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_json_reply_is_accepted_when_the_server_does_not_stream(server, kind):
    server.script(Reply(content="Not streamed.", tool_calls=[("weather", '{"city": "Rome"}')], usage=(7, 3),
                        stream=False))
    pieces: list[str] = []
    reply = ask(config(server, kind), on_text=pieces.append)
    assert reply.content == "Not streamed." == "".join(pieces)
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [("weather", {"city": "Rome"})]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)


# --- what goes on the wire ------------------------------------------------------------------------------------------
CONVERSATION = (
    ChatMessage("user", "Weather in Oslo and Lima?"),
    ChatMessage("assistant", "Let me look.", tool_calls=(ToolCallRequest("call_1", "weather", '{"city": "Oslo"}'),
                                                         ToolCallRequest("call_2", "weather", '{"city": "Li'))),
    ChatMessage("tool", "Sunny, 21 C", tool_call_id="call_1", name="weather"),
    ChatMessage("tool", "invalid arguments: not JSON", tool_call_id="call_2", name="weather", is_error=True),
    ChatMessage("user", "And tomorrow?"),
)


def test_openai_wire_shape_of_tools_tool_calls_and_tool_results(server):
    ask(config(server, "openai"), *CONVERSATION, tools=(WEATHER,), max_tokens=321)
    [sent] = server.requests
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == f"Bearer {KEY}"
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["max_tokens"] == 321 and sent["model"] == "test-model"
    assert sent["tools"] == [{"type": "function", "function": {"name": "weather", "description": WEATHER.description,
                                                               "parameters": WEATHER.parameters}}]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and Lima?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
            # arguments that never parsed go back as an empty object (servers that parse them would refuse)
            {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "invalid arguments: not JSON"},
        {"role": "user", "content": "And tomorrow?"},
    ]


def test_anthropic_wire_shape_of_tools_tool_uses_and_merged_tool_results(server):
    ask(config(server, "anthropic"), *CONVERSATION, tools=(WEATHER,), max_tokens=321)
    [sent] = server.requests
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["x-api-key"] == KEY and sent["headers"]["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent["headers"]
    assert sent["system"] == "Be brief." and sent["max_tokens"] == 321 and sent["stream"] is True
    assert sent["tools"] == [{"name": "weather", "description": WEATHER.description,
                              "input_schema": WEATHER.parameters}]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo and Lima?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "call_2", "name": "weather", "input": {}}]},
        # both results and the next user words: one user message (roles must alternate), results first
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny, 21 C", "is_error": False},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "invalid arguments: not JSON",
             "is_error": True},
            {"type": "text", "text": "And tomorrow?"}]},
    ]


def test_anthropic_base_url_ending_in_v1_is_not_doubled(server):
    ask(config(server, "anthropic", base_url=f"{server.url}/v1/"))
    assert server.requests[0]["path"] == "/v1/messages"


def test_openai_sends_no_authorization_without_a_key(server):
    ask(config(server, "openai", api_key=""))
    assert "authorization" not in server.requests[0]["headers"]


# --- errors and retries ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_key_is_unauthorized_not_retried_and_never_echoed(server, kind):
    server.script(Reply(status=401, content=f"Incorrect API key provided: {KEY}"))
    error = failure(config(server, kind))
    assert (error.code, error.status, error.retryable) == ("unauthorized", 401, False)
    assert len(server.requests) == 1
    assert KEY not in error.message and KEY not in str(error)
    assert "Incorrect API key provided" in error.message


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_model_is_model_not_found(server, kind):
    server.script(Reply(status=404, content="model 'nope' not found"))
    error = failure(config(server, kind))
    assert error.code == "model_not_found" and "model 'nope' not found" in error.message
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_another_4xx_is_a_bad_request_with_the_servers_message_trimmed(server, kind):
    server.script(Reply(status=400, content="max_tokens is too large " + "x" * 2000))
    error = failure(config(server, kind))
    assert error.code == "bad_request" and "max_tokens is too large" in error.message
    assert len(error.message) < 400
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limited_with_retry_after_is_retried_once_then_answered(server, kind):
    server.script(Reply(status=429, headers={"retry-after": "1"}), text("after the wait"))
    assert ask(config(server, kind)).content == "after the wait"
    assert len(server.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_server_errors_are_retried_max_retries_times_then_reported(server, kind):
    server.script(*[Reply(status=500, content="boom")] * 3, text("never reached"))
    error = failure(config(server, kind, max_retries=2))
    assert (error.code, error.status) == ("server_error", 500)
    assert len(server.requests) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_garbage_body_is_a_bad_response(server, kind):
    server.script(Reply(raw=b"<html><body>502 Bad Gateway</body></html>"))
    assert failure(config(server, kind)).code == "bad_response"
    server.script(Reply(raw=b"data: this is not json\n\n"))
    assert failure(config(server, kind)).code == "bad_response"
    server.script(Reply(raw=b'{"choices": [', stream=False))
    assert failure(config(server, kind)).code == "bad_response"
    assert len(server.requests) == 3  # not retried


def test_an_anthropic_error_event_mid_stream_is_a_provider_error(server):
    events = (b'event: message_start\ndata: {"type": "message_start", "message": {"model": "m", "usage": '
              b'{"input_tokens": 1, "output_tokens": 1}}}\n\n'
              b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
              b'\n\n')
    server.script(Reply(raw=events))
    error = failure(config(server, "anthropic", max_retries=0))
    assert error.code == "server_error" and "Overloaded" in error.message


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_cut_short_after_text_was_shown_is_not_retried(server, kind):
    if kind == "openai":
        partial = b'data: {"model": "m", "choices": [{"index": 0, "delta": {"content": "Hal"}}]}\n\n'
    else:
        partial = (b'data: {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}}\n\n'
                   b'data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}'
                   b'\n\ndata: {"type": "content_block_delta", "index": 0, '
                   b'"delta": {"type": "text_delta", "text": "Hal"}}\n\n')
    server.script(Reply(raw=partial), text("a second answer would repeat the text on screen"))
    pieces: list[str] = []
    error = failure(config(server, kind, max_retries=2), on_text=pieces.append)
    assert error.code == "connection"
    assert pieces == ["Hal"] and len(server.requests) == 1


def test_retry_delay_honours_retry_after_capped_and_backs_off_with_jitter():
    cfg = ProviderConfig(name="t", kind="openai", base_url="https://example.com/v1", backoff_base=1.0,
                         backoff_max=10.0)
    assert retry_delay(cfg, 0, retry_after=3.0) == 3.0
    assert retry_delay(cfg, 0, retry_after=60.0) == 10.0
    assert 0.5 <= retry_delay(cfg, 0) <= 1.0
    assert 2.0 <= retry_delay(cfg, 2) <= 4.0
    assert 5.0 <= retry_delay(cfg, 8) <= 10.0
    assert transport.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now
    assert transport.parse_retry_after("soon") is None


# --- cancellation ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_stalled_stream_is_cancelled_from_on_text(server, kind):
    server.script(Reply(content="the first words and then silence", stall=True))
    cancel = threading.Event()
    error = failure(config(server, kind), on_text=lambda piece: cancel.set(), cancel=cancel)
    assert error.code == "cancelled"


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancel_from_another_thread_interrupts_a_read_that_waits_on_a_silent_server(server, kind):
    server.script(Reply(content="the first words and then silence", stall=True))
    cancel, shown = threading.Event(), threading.Event()

    def cancel_once_the_client_waits() -> None:  # the server has gone silent and the client has read what came
        server.stalled.wait(30)
        shown.wait(30)
        cancel.set()

    canceller = threading.Thread(target=cancel_once_the_client_waits)
    canceller.start()
    try:
        error = failure(config(server, kind), on_text=lambda piece: shown.set(), cancel=cancel)
    finally:
        canceller.join()
    assert error.code == "cancelled"
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancel_during_the_backoff_stops_retrying(server, kind):
    cancel = threading.Event()

    def overloaded(request: dict) -> Reply:
        cancel.set()
        return Reply(status=503, headers={"retry-after": "30"})

    server.responder = overloaded
    error = failure(config(server, kind, backoff_max=30.0), cancel=cancel)
    assert error.code == "cancelled"
    assert len(server.requests) == 1


def test_an_already_cancelled_request_is_never_sent(server):
    cancel = threading.Event()
    cancel.set()
    assert failure(config(server, "openai"), cancel=cancel).code == "cancelled"
    assert server.requests == []


# --- the outbound guard and the cap ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_loopback_provider_without_private_network_access_is_refused_before_any_request(server, kind):
    error = failure(config(server, kind, allow_private_network=False))
    assert error.code == "connection"
    assert "127.0.0.1 is a loopback address" in error.message
    assert "allow private networks for this LLM provider" in error.message
    assert not error.retryable
    assert server.requests == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_huge_reply_is_cut_at_the_cap(server, kind):
    huge = "0123456789abcdef" * (transport.MAX_RESPONSE_BYTES // 16 + 200_000)  # ~11 MiB
    server.script(text(huge))
    reply = ask(config(server, kind))
    assert reply.stop_reason == transport.STOP_CUT
    assert 0 < len(reply.content) <= transport.MAX_RESPONSE_BYTES
    assert huge.startswith(reply.content)


@pytest.mark.parametrize("kind", KINDS)
def test_a_huge_json_reply_is_refused(server, kind):
    server.script(Reply(content="x" * (transport.MAX_RESPONSE_BYTES + 1000), stream=False))
    assert failure(config(server, kind)).code == "bad_response"


def test_an_unknown_provider_kind_or_unusable_base_url_is_a_clean_error(server):
    error = failure(config(server, "gemini"))
    assert error.code == "bad_request" and "gemini" in error.message
    error = failure(config(server, "openai", base_url="ftp://127.0.0.1/v1"))
    assert error.code == "bad_request" and "http or https" in error.message
    assert server.requests == []
