import json
import sys

from django.core.management.base import CommandError

from goclaw.errors import ApplicationError
from goclaw.management.base import OperationalCommand
from tools_app.services.custom_tools import custom_tool_import


class Command(OperationalCommand):
    help = ("Import custom tools from a JSON file (one tool object or a list; docs/custom-tools.md). All or nothing: "
            "every problem is listed with its position and nothing is saved unless there are none.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="JSON file, or - for standard input")

    def handle(self, *args, file, **options):
        try:
            if file == "-":
                text = sys.stdin.read()
            else:
                with open(file, encoding="utf-8") as fh:
                    text = fh.read()
            data = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from None
        try:
            report = custom_tool_import(actor=None, data=data)
        except ApplicationError as exc:
            problems = (exc.details or {}).get("problems") if isinstance(exc.details, dict) else None
            raise CommandError("\n".join(["import refused, nothing was saved:", *(problems or [exc.message])])) from None
        self.stdout.write(f"imported {len(report['created']) + len(report['updated'])} tool(s): "
                          f"created {', '.join(report['created']) or 'none'}; "
                          f"updated {', '.join(report['updated']) or 'none'}")
