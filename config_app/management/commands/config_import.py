"""`manage.py config_import F [--dry-run] [--prune]`: apply a document, all or nothing, and print the diff."""
import sys

from django.core.management.base import CommandError

from config_app.document import document_load
from config_app.errors import ConfigInvalid
from config_app.services import config_import, plan_text
from goclaw.management.base import OperationalCommand


class Command(OperationalCommand):
    help = ("Import a governance configuration document (YAML, JSON, or GoClaw's JSON shapes; - reads standard "
            "input). Prints the diff; on any problem lists every one with its path, changes nothing, exits 1.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="the document, or - for standard input")
        parser.add_argument("--dry-run", action="store_true", help="show the diff, change nothing")
        parser.add_argument("--prune", action="store_true",
                            help="remove what the document's sections leave out (sections it has no key for stay)")

    def handle(self, *args, file, dry_run, prune, **options):
        try:
            if file == "-":
                text = sys.stdin.read()
            else:
                with open(file, "rb") as fh:
                    text = fh.read()
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror or exc}") from None
        try:
            plan = config_import(document_load(text), dry_run=dry_run, prune=prune, actor=None)
        except ConfigInvalid as exc:
            raise CommandError("\n".join([f"import refused, nothing was changed: {len(exc.problems)} problem(s)",
                                          *exc.lines])) from None
        self.stdout.write(plan_text(plan), ending="")
