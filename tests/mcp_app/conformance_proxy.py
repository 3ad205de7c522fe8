"""A token-injecting HTTP forwarder for the MCP conformance suite (docs/mcp-conformance.md).

The suite connects to a bare URL and has no option to send an `Authorization` header; goclaw answers every request
without an agent token with 401. This forwarder plays the part of a client *configured with the agent's token*: it
adds `Authorization: Bearer <token>` to each request that carries none and changes nothing else. Request line,
every other header (Host, Origin, Mcp-Session-Id, MCP-Protocol-Version, Accept …) and the body reach goclaw as
the suite wrote them, so the Host/Origin (DNS-rebinding) and header-validation scenarios still test goclaw itself.
Responses are piped back byte for byte as they arrive, so SSE streams stay streams.

It works on the byte stream of each connection: requests are parsed only far enough to find where each one ends
(Content-Length or chunked framing) and to insert the header after the request line; the answers are not parsed at
all (HTTP/1.1 answers come back in request order on the same connection). A request the forwarder cannot frame is
answered 400 by the forwarder itself and the connection closed; such an answer names the forwarder, so it is
never mistaken for goclaw's."""
from __future__ import annotations

import asyncio
import threading

MAX_HEAD = 64 * 1024  # bytes of request line + headers; the suite sends a few hundred


class FramingError(Exception):
    """The request cannot be framed (no end of head, conflicting or malformed lengths)."""


def with_token(head: bytes, token: str) -> bytes:
    """The request head (request line + header lines, ending in CRLF CRLF) with an Authorization header added after
    the request line, unless the request already carries one (then it is left exactly as it was)."""
    lines = head.split(b"\r\n")
    if any(line.split(b":", 1)[0].strip().lower() == b"authorization" for line in lines[1:]):
        return head
    return b"\r\n".join([lines[0], b"Authorization: Bearer " + token.encode("ascii"), *lines[1:]])


def _framing(head: bytes) -> tuple[str, int]:
    """("length", n) or ("chunked", 0) for the body that follows `head` (RFC 9112 §6.3 for requests: no
    Content-Length and no chunked Transfer-Encoding means no body)."""
    lengths, encodings = set(), []
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            lengths.add(value.strip())
        elif name == b"transfer-encoding":
            encodings += [part.strip().lower() for part in value.split(b",")]
    if encodings:
        if encodings[-1] != b"chunked" or lengths:
            raise FramingError("unsupported Transfer-Encoding")
        return "chunked", 0
    if len(lengths) > 1 or (lengths and not next(iter(lengths)).isdigit()):
        raise FramingError("invalid Content-Length")
    return "length", int(next(iter(lengths))) if lengths else 0


async def _copy_exactly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, size: int) -> None:
    while size:
        data = await reader.read(min(size, 65536))
        if not data:
            raise asyncio.IncompleteReadError(b"", size)
        writer.write(data)
        size -= len(data)
        await writer.drain()


async def _copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Forward a chunked body unchanged, chunk by chunk, through its last chunk and trailer."""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        writer.write(size_line)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise FramingError("invalid chunk size") from exc
        if size == 0:
            while True:  # trailer fields, then the empty line
                line = await reader.readuntil(b"\r\n")
                writer.write(line)
                if line == b"\r\n":
                    await writer.drain()
                    return
        await _copy_exactly(reader, writer, size + 2)  # the chunk and its CRLF


class TokenProxy:
    """Listens on 127.0.0.1 (a loopback URL, as the DNS-rebinding scenario requires) in a thread of its own and
    forwards to `upstream_port` on 127.0.0.1 with the token added. Use as a context manager; `.url` is the MCP URL
    to give the suite."""

    def __init__(self, upstream_port: int, token: str, path: str = "/mcp"):
        self.upstream_port, self.token, self.path = upstream_port, token, path
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="conformance-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._open: dict[asyncio.Task, list[asyncio.StreamWriter]] = {}  # each connection's task and its two ends

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def __enter__(self) -> "TokenProxy":
        self._thread.start()
        self._started.wait(10)
        assert self.port, "the conformance proxy did not start"
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _shutdown(self) -> None:
        """Stop listening, hang up the connections still open (a client's idle keep-alive ones: each connection's
        task then ends as on any hang-up), stop the loop."""
        self._server.close()
        for writers in self._open.values():
            for writer in writers:
                writer.transport.abort()
        if self._open:
            await asyncio.wait(list(self._open), timeout=5)
        self._loop.call_soon(self._loop.stop)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        ends = self._open[asyncio.current_task()] = [client_writer]
        try:
            await self._forward(client_reader, client_writer, ends)
        finally:
            del self._open[asyncio.current_task()]

    async def _forward(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                       ends: list[asyncio.StreamWriter]) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.write(_own_answer(502, "the conformance proxy cannot reach goclaw"))
            await _close(client_writer)
            return
        ends.append(upstream_writer)
        answers = asyncio.ensure_future(_pipe(upstream_reader, client_writer))
        try:
            while True:
                try:
                    head = await client_reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        raise FramingError("connection closed inside a request head") from exc
                    break  # the client closed between requests
                except asyncio.LimitOverrunError as exc:
                    raise FramingError("request head too long") from exc
                kind, size = _framing(head)
                upstream_writer.write(with_token(head, self.token))
                if kind == "chunked":
                    await _copy_chunked(client_reader, upstream_writer)
                else:
                    await _copy_exactly(client_reader, upstream_writer, size)
                await upstream_writer.drain()
        except FramingError as exc:
            answers.cancel()
            client_writer.write(_own_answer(400, f"the conformance proxy could not frame the request: {exc}"))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if upstream_writer.can_write_eof():
                try:
                    upstream_writer.write_eof()  # the answers still in flight are delivered
                except OSError:
                    pass
            try:
                await answers
            except asyncio.CancelledError:
                pass
            await _close(upstream_writer)
            await _close(client_writer)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy everything as it arrives (an SSE event is flushed to the client the moment goclaw sends it)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        await _close(writer)


async def _close(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass


def _own_answer(status: int, message: str) -> bytes:
    body = ('{"error": {"code": "conformance_proxy", "message": "%s"}}' % message).encode()
    reason = {400: "Bad Request", 502: "Bad Gateway"}[status]
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\nX-Conformance-Proxy: 1\r\n\r\n").encode() + body
