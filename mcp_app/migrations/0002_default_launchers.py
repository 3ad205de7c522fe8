"""The launchers a stdio MCP server may start with, out of the box (people edit the list in the admin). The denied
arguments are the ones that make the launcher run code given on the command line instead of a server package
(whole arguments; "-m timeit" = two consecutive arguments; "data:*" = a prefix). 0003 widens installs made before."""
from django.db import migrations

PYTHON_MODULES = ["-m timeit", "-m code", "-m pdb", "-m runpy", "-m trace", "-m profile", "-m cProfile", "-m idlelib"]
NESTED = ["-c", "-e", "--eval", "-p", "--print", "--require", "--import", *PYTHON_MODULES]  # uv run python -c …
DEFAULT_LAUNCHERS = [
    ("python3", "Python", ["-c", *PYTHON_MODULES]),
    ("python", "Python", ["-c", *PYTHON_MODULES]),
    ("node", "Node.js", ["-e", "--eval", "-p", "--print", "-r", "--require", "--import", "--experimental-loader",
                         "--loader"]),
    ("npx", "npm package runner", ["-c", "--call"]),
    ("uvx", "uv tool runner", NESTED),
    ("uv", "uv (uv run …)", NESTED),
    ("deno", "Deno", ["eval", "repl", "--eval", "--eval-file", "data:*"]),
    ("bun", "Bun", ["-e", "--eval", "-p", "--print"]),
]


def add_launchers(apps, schema_editor):
    MCPLauncher = apps.get_model("mcp_app", "MCPLauncher")
    for command, description, denied in DEFAULT_LAUNCHERS:
        MCPLauncher.objects.get_or_create(command=command, defaults={"description": description, "denied_args": denied})


def remove_launchers(apps, schema_editor):
    apps.get_model("mcp_app", "MCPLauncher").objects.filter(command__in=[c for c, _, _ in DEFAULT_LAUNCHERS]).delete()


class Migration(migrations.Migration):
    dependencies = [("mcp_app", "0001_servers_tools_grants_access_requests")]
    operations = [migrations.RunPython(add_launchers, remove_launchers)]
