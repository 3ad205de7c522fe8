"""The MCP connection manager: one daemon thread per process runs one asyncio loop that holds every connection.

A connection is keyed by `ServerConfig.key` (so one caller's credentials never serve another) and owned by one
long-lived task: it enters `mcp.Client` (anyio cancel scopes must be exited by the task that entered them),
lists the tools, then watches health and idleness until it is closed. Calls run as their own tasks on the loop
and use the entered client; cancelling a call's scope makes the SDK send `notifications/cancelled` for it (or, on
the 2026 streamable-HTTP wire, abort its POST), so the server stops the work.

Health: a ping every MCP_HEALTH_INTERVAL_SECONDS; 3 failures in a row (or a call that finds the transport gone)
mark the connection disconnected; reconnects back off from MCP_RECONNECT_BASE_SECONDS doubling to
MCP_RECONNECT_MAX_SECONDS, at most MCP_RECONNECT_MAX_ATTEMPTS times, then a cooldown of
MCP_RECONNECT_COOLDOWN_SECONDS during which calls fail fast (`bridge_reconnect` ends it). Every change is
reported to `mcp_app.bridge.hooks`.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import logging
import os
import sys
import threading
import time
import warnings
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from goclaw import outbound
from goclaw.errors import exception_leaves
from mcp_app.bridge import hooks
from mcp_app.config import BridgeError, ServerConfig, ToolDefinition

logger = logging.getLogger("mcp_app.bridge")
T = TypeVar("T")

CLIENT_NAME = "goclaw"
HEALTH_FAILURES_TO_DISCONNECT = 3
_LIST_PAGE_CAP = 100
_ENV = "/usr/bin/env"

CONNECTED, DEGRADED, DISCONNECTED, COOLDOWN = "connected", "degraded", "disconnected", "cooldown"
CONNECTING, CLOSED = "connecting", "closed"  # internal states, never reported as health


def setting(name: str, default: float) -> float:
    """A bridge setting from Django settings (tests override them small), else the default."""
    try:
        from django.conf import settings

        if settings.configured:
            return float(getattr(settings, name, default))
    except Exception:  # Django missing or misconfigured: the defaults still work
        pass
    return float(default)


def _now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# --- errors -----------------------------------------------------------------------------------------------

class _Dead(Exception):
    """The connection's transport is gone (raised inside its task to leave the client and reconnect)."""


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups, which anyio task groups wrap errors in."""
    return exception_leaves(exc)[0]


_TRANSPORT_ERRORS = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError,
                     EOFError, httpx2.TransportError)


def _is_transport_gone(exc: BaseException) -> bool:
    """Does this error mean the transport (not just one request) is gone?"""
    exc = _leaf(exc)
    if isinstance(exc, MCPError):
        return exc.code == types.CONNECTION_CLOSED or "session terminated" in str(exc).lower()
    return isinstance(exc, _TRANSPORT_ERRORS)


def _describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# --- one connection ---------------------------------------------------------------------------------------

class StderrTail:
    """A stdio server's stderr, read by a thread of its own: each line goes to the log (scrubbed, with the server's
    name), the last KEEP bytes are kept for the error a failed start reports (an operator then reads npm's
    `EAI_AGAIN` or `uvx: not found`, not just "closed the connection during the handshake")."""

    KEEP = 2000
    LINE = 500  # longest line logged
    SAID = 1200  # longest stderr ending put in an error (a stored error keeps 2,000 characters)

    def __init__(self, name: str) -> None:
        read_end, write_end = os.pipe()
        self.name, self.writer = name, os.fdopen(write_end, "w")  # the server's stderr
        self._tail, self._ended = b"", threading.Event()
        threading.Thread(target=self._read, args=(read_end,), name="mcp-stderr", daemon=True).start()

    def _read(self, fd: int) -> None:
        from tools_app.security.scrub import scrub_text

        pending = b""
        with os.fdopen(fd, "rb", buffering=0) as stream:
            while chunk := stream.read(65536):
                self._tail = (self._tail + chunk)[-self.KEEP:]
                *lines, pending = (pending + chunk).split(b"\n")
                pending = pending[-self.KEEP:]
                for line in lines:
                    if line.strip():
                        logger.info("MCP server %s stderr: %s", self.name,
                                    scrub_text(line[:self.LINE].decode("utf-8", "replace").rstrip()))
        self._ended.set()

    def started(self) -> None:
        """The process was started (or could not be): this side's copy of the pipe is closed, so the reader sees the
        end once the server's processes have ended."""
        self.writer.close()

    def said(self, wait: float) -> str:
        """What the server last wrote to stderr (waiting up to `wait` seconds for it to end), scrubbed, its last lines."""
        from tools_app.security.scrub import scrub_text

        self._ended.wait(wait)
        text = self._tail.decode("utf-8", "replace")
        said = " | ".join(line.strip() for line in text.splitlines()[-8:] if line.strip())
        return scrub_text(said if len(said) <= self.SAID else "…" + said[-self.SAID:])


