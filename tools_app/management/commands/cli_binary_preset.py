"""Register a credentialed binary from a preset (gh, gcloud, aws, kubectl, terraform): its deny args, deny-verbose
flags and tips come from `tools_app.services.cli_binaries.PRESETS`. Env values are read from this process's
environment (`--env NAME`), never from the command line, where `ps` and shell history would show them."""
import os

from django.core.management.base import CommandError

from goclaw.errors import ApplicationError
from goclaw.management.base import OperationalCommand
from tools_app.models import Agent
from tools_app.services.cli_binaries import PRESETS, cli_binary_add_preset


class Command(OperationalCommand):
    help = "Register a credentialed CLI binary from a preset (docs/credentialed-exec.md)."

    def add_arguments(self, parser):
        parser.add_argument("preset", nargs="?", help=f"one of: {', '.join(sorted(PRESETS))}")
        parser.add_argument("--path", default="", help="absolute path of the binary (default: the preset's)")
        parser.add_argument("--agent", default="", help="agent key (default: every agent)")
        parser.add_argument("--env", action="append", default=[], metavar="NAME",
                            help="copy this variable's value from the current environment (repeatable)")
        parser.add_argument("--accept-risk", action="store_true",
                            help="acknowledge that this binary can start other programs or print its environment "
                                 "(required for such binaries, e.g. terraform)")
        parser.add_argument("--list", action="store_true", help="list the presets and exit")

    def handle(self, *args, preset, path, agent, env, list, accept_risk=False, **options):
        if list or not preset:
            for name, data in sorted(PRESETS.items()):
                self.stdout.write(f"{name}: {data['path']}; deny args {data['deny_args']}; "
                                  f"deny flags {data['deny_verbose']}")
            return
        scope = None
        if agent:
            scope = Agent.objects.filter(key=agent).first()
            if scope is None:
                raise CommandError(f"no agent {agent!r}")
        missing = [name for name in env if name not in os.environ]
        if missing:
            raise CommandError(f"not set in this environment: {', '.join(missing)}")
        try:
            row = cli_binary_add_preset(actor=None, preset=preset, path=path or None, agent=scope,
                                        env={name: os.environ[name] for name in env}, risk_acknowledged=accept_risk)
        except ApplicationError as exc:
            hint = " Here: pass --accept-risk." if exc.code == "cli_binary_risk_not_acknowledged" else ""
            raise CommandError(exc.message + hint) from None
        self.stdout.write(f"registered {row.name} at {row.path} for {agent or 'every agent'}; "
                          f"env names: {', '.join(row.env_names) or 'none'}")
