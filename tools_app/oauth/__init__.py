"""goclaw as an OAuth 2.1 authorization server, so MCP clients that follow the MCP authorization specification can
act as an agent a person chose (docs/mcp-oauth.md). The access token is an ordinary agent token."""
