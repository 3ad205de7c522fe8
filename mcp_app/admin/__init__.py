"""Admin screens for MCP (docs/mcp.md), one module per area (registered on import). Everything goes through the same
services as the API: servers and launchers, tool review (the diff, approve / reject), grants, access requests."""
from mcp_app.admin import servers  # noqa: F401
from mcp_app.admin import tools  # noqa: F401,E402
from mcp_app.admin import grants  # noqa: F401,E402
from mcp_app.admin import access  # noqa: F401,E402
from mcp_app.admin import server_sessions  # noqa: F401,E402
from mcp_app.admin import tasks  # noqa: F401,E402
