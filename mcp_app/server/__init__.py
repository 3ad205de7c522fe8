"""goclaw served as an MCP server (docs/mcp-server.md): every agent's governed catalog over Streamable HTTP at `/mcp`,
each call through the one pipeline. `asgi.application` is what `manage.py up` runs (granian or uvicorn: GOCLAW_MCP_SERVER)."""
