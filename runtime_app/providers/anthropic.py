"""Anthropic's Messages API: `POST {base_url}/v1/messages`, streamed; its events (message_start, content blocks of
text and tool_use, message_delta, message_stop, error) folded into one ChatReply. Tool calls go back as tool_use
blocks, their results as tool_result blocks of a user message; roles alternate as the API requires."""
from __future__ import annotations

import json
import re
import uuid
from typing import Any

from runtime_app.providers.base import (ChatMessage, ChatReply, ChatRequest, ProviderConfig, ProviderError,
                                        ToolCallRequest, Usage)
from runtime_app.providers.transport import STOP_CUT, load_json, stream_post, trim

API_VERSION = "2023-06-01"
# error.type of an error event or body -> ProviderError code
ERROR_CODES = {"authentication_error": "unauthorized", "permission_error": "unauthorized",
               "not_found_error": "model_not_found", "rate_limit_error": "rate_limited",
               "invalid_request_error": "bad_request", "request_too_large": "bad_request",
               "overloaded_error": "server_error", "api_error": "server_error", "timeout_error": "timeout"}


def chat(config: ProviderConfig, request: ChatRequest) -> ChatReply:
    """One message, streamed (request.on_text gets the text as it comes). Raises ProviderError."""
    headers = {"anthropic-version": API_VERSION}
    if config.api_key:
        headers["x-api-key"] = config.api_key
    reply = _Reply(request)
    cut = stream_post(config, request, endpoint(config.base_url), {**headers, **config.extra_headers},
                      request_body(request), reply)
    return reply.finish(cut)


def endpoint(base_url: str) -> str:
    """`{base}/v1/messages`, without doubling a /v1 the base URL already ends with."""
    base = base_url.rstrip("/")
    return base + ("/messages" if base.endswith("/v1") else "/v1/messages")


def request_body(request: ChatRequest) -> dict[str, Any]:
    body: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens, "stream": True,
                            "messages": wire_messages(request.messages)}
    if request.system:
        body["system"] = request.system
    if request.tools:
        body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                         for t in request.tools]
    return body


