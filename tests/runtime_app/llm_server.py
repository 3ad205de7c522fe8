"""A local LLM server for tests and benchmarks speaking both wire protocols: OpenAI-compatible chat completions
(`/v1/chat/completions`, base_url f"{url}/v1") and Anthropic's Messages API (`/v1/messages`, base_url url), streamed
as real SSE chunks when the request says `stream: true`, else one JSON body. Replies are scripted (FIFO) or made by a
responder; uvicorn in a thread, so a few hundred concurrent connections are fine."""
from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import uvicorn


@dataclass
class Reply:
    """One scripted answer. `tool_calls` are (name, raw arguments text); `status` other than 200 sends an error
    body in the protocol's format (`content`, if any, is its message); `stall` sends the headers and the first
    chunk, then hangs until the client goes away; `raw` is sent verbatim as the body; `stream` forces a streamed
    (True) or plain JSON (False) answer whatever the request asked."""

    content: str = ""
    tool_calls: list[tuple[str, str]] | tuple = ()
    status: int = 200
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    stall: bool = False
    raw: bytes | None = None
    usage: tuple[int, int] = (10, 5)
    stream: bool | None = None


def text(s: str) -> Reply:
    return Reply(content=s)


def call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[(name, json.dumps(args))])


_ids = itertools.count(1)


def _call_id(prefix: str) -> str:
    return f"{prefix}{next(_ids)}{uuid.uuid4().hex[:12]}"


