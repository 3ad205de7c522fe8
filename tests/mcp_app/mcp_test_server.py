"""A real MCP server (SDK `MCPServer`) for the tests and the benchmark.

    python mcp_test_server.py --transport stdio|sse|streamable-http [--port N] [--state-dir DIR]
                              [--echo-description TEXT] [--extra-tool] [--site-packages DIR]

Tools: echo, add (structured), whoami (the request's Authorization header over HTTP, $MCP_TOKEN over stdio),
sleep (writes <state-dir>/sleep-started, and <state-dir>/sleep-cancelled when the request is cancelled), fail
(an isError result), net_probe (TCP connect from inside the server's process), picture (PNG image content),
grow (adds the tool `grown` and announces notifications/tools/list_changed), and `extra` with --extra-tool.
In stdio mode nothing but the protocol is written to stdout (logging goes to stderr).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import logging
import os
import socket
import sys
from pathlib import Path

# --site-packages DIR: where a sandboxed system python finds the SDK (goclaw refuses PYTHONPATH for MCP servers,
# as every variable that changes what an interpreter loads), read before the SDK is imported.
if "--site-packages" in sys.argv[:-1]:
    sys.path.insert(0, sys.argv[sys.argv.index("--site-packages") + 1])  # first, as PYTHONPATH would put it

from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

# A 1x1 transparent PNG.
PNG_BYTES = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
ECHO_DESCRIPTION = "Return the text unchanged."


def build_server(*, state_dir: Path | None, echo_description: str, extra_tool: bool) -> MCPServer:
    """The test server with every tool the bridge tests need."""
    server = MCPServer("goclaw-test", log_level="WARNING")

    def mark(name: str) -> None:
        if state_dir is not None:
            (state_dir / name).write_text(str(os.getpid()))

    @server.tool(description=echo_description)
    def echo(text: str) -> str:
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Who the server thinks is calling: the Authorization header (HTTP) or $MCP_TOKEN (stdio)."""
        headers = ctx.headers
        if headers is not None:
            return headers.get("authorization") or "none"
        return os.environ.get("MCP_TOKEN") or "none"

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep; records its start and its cancellation in the state dir."""
        mark("sleep-started")
        try:
            await asyncio.sleep(seconds)
        except BaseException:  # asyncio.CancelledError (anyio cancellation) when the client cancels
            mark("sleep-cancelled")
            raise
        mark("sleep-finished")
        return f"slept {seconds}"

    @server.tool()
    def fail() -> str:
        """Always fails (an isError result)."""
        raise ToolError("this tool always fails")

    @server.tool()
    def net_probe(host: str, port: int) -> str:
        """Open a TCP connection from the server's process."""
        try:
            with socket.create_connection((host, port), timeout=3):
                return "connected"
        except OSError as exc:
            return f"refused: {exc}"

    @server.tool()
    def picture() -> Image:
        """A tiny PNG."""
        return Image(data=PNG_BYTES, format="png")

    @server.tool()
    def read_file(path: str) -> str:
        """Read a file as the server's process (sandbox tests)."""
        try:
            return Path(path).read_text()
        except OSError as exc:
            return f"error: {exc.strerror}"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `grown` and tell the client its tool list changed."""
        if server._tool_manager.get_tool("grown") is None:
            server.add_tool(lambda: "grown", name="grown", description="Added at run time.")
        await ctx.session.send_tool_list_changed()
        await ctx.notify_tools_changed()
        return "grown"

    if extra_tool:
        @server.tool()
        def extra() -> str:
            """An extra tool (listed only with --extra-tool)."""
            return "extra"

    @server.tool()
    def whoami_digest(ctx: Context) -> str:
        """sha256 of what whoami returns: lets a test tell callers apart through goclaw's scrubber."""
        return hashlib.sha256(whoami(ctx).encode()).hexdigest()

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=("stdio", "sse", "streamable-http"), default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--state-dir", default="")
    parser.add_argument("--echo-description", default=ECHO_DESCRIPTION)
    parser.add_argument("--extra-tool", action="store_true")
    parser.add_argument("--site-packages", default="", help="imported from first (read before the SDK is imported)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    state_dir = Path(args.state_dir) if args.state_dir else None
    server = build_server(state_dir=state_dir, echo_description=args.echo_description, extra_tool=args.extra_tool)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run(args.transport, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
