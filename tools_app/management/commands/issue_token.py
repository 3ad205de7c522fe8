from django.core.management.base import CommandError

from goclaw.errors import ApplicationError
from goclaw.management.base import OperationalCommand
from tools_app.services.agents import agent_get_by_key, token_issue


class Command(OperationalCommand):
    help = "Issue an API token for an agent and print it once (only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("agent_key")
        parser.add_argument("--name", default="cli")
        parser.add_argument("--expires-days", type=int, default=None)

    def handle(self, *args, agent_key, name, expires_days, **options):
        try:
            agent = agent_get_by_key(agent_key)
            token, plain = token_issue(agent=agent, name=name, expires_days=expires_days)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stderr.write(f"token {token.name!r} for agent {agent.key} (expires: {token.expires_at or 'never'})")
        self.stdout.write(plain)
