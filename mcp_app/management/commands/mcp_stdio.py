"""`manage.py mcp_stdio --agent KEY`: serve goclaw's MCP endpoint over stdio for clients that only launch commands.
The agent token comes from the environment (GOCLAW_AGENT_TOKEN, or --token-env NAME), never the command line."""
from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import CommandError

from goclaw.management.base import OperationalCommand
from tools_app.services.agents import token_authenticate


class Command(OperationalCommand):
    help = "An MCP stdio server forwarding to goclaw's /mcp endpoint with an agent token from the environment."

    def add_arguments(self, parser):
        parser.add_argument("--agent", required=True, help="the agent the token must belong to")
        parser.add_argument("--url", default=None, help="the endpoint (default http://GOCLAW_HOST:GOCLAW_MCP_PORT/mcp)")
        parser.add_argument("--token-env", default="GOCLAW_AGENT_TOKEN", help="the environment variable holding the token")

    def handle(self, *args, agent, url, token_env, **options):
        from mcp_app.server.stdio import EndpointUnreachable, run_stdio_proxy

        raw = os.environ.get(token_env, "").strip()
        if not raw:
            raise CommandError(f"set {token_env} to the agent's token (it is never taken from the command line)")
        token = token_authenticate(raw)
        if token is None or token.agent.key != agent:
            raise CommandError(f"the token in {token_env} is not an active token of agent {agent!r}")
        try:
            run_stdio_proxy(url or f"http://{settings.HOST}:{settings.MCP_PORT}/mcp", raw)
        except EndpointUnreachable as exc:
            raise CommandError(str(exc)) from None
