"""One streamed POST to an LLM provider, shared by the protocol clients: through the outbound guard (its client's
own server-sent-events reader, `client.sse`), cancellable at any point (a watcher shuts the socket down under a
stalled read), capped in what it reads, every failure a short scrubbed ProviderError with a code. The protocol
modules only build bodies and turn events into a ChatReply."""
from __future__ import annotations

import email.utils
import json
import logging
import re
import socket
import threading
import time
from typing import Any, Protocol

from goclaw import outbound
from runtime_app.providers.base import ChatRequest, ProviderConfig, ProviderError

logger = logging.getLogger("goclaw.runtime.providers")

# A hostile or broken server may send without end: what we keep of one reply is capped (event data of a stream,
# bytes of a JSON document); a stream past it is cut (the reply so far is kept), a JSON document past it refused.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
MAX_ERROR_BODY_BYTES = 64 * 1024
ERROR_MESSAGE_CHARS = 300
STOP_CUT = "response_too_large"  # stop_reason of a reply cut at MAX_RESPONSE_BYTES
PRIVATE_NETWORK_HINT = "allow private networks for this LLM provider to reach it"
CANCEL_POLL_SECONDS = 0.02


class Sink(Protocol):
    """What a protocol client gives the transport: where server-sent events and a plain JSON reply go."""

    def event(self, name: str, data: str) -> bool:
        """One SSE event; True when the reply is complete (nothing more needs reading)."""

    def document(self, obj: Any) -> None:
        """A whole non-streamed JSON reply."""


def stream_post(config: ProviderConfig, request: ChatRequest, url: str, headers: dict[str, str], body: dict[str, Any],
                sink: Sink) -> bool:
    """POST `body` as JSON to `url` and feed the answer to `sink` (server-sent events, or one JSON document when the
    server answers application/json). Returns True when the reply was cut at MAX_RESPONSE_BYTES. Raises
    ProviderError (cancelled as soon as request.cancel is set, whatever the request was doing)."""
    cancel = request.cancel
    if cancel is not None and cancel.is_set():
        raise ProviderError("cancelled", "cancelled")
    if problem := outbound.url_syntax_problem(url):
        raise ProviderError("bad_request", f"the provider's base URL is not usable: {trim(problem, 120)}")
    watch = _Watch(cancel)
    headers = {"content-type": "application/json", "accept": "text/event-stream, application/json",
               # compressed replies could inflate past any cap; a fresh connection per request lets the watcher
               # always hold the socket a stalled read is waiting on
               "accept-encoding": "identity", "connection": "close", **headers}
    client = _clients.take(config.allow_private_network)
    _watcher.add(watch)
    try:
        try:
            with client.sse(url, method="POST", content=json.dumps(body).encode(), headers=headers,
                            timeout=outbound.Timeout(config.timeout), extensions={"trace": watch.trace},
                            max_event_size=MAX_RESPONSE_BYTES) as source:
                return _read(source, sink, watch, config)
        except outbound.HTTPError as exc:
            if watch.cancelled():
                raise ProviderError("cancelled", "cancelled") from None
            raise transport_error(exc, url, config) from None
    except ProviderError as exc:
        if watch.cancelled() and exc.code != "cancelled":
            raise ProviderError("cancelled", "cancelled") from None
        raise ProviderError(exc.code, scrub(exc.message, config), status=exc.status, retry_after=exc.retry_after,
                            permanent=exc.permanent) from None
    finally:
        _watcher.remove(watch)
        watch.release()
        _clients.give_back(config.allow_private_network, client)


