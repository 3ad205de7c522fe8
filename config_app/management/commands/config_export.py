"""`manage.py config_export [--file F] [--format yaml|json]`: the whole governance configuration as one document."""
from django.core.management.base import CommandError

from config_app.document import document_dump
from config_app.services import config_export
from goclaw.management.base import OperationalCommand


class Command(OperationalCommand):
    help = ("Export the whole governance configuration as one YAML document (docs/config-as-code.md). Secrets are "
            "references ({env: NAME} or {set: true}), never values; tokens are never exported.")

    def add_arguments(self, parser):
        parser.add_argument("--file", default=None, help="write here instead of standard output")
        parser.add_argument("--format", default="yaml", choices=["yaml", "json"])

    def handle(self, *args, file, format, **options):
        text = document_dump(config_export(), fmt=format)
        if not file:
            self.stdout.write(text, ending="")
            return
        try:
            with open(file, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise CommandError(f"cannot write {file}: {exc.strerror or exc}") from None
