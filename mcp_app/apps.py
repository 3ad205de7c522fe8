from django.apps import AppConfig


class McpAppConfig(AppConfig):
    name = "mcp_app"
    verbose_name = "MCP"

    def ready(self) -> None:
        _contribute_to_platform()
        _register_encrypted_fields()
        _connect_bridge()

        from mcp_app.source import MCPToolSource
        from tools_app.toolsets import tool_source_register

        tool_source_register(MCPToolSource())  # every agent's granted, usable MCP tools


def _contribute_to_platform() -> None:
    """Staff may watch MCP events live (`mcp`: access requests, reviews, tool changes, server health); the worker
    checks every enabled server's health on a schedule (docs/mcp.md, "Health"); the main port answers a stateless
    `tools/call` before Django's request handling (docs/mcp-server.md, "The direct path")."""
    from goclaw.fronts import wsgi_front_register
    from goclaw.realtime import websocket_staff_group_register
    from goclaw.services import schedule_register
    from mcp_app.server import wsgi as mcp_wsgi

    wsgi_front_register("/mcp", "POST", mcp_wsgi.answered)

    websocket_staff_group_register(r"mcp", permission=("mcp_app.view_mcpserver", "mcp_app.view_mcpaccessrequest"))
    # an agent's group also carries its access requests and their reviews
    websocket_staff_group_register(r"agent\.[a-z0-9_-]{1,64}", permission="mcp_app.view_mcpaccessrequest")
    schedule_register("mcp health sweep", "mcp_app.tasks.health_sweep", "* * * * * */30")  # every 30 s
    schedule_register("mcp server sessions purge", "mcp_app.tasks.server_sessions_purge", "*/5 * * * *")  # every 5 min


def _register_encrypted_fields() -> None:
    """Server headers and env, agent grants' config_overrides, users' own credentials and the arguments and results
    of calls held for a person (resumable calls, tasks) are sealed bound to their row: `rotate_encryption_key`
    re-seals them."""
    from goclaw.secrets import encrypted_field_register
    from mcp_app.models import MCPAgentGrant, MCPServer, MCPUserGrant
    from mcp_app.services.common import overrides_seal_context
    from mcp_app.services.grants import credentials_seal_context
    from mcp_app.services.servers import seal_context

    encrypted_field_register(MCPServer, "headers_sealed", associated_data=lambda row: seal_context(row.pk, "headers"))
    encrypted_field_register(MCPServer, "env_sealed", associated_data=lambda row: seal_context(row.pk, "env"))
    encrypted_field_register(MCPAgentGrant, "overrides_sealed", associated_data=lambda row: overrides_seal_context(row.pk))
    encrypted_field_register(MCPUserGrant, "credentials_sealed",
                             associated_data=lambda row: credentials_seal_context(row.pk))
    from mcp_app.models import MCPApprovalResume, MCPTask
    from mcp_app.server.services import resume_seal_context, task_seal_context

    encrypted_field_register(MCPApprovalResume, "sealed_arguments",
                             associated_data=lambda row: resume_seal_context(row.approval_id, row.agent_id))
    for field, what in (("sealed_arguments", "arguments"), ("sealed_result", "result")):
        encrypted_field_register(MCPTask, field, associated_data=lambda row, what=what: task_seal_context(row.pk, row.agent_id, what))


def _connect_bridge() -> None:
    """The connection manager of this process reports listings and health; the services record them."""
    from mcp_app.bridge import hooks
    from mcp_app.services.connections import health_observed, listing_observed

    from goclaw.services import health_check_register
    from mcp_app.services.connections import mcp_connections_status

    hooks.health_listeners[:] = [health_observed]
    hooks.listing_listeners[:] = [listing_observed]
    health_check_register("mcp_connections", mcp_connections_status)  # this process's connections by state