def _read(source: Any, sink: Sink, watch: "_Watch", config: ProviderConfig) -> bool:
    response = source.response
    watch.hold(response)
    if response.status_code != 200:
        raise status_error(response, _read_capped(response, MAX_ERROR_BODY_BYTES, watch)[0], config)
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ProviderError("bad_response", f"the provider sent a {trim(encoding, 20)}-compressed reply although "
                                            "none was asked for")
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        data, cut = _read_capped(response, MAX_RESPONSE_BYTES, watch)
        if cut:
            raise ProviderError("bad_response", f"the reply is larger than {MAX_RESPONSE_BYTES} bytes")
        sink.document(load_json(data))
        return False
    if content_type != "text/event-stream":
        raise ProviderError("bad_response", f"the provider answered {trim(content_type, 40) or 'no content type'}, "
                                            "not an event stream or JSON")
    got = 0
    try:
        for sse in source:
            watch.check()
            got += len(sse.data) + len(sse.event)
            if got > MAX_RESPONSE_BYTES:
                return True  # the event past the cap is dropped, the reply so far kept
            if sink.event(sse.event, sse.data):
                return False
            watch.check()
    except outbound.HTTPError as exc:
        if "SSEError" in {cls.__name__ for cls in type(exc).__mro__} and not watch.cancelled():
            return True  # one event alone past the cap (the only SSEError once the content type is right)
        raise
    watch.check()
    return False


def _read_capped(response: Any, cap: int, watch: "_Watch") -> tuple[bytes, bool]:
    parts, got = [], 0
    for chunk in response.iter_raw():
        watch.check()
        parts.append(chunk[:cap - got])
        got += len(chunk)
        if got > cap:
            return b"".join(parts), True
    return b"".join(parts), False


def load_json(data: str | bytes) -> Any:
    """Parse what the server sent, or bad_response."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ProviderError("bad_response", "the provider's reply is not valid JSON") from None


# --- errors ---------------------------------------------------------------------------------------------------------
def status_error(response: Any, body: bytes, config: ProviderConfig) -> ProviderError:
    """The ProviderError for a non-200 answer, with the server's own message (trimmed)."""
    status = response.status_code
    said = error_message(body)
    detail = f": {said}" if said else ""
    if status in (401, 403):
        return ProviderError("unauthorized", f"the provider refused the API key (HTTP {status}){detail}", status=status)
    if status == 404:
        return ProviderError("model_not_found", f"model or endpoint not found (HTTP 404){detail}", status=status)
    retry_after = parse_retry_after(response.headers.get("retry-after")) if status in (429, 503) else None
    if status == 429:
        return ProviderError("rate_limited", f"rate limited (HTTP 429){detail}", status=status, retry_after=retry_after)
    if status >= 500:
        return ProviderError("server_error", f"provider server error (HTTP {status}){detail}", status=status,
                             retry_after=retry_after)
    if 300 <= status < 400:
        return ProviderError("bad_response", f"the provider redirected (HTTP {status}), redirects are not followed; "
                                             "check the base URL", status=status)
    return ProviderError("bad_request", f"the provider rejected the request (HTTP {status}){detail}", status=status)


def error_message(body: bytes) -> str:
    """The message of an error body in any common shape ({"error": {"message"}}, {"error": "…"}, {"message"},
    {"detail"}, plain text), whitespace collapsed and trimmed."""
    text = body.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        found = obj.get("error", obj.get("message", obj.get("detail")))
        if isinstance(found, dict):
            found = found.get("message") or found.get("type") or found
        text = found if isinstance(found, str) else json.dumps(found)
    return trim(text)


