"""The SDK server goclaw's MCP endpoint runs (`build_server`, used by the ASGI layer): the handlers of
`mcp_app.server.handlers` (tools), `listen` (the stateless era's change notifications), `content` (resources and
prompts) and the tasks extension (`tasks`). Each of those modules builds on `handlers`; this one puts them together,
so none of them imports another's registration."""
from __future__ import annotations

from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.lowlevel.server import NotificationOptions, Server
from opentelemetry import trace

from mcp_app.server import content, tasks
from mcp_app.server.handlers import WAIT_TOOL, call_tool, contained, list_tools, tool_input_schema
from mcp_app.server.listen import listen


class GoclawMCPServer(Server):
    """The low-level SDK server with goclaw's handlers; announces listChanged (tools, prompts, resources) in the
    session era."""

    def create_initialization_options(self, notification_options=None, experimental_capabilities=None, extensions=None):
        return super().create_initialization_options(notification_options or NotificationOptions(
            tools_changed=True, prompts_changed=True, resources_changed=True),
                                                     experimental_capabilities, extensions)


def build_server() -> GoclawMCPServer:
    """The SDK server goclaw's session manager runs."""
    server = GoclawMCPServer("goclaw", version="1", on_list_tools=contained(list_tools), on_call_tool=contained(call_tool),
                             get_tool_input_schema=tool_input_schema, on_subscriptions_listen=contained(listen),
                             on_list_resources=contained(content.list_resources),
                             on_list_resource_templates=contained(content.list_resource_templates),
                             on_read_resource=contained(content.read_resource),
                             on_list_prompts=contained(content.list_prompts), on_get_prompt=contained(content.get_prompt),
                             instructions="goclaw: this agent's governed tools. Calls a person must approve may answer "
                                          f"with an approval id (resume them with {WAIT_TOOL}), or with a task when "
                                          f"the client declares the {tasks.TASKS} extension.")
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # No OpenTelemetry SDK is installed in this process, so every span would be a no-op: the SDK's tracing
        # middleware (dropped as its documentation says to opt out) would wrap every request for nothing.
        server.middleware = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]
    tasks.install(server)
    content.install_watches()  # prompts, resources and subscribed resources join the listen streams' watches
    return server