class Connection:
    """One live (or reconnecting) session with one server as one caller; all state is touched on the loop."""

    def __init__(self, manager: "BridgeManager", config: ServerConfig) -> None:
        self.manager, self.config, self.key = manager, config, config.key
        self.state = CONNECTING
        self.error, self.error_code = "", "mcp_unavailable"
        self.attempts = 0
        self.client: Client | None = None
        self.closing = False
        self.dead: str | None = None
        self.relist_requested = False
        self.relist_failed = False  # the last tools/list failed (not a lost transport): tried again at the next ping
        self.inflight = 0
        self.last_used = time.monotonic()
        self.next_attempt: float | None = None  # monotonic
        self.cooldown_until: float | None = None  # monotonic
        self.http_status: int | None = None
        self.stderr: StderrTail | None = None  # a stdio server's, for the attempt under way
        self.wake = asyncio.Event()
        self.changed = asyncio.Event()  # replaced on every state change; waiters hold the old one
        self.task: asyncio.Task | None = None

    # -- state and reporting --

    def _set_state(self, state: str) -> None:
        self.state = state
        self.changed.set()
        self.changed = asyncio.Event()

    async def _report(self) -> None:
        """Tell the health listeners (in a worker thread: they write to the database)."""
        if self.state not in (CONNECTED, DEGRADED, DISCONNECTED, COOLDOWN):
            return
        when = self.cooldown_until if self.state == COOLDOWN else self.next_attempt
        payload = {
            "ok": self.state == CONNECTED, "state": self.state, "error": self.config.redact(self.error or ""),
            "attempts": self.attempts,
            "next_attempt_at": (_now_utc() + dt.timedelta(seconds=max(0.0, when - time.monotonic()))
                                if when is not None and self.state in (DISCONNECTED, COOLDOWN) else None),
        }
        for listener in list(hooks.health_listeners):
            try:
                await asyncio.to_thread(listener, self.config.server_id, dict(payload))
            except Exception:
                logger.exception("MCP health listener failed for server %s", self.config.name)

    async def _notify_listing(self, tools: list[ToolDefinition]) -> None:
        for listener in list(hooks.listing_listeners):
            try:
                await asyncio.to_thread(listener, self.config, list(tools))
            except Exception:
                logger.exception("MCP listing listener failed for server %s", self.config.name)

    def mark_dead(self, reason: str) -> None:
        """A call found the transport gone: leave the client and reconnect (once, however many calls saw it)."""
        if self.dead is None and self.client is not None:
            self.dead = reason
            self.wake.set()

    def close(self) -> None:
        self.closing = True
        self.wake.set()

    # -- used by calls --

    async def acquire(self) -> Client:
        """The entered client, waiting while a connect attempt runs; fails fast while backing off or cooling
        down (with `retry_after`)."""
        while True:
            changed = self.changed
            if self.client is not None and self.dead is None and self.state in (CONNECTED, DEGRADED):
                return self.client
            now = time.monotonic()
            if self.state == CLOSED:
                raise BridgeError(f"the connection to {self.config.name} was closed", code="mcp_unavailable")
            if self.state == COOLDOWN and self.cooldown_until is not None:
                raise BridgeError(f"{self.config.name} is unavailable (gave up reconnecting: {self.error}); "
                                  "retry later or reconnect it by hand", code="mcp_unavailable",
                                  retry_after=max(0.0, self.cooldown_until - now))
            if self.state == DISCONNECTED and self.next_attempt is not None and self.next_attempt > now:
                message = self.error if self.error_code != "mcp_unavailable" else \
                    f"{self.config.name} is unavailable: {self.error}"
                raise BridgeError(message, code=self.error_code, retry_after=self.next_attempt - now)
            await changed.wait()

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # -- the connection's own task --

    async def run(self) -> None:
        """Connect, serve, reconnect with backoff, cool down; ends when closed or idle."""
        try:
            while not self.closing:
                try:
                    if await self._connect_and_serve():
                        break  # closed or idle
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if isinstance(_leaf(exc), _Dead):  # was connected: report, then reconnect at once
                        self.attempts = 0
                        self.error, self.error_code = str(_leaf(exc)), "mcp_unavailable"
                        self.next_attempt = time.monotonic()
                        self._set_state(DISCONNECTED)
                        await self._report()
                        continue
                    # a failed connect attempt
                    error = self._classify_connect_error(exc)
                    if self.stderr is not None and (said := await asyncio.to_thread(self.stderr.said, 1.0)):
                        error = BridgeError(f"{error}; its stderr ended with: {said}", code=error.code)
                    self.error, self.error_code = str(error), error.code
                    self.attempts += 1
                    now = time.monotonic()
                    if self.attempts >= setting("MCP_RECONNECT_MAX_ATTEMPTS", 10):
                        self.cooldown_until = now + setting("MCP_RECONNECT_COOLDOWN_SECONDS", 300)
                        self.next_attempt = None
                        self._set_state(COOLDOWN)
                    else:
                        delay = min(setting("MCP_RECONNECT_BASE_SECONDS", 2) * 2 ** (self.attempts - 1),
                                    setting("MCP_RECONNECT_MAX_SECONDS", 60))
                        self.next_attempt = now + delay
                        self._set_state(DISCONNECTED)
                    await self._report()
                if not await self._wait_before_retry():
                    break
        finally:
            self.client = None
            self._set_state(CLOSED)
            self.manager.forget(self)

    async def _wait_before_retry(self) -> bool:
        """Sleep until the next attempt (or the cooldown's end); False when closed or idle meanwhile."""
        while not self.closing:
            now = time.monotonic()
            if now - self.last_used >= setting("MCP_IDLE_SECONDS", 900) and self.inflight == 0:
                return False
            until = self.cooldown_until if self.state == COOLDOWN else self.next_attempt
            if until is None or now >= until:
                if self.state == COOLDOWN:
                    self.attempts, self.cooldown_until = 0, None
                self._set_state(CONNECTING)
                return True
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=min(until - now, 1.0))
            except TimeoutError:
                pass
        return False

    def _classify_connect_error(self, exc: BaseException) -> BridgeError:
        leaf = _leaf(exc)
        if isinstance(leaf, BridgeError):
            return leaf
        if (refused := outbound.refusal_of(leaf)) is not None:
            return BridgeError(f"refused to connect to {self.config.name}: {str(refused).removeprefix('refused: ')}",
                               code="mcp_network_refused")
        if self.http_status in (401, 403) or (isinstance(leaf, httpx2.HTTPStatusError)
                                              and leaf.response.status_code in (401, 403)):
            status = self.http_status or leaf.response.status_code  # type: ignore[union-attr]
            return BridgeError(f"{self.config.name} refused the credentials (HTTP {status})", code="mcp_auth_failed")
        if isinstance(leaf, TimeoutError):
            return BridgeError(f"{self.config.name} did not answer the handshake in time", code="mcp_unavailable")
        if _is_transport_gone(leaf):
            return BridgeError(f"{self.config.name} closed the connection during the handshake "
                               "(did the server start?)", code="mcp_unavailable")
        if isinstance(leaf, MCPError):
            return BridgeError(f"{self.config.name} failed the handshake: {_describe(leaf)}", code="mcp_protocol_error")
        if isinstance(leaf, OSError) and self.config.transport == "stdio":
            return BridgeError(f"could not start {self.config.name}: {_describe(leaf)}", code="mcp_unavailable")
        return BridgeError(f"could not connect to {self.config.name}: {_describe(leaf)}", code="mcp_unavailable")

    async def _connect_and_serve(self) -> bool:
        """One session: True when it ended because it was closed or idle; raises `_Dead` after a loss and
        the connect error when the attempt failed."""
        self.dead, self.http_status, self.stderr = None, None, None
        async with AsyncExitStack() as stack:
            transport = await self._transport()
            client = Client(transport, cache=None, client_info=types.Implementation(name=CLIENT_NAME, version="1"),
                            message_handler=self._on_message)
            try:
                async with asyncio.timeout(setting("MCP_CONNECT_TIMEOUT_SECONDS", 30)):
                    await stack.enter_async_context(client)
            finally:
                if self.stderr is not None:
                    self.stderr.started()
            self.client = client
            self.attempts, self.error, self.next_attempt, self.cooldown_until = 0, "", None, None
            self._set_state(CONNECTED)
            await self._report()
            async with anyio.create_task_group() as tg:
                if client.protocol_version in _modern_versions():
                    tg.start_soon(self._listen_for_changes, client)
                try:
                    await self._relist(client)
                    return await self._serve(client)
                finally:
                    self.client = None
                    tg.cancel_scope.cancel()
        return True  # pragma: no cover - the block always returns or raises

    async def _relist(self, client: Client) -> None:
        self.relist_requested = self.relist_failed = False
        try:
            with anyio.fail_after(max(self.config.timeout, 1.0)):
                tools = await list_all_tools(client)
        except Exception as exc:
            if _is_transport_gone(exc):
                raise _Dead(f"the connection was lost: {_describe(exc)}") from None
            logger.warning("tools/list failed on %s (trying again at the next health check): %s",
                           self.config.name, _describe(exc))
            self.relist_failed = True
            return
        await self._notify_listing(tools)

    async def _serve(self, client: Client) -> bool:
        """Health pings, re-listing on change announcements, idleness; returns True when closed or idle."""
        interval = setting("MCP_HEALTH_INTERVAL_SECONDS", 30)
        failures = 0
        next_ping = time.monotonic() + interval
        while True:
            now = time.monotonic()
            idle_at = self.last_used + setting("MCP_IDLE_SECONDS", 900)
            self.wake.clear()
            if not (self.closing or self.dead or self.relist_requested):
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=max(0.0, min(next_ping, idle_at) - now))
                except TimeoutError:
                    pass
            if self.closing:
                return True
            if self.dead:
                raise _Dead(self.dead)
            if self.relist_requested:
                await self._relist(client)
            now = time.monotonic()
            if now >= self.last_used + setting("MCP_IDLE_SECONDS", 900) and self.inflight == 0:
                logger.info("closing idle MCP connection to %s", self.config.name)
                return True
            if now >= next_ping:
                try:
                    with anyio.fail_after(min(max(self.config.timeout, 1.0), max(interval, 1.0))):
                        await ping(client)
                    if failures:
                        failures, self.error = 0, ""
                        self._set_state(CONNECTED)
                        await self._report()
                    if self.relist_failed:
                        await self._relist(client)
                except Exception as exc:
                    if isinstance(_leaf(exc), asyncio.CancelledError):
                        raise
                    failures += 1
                    self.error = f"ping failed: {_describe(exc) if not isinstance(_leaf(exc), TimeoutError) else 'no answer'}"
                    if failures >= HEALTH_FAILURES_TO_DISCONNECT or (_is_transport_gone(exc) and failures > 1):
                        raise _Dead(f"{failures} health checks failed ({self.error})") from None
                    self._set_state(DEGRADED)
                    await self._report()
                next_ping = time.monotonic() + interval

    async def _listen_for_changes(self, client: Client) -> None:
        """2026-era servers announce listing changes on a `subscriptions/listen` stream."""
        try:
            async with client.listen(tools_list_changed=True) as sub:
                async for _event in sub:
                    self.relist_requested = True
                    self.wake.set()
        except Exception as exc:  # not offered by the server, or the stream was lost: pings still watch health
            logger.debug("no tools list_changed stream from %s: %s", self.config.name, _describe(exc))

    async def _on_message(self, message: Any) -> None:
        """Handshake-era servers send `notifications/tools/list_changed` on the session."""
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.relist_requested = True
            self.wake.set()
        elif isinstance(message, Exception):
            logger.debug("transport message from %s: %s", self.config.name, _describe(message))
        await anyio.lowlevel.checkpoint()

    # -- transports --

    async def _transport(self) -> Any:
        config = self.config
        if config.transport == "stdio":
            return await asyncio.to_thread(self._stdio_transport)
        if config.transport not in ("sse", "streamable-http"):
            raise BridgeError(f"unknown transport {config.transport!r}", code="mcp_protocol_error")
        from mcp_app.netcheck import target, url_problem

        # a quick look at the URL itself (no DNS); the address actually dialled is checked by the outbound guard
        if problem := url_problem(config.url, allow_private=config.allow_private_network, resolve=False):
            raise BridgeError(f"refused to connect to {config.name}: {problem}", code="mcp_network_refused")
        server_target = target(allow_private=config.allow_private_network)

        async def record_status(response: httpx2.Response) -> None:
            if response.status_code in (401, 403):
                self.http_status = response.status_code

        def http_client(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                        auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
            # every request (and every redirect hop the SDK follows) dials through the outbound guard, no env proxy
            return outbound.async_client(
                server_target, headers={**config.headers_dict(), **(headers or {})}, auth=auth,
                timeout=timeout or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
                event_hooks={"response": [record_status]})

        if config.transport == "sse":
            return sse_client(config.url, headers=config.headers_dict(), httpx_client_factory=http_client)
        return _OwnedHttpTransport(config.url, http_client())

    def _stdio_transport(self) -> Any:
        """stdio: config.env over a minimal safe base (never goclaw's own environment), in the config's sandbox."""
        from sandbox_app.runs import SandboxError, SandboxSpec
        from sandbox_app.services import safe_child_env

        config = self.config
        argv = [config.command, *config.args]
        cwd: str | None = config.workdir or None
        try:
            if config.workdir:  # the server's own directory (created on first launch, private to goclaw)
                Path(config.workdir).mkdir(parents=True, exist_ok=True, mode=0o700)
            env = safe_child_env(config.env_dict())
            if isinstance(config.sandbox, SandboxSpec):
                from sandbox_app.stdio import sandbox_stdio_command

                workdir = Path(config.workdir) if config.workdir else None
                if workdir is None:
                    raise SandboxError("a sandboxed stdio server needs a working directory")
                argv, env = sandbox_stdio_command(argv=argv, spec=config.sandbox, workdir=workdir, env=env,
                                                  limits=config.limits)
                if argv[:1] != [config.command]:
                    cwd = "/"
            elif config.sandbox is not None:
                raise SandboxError("the server's sandbox is not a SandboxSpec")
        except (SandboxError, OSError) as exc:
            raise BridgeError(f"{config.name} may not be started: {exc}", code="mcp_launch_refused") from None
        # The SDK merges HOME/LOGNAME/PATH/SHELL/TERM/USER of goclaw's environment under ours: unset the rest.
        unset = [name for name in DEFAULT_INHERITED_ENV_VARS if name not in env]
        if unset and os.path.exists(_ENV):
            argv = [_ENV, *(arg for name in unset for arg in ("-u", name)), "--", *argv]
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)
        self.stderr = StderrTail(config.name)
        return stdio_client(params, errlog=self.stderr.writer)