def _pieces(s: str, parts: int = 3, most: int = 16384) -> list[str]:
    """`s` in several chunks (at least `parts` when long enough, none longer than `most`)."""
    if not s:
        return []
    size = min(most, max(1, -(-len(s) // parts)))
    return [s[i:i + size] for i in range(0, len(s), size)]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


# --- OpenAI-compatible ----------------------------------------------------------------------------------------------
def openai_error(status: int, message: str) -> dict:
    kind = {401: "invalid_request_error", 403: "permission_error", 404: "not_found_error",
            429: "rate_limit_error"}.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def openai_json(reply: Reply, model: str) -> dict:
    calls = [{"id": _call_id("call_"), "type": "function", "function": {"name": name, "arguments": args}}
             for name, args in reply.tool_calls]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": reply.usage[0], "completion_tokens": reply.usage[1],
                      "total_tokens": sum(reply.usage)}}


def openai_chunks(reply: Reply, model: str, include_usage: bool) -> list[bytes]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model, "system_fingerprint": None}

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in _pieces(reply.content)]
    for index, (name, args) in enumerate(reply.tool_calls):
        out.append(chunk({"tool_calls": [{"index": index, "id": _call_id("call_"), "type": "function",
                                          "function": {"name": name, "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _pieces(args)]
    out.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    if include_usage:
        out.append(_sse({**base, "choices": [], "usage": {"prompt_tokens": reply.usage[0],
                                                          "completion_tokens": reply.usage[1],
                                                          "total_tokens": sum(reply.usage)}}))
    out.append(_sse("[DONE]"))
    return out


# --- Anthropic ------------------------------------------------------------------------------------------------------
def anthropic_error(status: int, message: str) -> dict:
    kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
            404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
            529: "overloaded_error"}.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _anthropic_input(args: str) -> Any:
    try:
        return json.loads(args)
    except ValueError:
        return args  # not what Anthropic would send, but lets a test put malformed arguments in a JSON reply


def anthropic_json(reply: Reply, model: str) -> dict:
    content: list[dict] = [{"type": "text", "text": reply.content}] if reply.content else []
    content += [{"type": "tool_use", "id": _call_id("toolu_"), "name": name, "input": _anthropic_input(args)}
                for name, args in reply.tool_calls]
    return {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if reply.tool_calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": reply.usage[0], "output_tokens": reply.usage[1]}}


def anthropic_chunks(reply: Reply, model: str) -> list[bytes]:
    out = [_sse({"type": "message_start", "message": {
        "id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": reply.usage[0], "output_tokens": 1}}},
        "message_start")]
    index = 0
    if reply.content:
        out.append(_sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                        "content_block_start"))
        out.append(_sse({"type": "ping"}, "ping"))
        out += [_sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
                     "content_block_delta") for piece in _pieces(reply.content)]
        out.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        index = 1
    for name, args in reply.tool_calls:
        out.append(_sse({"type": "content_block_start", "index": index, "content_block": {
            "type": "tool_use", "id": _call_id("toolu_"), "name": name, "input": {}}}, "content_block_start"))
        out += [_sse({"type": "content_block_delta", "index": index,
                      "delta": {"type": "input_json_delta", "partial_json": piece}}, "content_block_delta")
                for piece in [""] + _pieces(args)]
        out.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        index += 1
    out.append(_sse({"type": "message_delta", "delta": {"stop_reason": "tool_use" if reply.tool_calls else "end_turn",
                                                        "stop_sequence": None},
                     "usage": {"output_tokens": reply.usage[1]}}, "message_delta"))
    out.append(_sse({"type": "message_stop"}, "message_stop"))
    return out


# --- the server -----------------------------------------------------------------------------------------------------
class _Uvicorn(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: list | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


class LLMServer:
    """The server. `requests` holds every request body received (parsed JSON) plus its "path" and "headers";
    `stalled` is set once a stalling reply has sent its first chunk."""

    def __init__(self, *, latency: float = 0.0) -> None:
        self.latency = latency
        self.url = ""
        self.requests: list[dict] = []
        self.responder: Callable[[dict], Reply] | None = None
        self.stalled = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests it was answering at once
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server: _Uvicorn | None = None
        self._thread: threading.Thread | None = None

    # -- control
    def start(self) -> "LLMServer":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        ready = threading.Event()
        config = uvicorn.Config(self._app, lifespan="off", log_level="warning", access_log=False, http="h11",
                                ws="none", loop="asyncio", interface="asgi3", backlog=4096, timeout_keep_alive=5,
                                timeout_graceful_shutdown=2)
        self._server = _Uvicorn(config, ready)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="llm-server",
                                        daemon=True)
        self._thread.start()
        if not ready.wait(15):
            raise RuntimeError("the LLM test server did not start")
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(15)
            self._server = self._thread = None

    def __enter__(self) -> "LLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def _next(self, record: dict) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.responder(record) if self.responder is not None else text("ok")

    # -- the ASGI app
    async def _app(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self._handle(scope, receive, send)
        except asyncio.CancelledError:  # stop() while a reply still waits: end quietly
            return
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _handle(self, scope: dict, receive: Callable, send: Callable) -> None:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        try:
            body = json.loads(b"".join(chunks) or b"{}")
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {"body": body}
        path = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        record = {**body, "path": path, "headers": headers}
        with self._lock:
            self.requests.append(record)
        if path.endswith("/chat/completions"):
            protocol = "openai"
        elif path.endswith("/messages"):
            protocol = "anthropic"
        else:
            await self._send(send, 404, {"content-type": "application/json"}, [b'{"error": "no such endpoint"}'])
            return
        reply = self._next(record)
        if self.latency + reply.delay > 0 and await self._client_left(receive, self.latency + reply.delay):
            return
        stream = bool(body.get("stream")) if reply.stream is None else reply.stream
        model = str(body.get("model", "test-model"))
        extra = {k.lower(): str(v) for k, v in reply.headers.items()}
        if reply.raw is not None:
            kind = "text/event-stream" if stream else "application/json"
            await self._send(send, reply.status, {"content-type": kind, **extra}, [reply.raw], receive, reply.stall)
        elif reply.status != 200:
            message = reply.content or f"test error {reply.status}"
            error = openai_error(reply.status, message) if protocol == "openai" else \
                anthropic_error(reply.status, message)
            await self._send(send, reply.status, {"content-type": "application/json", **extra},
                             [json.dumps(error).encode()])
        elif stream:
            parts = openai_chunks(reply, model, bool((body.get("stream_options") or {}).get("include_usage"))) \
                if protocol == "openai" else anthropic_chunks(reply, model)
            first = 4 if protocol == "anthropic" and reply.content else 2  # through the first text delta
            await self._send(send, 200, {"content-type": "text/event-stream", "cache-control": "no-cache", **extra},
                             parts, receive, reply.stall, first=first)
        else:
            document = openai_json(reply, model) if protocol == "openai" else anthropic_json(reply, model)
            data = json.dumps(document).encode()
            await self._send(send, 200, {"content-type": "application/json", **extra},
                             [data[:len(data) // 2], data[len(data) // 2:]], receive, reply.stall, first=1)

    @staticmethod
    async def _client_left(receive: Callable, seconds: float | None) -> bool:
        """Wait `seconds` (None: for ever) or until the client closes the connection; True if it did."""
        async def disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        waiter = asyncio.ensure_future(disconnect())
        try:
            done, _ = await asyncio.wait({waiter}, timeout=seconds)
            return bool(done)
        finally:
            waiter.cancel()

    async def _send(self, send: Callable, status: int, headers: dict, parts: list[bytes],
                    receive: Callable | None = None, stall: bool = False, first: int = 1) -> None:
        """Send `parts` as separate body chunks; a stall sends the first `first` (for a stream: up to the first
        text) and then waits for the client to go away."""
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]})
        if stall and receive is not None:
            for part in parts[:first]:
                await send({"type": "http.response.body", "body": part, "more_body": True})
            self.stalled.set()
            await self._client_left(receive, None)
            return
        for part in parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