def trim(text: str, limit: int = ERROR_MESSAGE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def parse_retry_after(value: str | None) -> float | None:
    """`retry-after` as seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if seconds == seconds and seconds != float("inf") else None


def transport_error(exc: BaseException, url: str, config: ProviderConfig) -> ProviderError:
    """A failed exchange (refused by the guard, unreachable, timed out, broken mid-stream) as a ProviderError."""
    if (refused := outbound.refusal_of(exc)) is not None:
        return ProviderError("connection", str(refused), permanent=True)  # asking again gets the same answer
    kinds = {cls.__name__ for cls in type(exc).__mro__}  # httpx2's classes, not importable outside goclaw.outbound
    host = _host(url)
    if "TimeoutException" in kinds:
        return ProviderError("timeout", f"no answer from {host} within {config.timeout:g}s")
    if "ConnectError" in kinds:
        return ProviderError("connection", f"cannot connect to {host}: {trim(str(exc), 120) or type(exc).__name__}")
    if "ProtocolError" in kinds or "NetworkError" in kinds or "StreamError" in kinds:
        return ProviderError("connection", f"the connection to {host} broke while reading the reply")
    return ProviderError("connection", f"request to {host} failed: {type(exc).__name__}")


def _host(url: str) -> str:
    match = re.match(r"^[a-z][a-z0-9+.-]*://(?:[^@/]*@)?([^/?#]*)", url, re.I)  # never the userinfo
    return match.group(1) if match else "the provider"


def scrub(message: str, config: ProviderConfig) -> str:
    """`message` without the API key (verbatim or transformed); an error never carries it."""
    if not config.api_key or not message:
        return message
    from tools_app.security.scrub.transforms import scrub_known_values

    return scrub_known_values(message, [config.api_key])[0]


# --- cancellation ---------------------------------------------------------------------------------------------------
class _Watch:
    """One request's cancel event and the socket it reads from: shutting the socket down wakes a read blocked on
    it at once (closing it from another thread would not)."""

    def __init__(self, cancel: threading.Event | None) -> None:
        self.cancel = cancel
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._done = False

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def check(self) -> None:
        if self.cancelled():
            raise ProviderError("cancelled", "cancelled")

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: keeps the socket of the connection just made (TCP, then TLS over it)."""
        if name.endswith((".connect_tcp.complete", ".start_tls.complete")):
            self._keep(info.get("return_value"))

    def hold(self, response: Any) -> None:
        self._keep(response.extensions.get("network_stream"))

    def _keep(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with self._lock:
                if not self._done:
                    self._socket = sock
        if self.cancelled():
            self.abort()

    def abort(self) -> None:
        with self._lock:  # release() waits for this, so the socket is never shut after its owner closed it
            if self._socket is not None:
                try:
                    socket.socket.shutdown(self._socket, socket.SHUT_RDWR)  # the plain one, also under TLS
                except OSError:
                    pass
                self._socket = None

    def release(self) -> None:
        with self._lock:
            self._done, self._socket = True, None


class _CancelWatcher:
    """One thread for the whole process that shuts down the socket of every request whose cancel event is set
    (threading.Event cannot be waited on together, so it looks every CANCEL_POLL_SECONDS while any is in flight)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: set[_Watch] = set()
        self._running = False

    def add(self, watch: _Watch) -> None:
        if watch.cancel is None:
            return
        with self._lock:
            self._watches.add(watch)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="llm-cancel-watcher", daemon=True).start()

    def remove(self, watch: _Watch) -> None:
        with self._lock:
            self._watches.discard(watch)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._watches:
                    self._running = False
                    return
                watches = list(self._watches)
            for watch in watches:
                if watch.cancelled():
                    watch.abort()
            time.sleep(CANCEL_POLL_SECONDS)


_watcher = _CancelWatcher()


# --- clients --------------------------------------------------------------------------------------------------------
class _ClientPool:
    """Guarded clients kept for reuse: building one loads the CA bundle (tens of ms of CPU), too much per request
    when hundreds run at once. A client serves one request at a time; at most `keep` idle ones stay."""

    def __init__(self, keep: int = 64) -> None:
        self._lock = threading.Lock()
        self._idle: dict[bool, list[Any]] = {True: [], False: []}
        self._keep = keep

    def take(self, allow_private: bool) -> Any:
        with self._lock:
            if self._idle[allow_private]:
                return self._idle[allow_private].pop()
        target = outbound.Target(allow_private=allow_private, hint=PRIVATE_NETWORK_HINT)
        return outbound.client(target, follow_redirects=False)

    def give_back(self, allow_private: bool, client: Any) -> None:
        with self._lock:
            if len(self._idle[allow_private]) < self._keep:
                self._idle[allow_private].append(client)
                return
        client.close()


_clients = _ClientPool()
