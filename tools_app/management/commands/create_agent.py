from django.core.management.base import CommandError

from goclaw.errors import ApplicationError
from goclaw.management.base import OperationalCommand
from sandbox_app.models import SandboxProfile
from tools_app.choices import AgentType
from tools_app.services.agents import agent_create


class Command(OperationalCommand):
    help = "Create an agent (then give it a token with `issue_token`)."

    def add_arguments(self, parser):
        parser.add_argument("key")
        parser.add_argument("--name", default="")
        parser.add_argument("--type", choices=[c.value for c in AgentType], default=AgentType.PREDEFINED)
        parser.add_argument("--provider", default="")
        parser.add_argument("--model", default="")
        parser.add_argument("--workspace", default="")
        parser.add_argument("--sandbox-profile", default="", help="sandbox profile name (default: the default profile)")

    def handle(self, *args, key, name, type, provider, model, workspace, sandbox_profile, **options):
        profile = None
        if sandbox_profile:
            profile = SandboxProfile.objects.filter(name=sandbox_profile).first()
            if profile is None:
                raise CommandError(f"no sandbox profile named {sandbox_profile!r}")
        try:
            agent = agent_create(key=key, display_name=name, agent_type=type, provider=provider, model=model,
                                 workspace=workspace, sandbox_profile=profile)
        except ApplicationError as exc:
            raise CommandError(f"{exc.message}: {exc.details}") from None
        self.stdout.write(f"created agent {agent.key} (workspace {agent.workspace_path})")
