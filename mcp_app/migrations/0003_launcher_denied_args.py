"""Wider denied arguments for the default launchers: inline code through a module run as a script (`python -m
timeit "<code>"`), through a nested interpreter (`uv run python -c …`, `uvx … node -e …`) and through deno's
`repl --eval` / `data:` URLs. Only rows still holding the shipped lists change (a person's edits are kept)."""
from django.db import migrations

import importlib

_shipped = importlib.import_module("mcp_app.migrations.0002_default_launchers")
PYTHON_MODULES, NESTED = _shipped.PYTHON_MODULES, _shipped.NESTED
UPDATES = {
    "python3": (["-c"], ["-c", *PYTHON_MODULES]),
    "python": (["-c"], ["-c", *PYTHON_MODULES]),
    "uvx": ([], NESTED),
    "uv": ([], NESTED),
    "deno": (["eval"], ["eval", "repl", "--eval", "--eval-file", "data:*"]),
}


def widen(apps, schema_editor):
    MCPLauncher = apps.get_model("mcp_app", "MCPLauncher")
    for command, (shipped, wider) in UPDATES.items():
        MCPLauncher.objects.filter(command=command, denied_args=shipped).update(denied_args=wider)


def narrow(apps, schema_editor):
    MCPLauncher = apps.get_model("mcp_app", "MCPLauncher")
    for command, (shipped, wider) in UPDATES.items():
        MCPLauncher.objects.filter(command=command, denied_args=wider).update(denied_args=shipped)


class Migration(migrations.Migration):
    dependencies = [("mcp_app", "0002_default_launchers")]
    operations = [migrations.RunPython(widen, narrow)]