def wire_messages(messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
    """Messages as content blocks, consecutive ones of a role merged (tool results and a user's words become one
    user message, tool results first as the API wants); empty text is left out (the API refuses it)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "user":
            role, blocks = "user", _text_blocks(message.content)
        elif message.role == "assistant":
            role, blocks = "assistant", _text_blocks(message.content) + [
                {"type": "tool_use", "id": _safe_id(call.id), "name": call.name, "input": _input(call.arguments)}
                for call in message.tool_calls]
        elif message.role == "tool":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": _safe_id(message.tool_call_id),
                                      "is_error": message.is_error}
            if message.content:
                result["content"] = message.content
            role, blocks = "user", [result]
        else:
            raise ProviderError("bad_request", f"unknown message role {message.role[:20]!r}")
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for message in out:
        if message["role"] == "user":
            message["content"].sort(key=lambda block: block["type"] != "tool_result")
    return out


def _text_blocks(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}] if text else []


def _input(arguments: str) -> dict[str, Any]:
    """tool_use input is an object: the arguments parsed, {} when they do not parse (the loop has already
    answered such a call with an error)."""
    try:
        value = json.loads(arguments)
    except (ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _safe_id(call_id: str) -> str:
    """The API accepts ids of letters, digits, _ and - only (ids from another provider may hold others)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", call_id) or "toolu_missing"


def new_call_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


def event_error(obj: dict[str, Any]) -> ProviderError:
    """An `error` event (or error body) as a ProviderError: overloaded / api errors may pass, others will not."""
    error = obj.get("error") if isinstance(obj.get("error"), dict) else {}
    kind = error.get("type") if isinstance(error.get("type"), str) else "error"
    message = error.get("message") if isinstance(error.get("message"), str) else kind
    return ProviderError(ERROR_CODES.get(kind, "server_error"), f"the provider failed: {trim(message)}")


class _Reply:
    """The reply being assembled from stream events (or from one JSON message)."""

    def __init__(self, request: ChatRequest) -> None:
        self.on_text = request.on_text
        self.blocks: dict[int, dict[str, Any]] = {}
        self.input_tokens = self.output_tokens = 0
        self.stop_reason = ""
        self.model = ""
        self.started = self.done = False

    def event(self, name: str, data: str) -> bool:
        obj = load_json(data)
        if not isinstance(obj, dict):
            raise ProviderError("bad_response", "a stream event is not a JSON object")
        kind = obj.get("type") if isinstance(obj.get("type"), str) else name
        if kind == "error":
            raise event_error(obj)
        if kind == "message_start":
            message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
            self._message(message)
            self.started = True
        elif kind == "content_block_start":
            block = obj.get("content_block") if isinstance(obj.get("content_block"), dict) else {}
            self._block(obj.get("index"), block)
        elif kind == "content_block_delta":
            self._delta(obj.get("index"), obj.get("delta") if isinstance(obj.get("delta"), dict) else {})
        elif kind == "message_delta":
            delta = obj.get("delta") if isinstance(obj.get("delta"), dict) else {}
            if isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            self._usage(obj.get("usage"))
        elif kind == "message_stop":
            self.done = True
            return True
        return False  # content_block_stop, ping, and events of later API versions

    def document(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise ProviderError("bad_response", "the reply is not a JSON object")
        if obj.get("type") == "error":
            raise event_error(obj)
        if not isinstance(obj.get("content"), list):
            raise ProviderError("bad_response", "the reply has no content")
        self._message(obj)
        for index, block in enumerate(obj["content"]):
            if isinstance(block, dict):
                self._block(index, block)
        if isinstance(obj.get("stop_reason"), str):
            self.stop_reason = obj["stop_reason"]
        self.started = self.done = True

    def _message(self, message: dict[str, Any]) -> None:
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        self._usage(message.get("usage"))

    def _usage(self, usage: Any) -> None:
        """Input counts cache reads and writes too (all of it was sent); output is cumulative in message_delta."""
        if not isinstance(usage, dict):
            return
        parts = [usage.get(key) for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
        if any(_is_count(part) for part in parts):
            self.input_tokens = sum(part for part in parts if _is_count(part))
        if _is_count(usage.get("output_tokens")):
            self.output_tokens = usage["output_tokens"]

    def _block(self, index: Any, block: dict[str, Any]) -> None:
        if not isinstance(index, int):
            return
        kind = block.get("type")
        slot: dict[str, Any] = {"type": kind, "text": [], "json": [], "id": "", "name": ""}
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            self._text(slot, block["text"])
        elif kind == "tool_use":
            slot["id"] = block.get("id") if isinstance(block.get("id"), str) else ""
            slot["name"] = block.get("name") if isinstance(block.get("name"), str) else ""
            given = block.get("input")
            # streamed: input is {} and the arguments follow as input_json_delta; a whole reply: the object
            if isinstance(given, str):
                slot["json"].append(given)
            elif isinstance(given, dict) and given:
                slot["json"].append(json.dumps(given))
        self.blocks[index] = slot

    def _delta(self, index: Any, delta: dict[str, Any]) -> None:
        if not isinstance(index, int):
            return
        kind = delta.get("type")
        slot = self.blocks.get(index)
        if slot is None:  # a delta without its block start: assume the block its delta implies
            self._block(index, {"type": "tool_use" if kind == "input_json_delta" else "text"})
            slot = self.blocks[index]
        if kind == "text_delta" and isinstance(delta.get("text"), str) and delta["text"]:
            self._text(slot, delta["text"])
        elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            slot["json"].append(delta["partial_json"])

    def _text(self, slot: dict[str, Any], text: str) -> None:
        slot["text"].append(text)
        if self.on_text is not None:
            self.on_text(text)

    def finish(self, cut: bool) -> ChatReply:
        if not self.started:
            raise ProviderError("bad_response", "the provider's stream held no message")
        if not cut and not self.done and not self.stop_reason:
            raise ProviderError("connection", "the stream ended before the reply was complete")
        ordered = [self.blocks[index] for index in sorted(self.blocks)]
        calls = tuple(ToolCallRequest(id=slot["id"] or new_call_id(), name=slot["name"],
                                      arguments="".join(slot["json"]) or "{}")
                      for slot in ordered if slot["type"] == "tool_use")
        return ChatReply(content="".join("".join(slot["text"]) for slot in ordered if slot["type"] == "text"),
                         tool_calls=calls, usage=Usage(self.input_tokens, self.output_tokens),
                         stop_reason=STOP_CUT if cut else self.stop_reason, model=self.model)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
