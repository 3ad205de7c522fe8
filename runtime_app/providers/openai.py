"""The OpenAI-compatible chat-completions protocol (OpenAI, Ollama, vLLM, llama.cpp, LiteLLM, …):
`POST {base_url}/chat/completions`, streamed, its chunks (text deltas, tool-call fragments by index, usage in the
last chunk) folded into one ChatReply."""
from __future__ import annotations

import json
import uuid
from typing import Any

from runtime_app.providers.base import (ChatMessage, ChatReply, ChatRequest, ProviderConfig, ProviderError,
                                        ToolCallRequest, Usage)
from runtime_app.providers.transport import STOP_CUT, error_message, load_json, stream_post


def chat(config: ProviderConfig, request: ChatRequest) -> ChatReply:
    """One chat completion, streamed (request.on_text gets the text as it comes). Raises ProviderError."""
    headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    reply = _Reply(request)
    cut = stream_post(config, request, endpoint(config.base_url), {**headers, **config.extra_headers},
                      request_body(request), reply)
    return reply.finish(cut)


def endpoint(base_url: str) -> str:
    return base_url.rstrip("/") + "/chat/completions"


def request_body(request: ChatRequest) -> dict[str, Any]:
    """The wire body: system prompt first, tools as functions, usage asked for in the stream's last chunk."""
    body: dict[str, Any] = {"model": request.model, "messages": wire_messages(request.system, request.messages),
                            "max_tokens": request.max_tokens, "stream": True,
                            "stream_options": {"include_usage": True}}
    if request.tools:
        body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                           "parameters": t.parameters}} for t in request.tools]
    return body


def wire_messages(system: str, messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            wire: dict[str, Any] = {"role": "assistant", "content": message.content or None}
            if message.tool_calls:
                wire["tool_calls"] = [{"id": call.id, "type": "function",
                                       "function": {"name": call.name, "arguments": _sendable(call.arguments)}}
                                      for call in message.tool_calls]
            elif not message.content:
                wire["content"] = ""
            out.append(wire)
        elif message.role == "tool":
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        else:
            raise ProviderError("bad_request", f"unknown message role {message.role[:20]!r}")
    return out


def _sendable(arguments: str) -> str:
    """The model's arguments as it sent them when they are a JSON object; "{}" when not (several servers parse
    them and refuse the whole request otherwise; the tool result already told the model what was wrong)."""
    try:
        return arguments if isinstance(json.loads(arguments), dict) else "{}"
    except (ValueError, TypeError):
        return "{}"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class _Reply:
    """The reply being assembled from stream chunks (or from one JSON completion)."""

    def __init__(self, request: ChatRequest) -> None:
        self.on_text = request.on_text
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.by_index: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason = ""
        self.model = ""
        self.seen = self.done = False

    def event(self, name: str, data: str) -> bool:
        if data.strip() == "[DONE]":
            self.done = True
            return True
        chunk = load_json(data)
        if not isinstance(chunk, dict):
            raise ProviderError("bad_response", "a stream chunk is not a JSON object")
        if name == "error" or "error" in chunk:
            raise ProviderError("server_error", f"the provider failed mid-stream: {error_message(data.encode())}")
        self.seen = True
        self._common(chunk)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise ProviderError("bad_response", "a stream chunk's delta is not an object")
            self._text(delta.get("content"))
            for position, fragment in enumerate(delta.get("tool_calls") or ()):
                if isinstance(fragment, dict):
                    self._fragment(position, fragment)
            if isinstance(choice.get("finish_reason"), str):
                self.stop_reason = choice["finish_reason"]
        return False

    def document(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise ProviderError("bad_response", "the reply is not a JSON object")
        if "error" in obj:
            raise ProviderError("server_error", f"the provider failed: {error_message(json.dumps(obj).encode())}")
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ProviderError("bad_response", "the reply has no choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ProviderError("bad_response", "the reply's choice has no message")
        self._common(obj)
        self._text(message.get("content"))
        for position, call in enumerate(message.get("tool_calls") or ()):
            if isinstance(call, dict):
                self._fragment(position, {**call, "index": position})
        self.stop_reason = choices[0].get("finish_reason") if isinstance(choices[0].get("finish_reason"), str) else ""
        self.seen = self.done = True

    def _common(self, obj: dict[str, Any]) -> None:
        if isinstance(obj.get("model"), str):
            self.model = obj["model"]
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]

    def _text(self, text: Any) -> None:
        if isinstance(text, str) and text:
            self.text.append(text)
            if self.on_text is not None:
                self.on_text(text)

    def _fragment(self, position: int, fragment: dict[str, Any]) -> None:
        """Fragments of one call share an `index`; parallel calls have distinct ones. A server that sends every
        call whole at index 0 is told apart by the new id."""
        index = fragment.get("index") if isinstance(fragment.get("index"), int) else position
        call_id = fragment.get("id") if isinstance(fragment.get("id"), str) else ""
        slot = self.by_index.get(index)
        if slot is None or (call_id and slot["id"] and call_id != slot["id"]):
            slot = self.by_index[index] = {"id": call_id, "name": "", "arguments": []}
            self.calls.append(slot)
        elif call_id and not slot["id"]:
            slot["id"] = call_id
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            return
        if isinstance(function.get("name"), str) and not slot["name"]:
            slot["name"] = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            slot["arguments"].append(arguments)
        elif isinstance(arguments, dict):  # some servers send the object itself
            slot["arguments"].append(json.dumps(arguments))

    def finish(self, cut: bool) -> ChatReply:
        if not cut and not self.done and not self.stop_reason:
            if not self.seen:
                raise ProviderError("bad_response", "the provider's stream held no completion")
            raise ProviderError("connection", "the stream ended before the reply was complete")
        calls = tuple(ToolCallRequest(id=slot["id"] or new_call_id(), name=slot["name"],
                                      arguments="".join(slot["arguments"]) or "{}") for slot in self.calls)
        return ChatReply(content="".join(self.text), tool_calls=calls,
                         usage=Usage(input_tokens=_count(self.usage.get("prompt_tokens")),
                                     output_tokens=_count(self.usage.get("completion_tokens"))),
                         stop_reason=STOP_CUT if cut else self.stop_reason, model=self.model)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
