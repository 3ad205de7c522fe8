import json

from django.core.management.base import CommandError

from goclaw.management.base import OperationalCommand
from tools_app.models import Agent
from tools_app.services.custom_tools import custom_tool_export


class Command(OperationalCommand):
    help = ("Export custom tools as JSON (the import format; env values are never exported). "
            "--agent KEY exports that agent's own tools only.")

    def add_arguments(self, parser):
        parser.add_argument("file", nargs="?", help="write here instead of standard output")
        parser.add_argument("--agent", default=None, help="only this agent's own tools")

    def handle(self, *args, file, agent, **options):
        scope = None
        if agent is not None:
            scope = Agent.objects.filter(key=agent).first()
            if scope is None:
                raise CommandError(f"no agent has the key {agent!r}")
        text = json.dumps(custom_tool_export(agent=scope), indent=2, ensure_ascii=False) + "\n"
        if file:
            with open(file, "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            self.stdout.write(text, ending="")