class _OwnedHttpTransport:
    """streamable_http_client with our httpx client (headers, no env proxy, status capture), closed with it."""

    def __init__(self, url: str, client: httpx2.AsyncClient) -> None:
        self.url, self.client = url, client
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Any:
        self._stack = AsyncExitStack()
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self.client)
            return await self._stack.enter_async_context(streamable_http_client(self.url, http_client=self.client))
        except BaseException:
            await self._stack.__aexit__(*sys.exc_info())
            raise

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        assert self._stack is not None
        return await self._stack.__aexit__(*exc_info)


def _modern_versions() -> tuple[str, ...]:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return tuple(MODERN_PROTOCOL_VERSIONS)


async def list_all_tools(client: Client) -> list[ToolDefinition]:
    """Every page of tools/list, in the server's order."""
    tools: list[ToolDefinition] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGE_CAP):
        page = await client.list_tools(cursor=cursor)
        tools += [ToolDefinition(name=t.name, description=t.description or "", input_schema=dict(t.input_schema or {}))
                  for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


async def ping(client: Client) -> None:
    """A liveness round trip: `ping` on handshake-era sessions, `server/discover` on 2026-era ones (which
    removed ping)."""
    version = client.protocol_version
    if version in _modern_versions():
        await client.session.send_discover(version)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await client.send_ping()


# --- the manager ------------------------------------------------------------------------------------------

class CallHandle:
    """Lets the calling thread cancel a call running on the loop (the cancel scope exists only once it runs)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.scope: anyio.CancelScope | None = None
        self.cancelled = False

    def cancel(self) -> None:
        """Thread-safe: cancel the call's scope on the loop."""
        self.cancelled = True

        def _cancel() -> None:
            if self.scope is not None:
                self.scope.cancel()

        self.loop.call_soon_threadsafe(_cancel)


class BridgeManager:
    """The per-process loop thread and its connections."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.connections: dict[str, Connection] = {}
        self.thread = threading.Thread(target=self._run_loop, name="mcp-bridge", daemon=True)
        self.thread.start()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    # -- on the loop --

    def connection(self, config: ServerConfig) -> Connection:
        conn = self.connections.get(config.key)
        if conn is None or conn.state == CLOSED:
            conn = Connection(self, config)
            self.connections[config.key] = conn
            conn.task = self.loop.create_task(conn.run(), name=f"mcp:{config.name}:{config.key[:8]}")
        return conn

    def forget(self, conn: Connection) -> None:
        if self.connections.get(conn.key) is conn:
            del self.connections[conn.key]

    async def use(self, config: ServerConfig, timeout: float, handle: CallHandle,
                  work: Callable[[Client], Awaitable[T]]) -> T:
        """Run `work(client)` on the config's connection, bounded by `timeout` and the caller's cancel."""
        scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
        handle.scope = scope
        if handle.cancelled:
            scope.cancel()
        conn: Connection | None = None
        with scope:
            for _ in range(2):  # a connection that closed (idle) under us is replaced once
                conn = self.connection(config)
                conn.touch()
                try:
                    client = await conn.acquire()
                except BridgeError as exc:
                    if conn.state == CLOSED and "was closed" in str(exc):
                        continue
                    raise
                conn.inflight += 1
                try:
                    return await work(client)
                except BridgeError:
                    raise
                except Exception as exc:
                    raise _call_error(conn, exc) from None
                finally:
                    conn.inflight -= 1
                    conn.touch()
            raise BridgeError(f"could not get a connection to {config.name}", code="mcp_unavailable")
        if handle.cancelled:
            raise BridgeError(f"the call to {config.name} was cancelled", code="mcp_cancelled")
        raise BridgeError(f"{config.name} did not answer within {timeout:g}s", code="mcp_timeout")

    async def close_where(self, predicate: Callable[[Connection], bool], wait: float = 10.0) -> None:
        conns = [c for c in self.connections.values() if predicate(c)]
        for conn in conns:
            conn.close()
            self.forget(conn)
        tasks = [c.task for c in conns if c.task is not None and not c.task.done()]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=wait)
            for task in pending:
                task.cancel()

    async def status(self) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        return {key[:12]: {"server": c.config.name, "server_id": c.config.server_id, "transport": c.config.transport,
                           "state": c.state, "attempts": c.attempts, "error": c.error, "inflight": c.inflight,
                           "idle_seconds": round(now - c.last_used, 1), "credentials_of": c.config.credentials_of}
                for key, c in self.connections.items()}

    # -- from other threads --

    def run_sync(self, coro_factory: Callable[[CallHandle], Awaitable[T]], *, timeout: float,
                 cancel: threading.Event | None = None) -> T:
        """Run a coroutine on the loop from a caller thread; the caller's `cancel` event cancels it promptly."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("the MCP bridge's sync API cannot be called from its own loop")
        handle = CallHandle(self.loop)
        future = asyncio.run_coroutine_threadsafe(coro_factory(handle), self.loop)
        backstop = time.monotonic() + timeout + 30.0  # the coroutine bounds itself; this guards a wedged loop
        while True:
            remaining = backstop - time.monotonic()
            try:
                return future.result(timeout=min(0.05, max(remaining, 0.0)) if cancel is not None else max(remaining, 0.0))
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.is_set() and not handle.cancelled:
                    handle.cancel()
                    try:
                        return future.result(timeout=5.0)
                    except concurrent.futures.TimeoutError:
                        future.cancel()
                        raise BridgeError("the call was cancelled", code="mcp_cancelled") from None
                if time.monotonic() >= backstop:
                    future.cancel()
                    raise BridgeError("the MCP bridge did not answer in time", code="mcp_timeout") from None
            except concurrent.futures.CancelledError:
                raise BridgeError("the call was cancelled", code="mcp_cancelled") from None


def _call_error(conn: Connection, exc: BaseException) -> BridgeError:
    """A failed request as a BridgeError; a transport that is gone also sends the connection reconnecting."""
    leaf = _leaf(exc)
    name = conn.config.name
    if conn.http_status in (401, 403):
        return BridgeError(f"{name} refused the credentials (HTTP {conn.http_status})", code="mcp_auth_failed")
    if _is_transport_gone(leaf):
        conn.mark_dead(f"the connection was lost: {_describe(leaf)}")
        return BridgeError(f"the connection to {name} was lost: {_describe(leaf)}", code="mcp_unavailable")
    if isinstance(leaf, MCPError):
        return BridgeError(f"{name} answered with an error: {_describe(leaf)}", code="mcp_protocol_error")
    if isinstance(leaf, ValidationError):
        return BridgeError(f"{name} sent an invalid answer: {_describe(leaf)}", code="mcp_protocol_error")
    if isinstance(leaf, TimeoutError):
        return BridgeError(f"{name} did not answer in time", code="mcp_timeout")
    return BridgeError(f"the call to {name} failed: {_describe(leaf)}", code="mcp_unavailable")


_lock = threading.Lock()
_manager: BridgeManager | None = None


def get_manager() -> BridgeManager:
    """This process's manager, started lazily (and again after a fork: the parent's loop thread is not here)."""
    global _manager
    manager = _manager
    if manager is not None and manager.pid == os.getpid() and manager.thread.is_alive():
        return manager
    with _lock:
        if _manager is None or _manager.pid != os.getpid() or not _manager.thread.is_alive():
            _manager = BridgeManager()
        return _manager


def current_manager() -> BridgeManager | None:
    """The manager if this process started one (close/status must not start a thread just to find nothing)."""
    manager = _manager
    if manager is not None and manager.pid == os.getpid() and manager.thread.is_alive():
        return manager
    return None
