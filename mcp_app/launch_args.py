"""How each stdio launcher reads its command line, as data plus one small parser per interpreter family, so a
launch is judged the way the interpreter will parse it (clustered short options, attached values, `--opt=value`,
`--`, option files, module runners), never by matching tokens.

A launch is refused when it would run code that is not a server script or package: inline code (`python3 -Im
timeit CODE`, `node -pe CODE`, `npx node -e CODE`, `deno eval`), a program read from stdin (no script, `-`,
`/dev/stdin`), an interactive interpreter, a preload or loader, an option file that can carry any of these
(`--env-file`, node's config file, uv's config file), a debugger port, a standard-library or known code-runner
module or package (`-m pdb`, `npx tsx -e`), a shell or exec wrapper (as the launcher or named by a runner), or a
host program reached through a package runner (`npx find …`: npx runs programs from the host's PATH).

Each family's options are an allowlist with arities: an option goclaw does not know is refused, because without
its arity no parser can tell which argument is the program. Everything after the program (script, module,
package) is that program's own argv and is never judged. Launchers of no known family are plain programs: only
their `denied_args` apply (token matching is all that is possible for a program goclaw has no model of).

Environment variables are judged by name: every name in an interpreter's, package runner's or the dynamic
loader's namespace (`PYTHON*`, `NODE_*`, `npm_config_*`, `UV_*`, `LD_*` …) is refused unless it is on a short
list of harmless ones, so a variable added by a future release fails closed; so are PATH, HOME and the other
names that redirect where programs, config files or libraries are found.

Pure functions of their arguments and the host's file system (no Django): the services call them when a server,
grant or launcher is saved and again at every launch.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath


class Refused(Exception):
    """Why a launch may not happen; `field` is the server field to show it on (`command` or `args`)."""

    def __init__(self, message: str, field: str = "args") -> None:
        super().__init__(message)
        self.message, self.field = message, field


INLINE = "runs inline code"
STDIN = "reads its program from stdin (the MCP protocol stream)"
MAX_DEPTH = 4  # runner in runner in runner (uv run npx node server.js) is already more than any real server needs

# --- programs that may never be a launcher, nor be started by a package runner ------------------------------------
SHELLS = frozenset("""
    sh bash dash zsh ksh ksh93 mksh pdksh oksh loksh ash hush yash posh rbash csh tcsh fish elvish nu nushell xonsh
    rc es scsh ion murex osh ysh oil pwsh powershell busybox toybox cmd
""".split())
# They start another program named in their own arguments.
EXEC_WRAPPERS = frozenset("""
    env exec command builtin nohup nice ionice timeout stdbuf setsid setpriv unshare nsenter chroot chrt taskset
    prlimit sudo su doas runuser pkexec sg newgrp xargs parallel flock script time watch strace ltrace gdb lldb
    valgrind perf firejail bwrap bubblewrap systemd-run start-stop-daemon daemonize fakeroot proot numactl cgexec
    catchsegv eatmydata torsocks proxychains proxychains4 tsocks unbuffer expect faketime ld.so ld-linux
    ld-linux-x86-64.so ld-linux-aarch64.so ld-musl-x86_64.so entr nodemon xdg-open sshpass ssh rsh socat nc ncat
    netcat telnet screen tmux dtach abduco ssh-agent dbus-run-session dbus-launch xvfb-run run-parts cronic chpst
    softlimit setuidgid envdir envuidgid s6-envdir s6-setuidgid tini dumb-init catatonit gosu su-exec
""".split())
# Interpreters and tools goclaw has no argument model for that run code or programs named on their command line
# (perl -e, awk 'BEGIN{system(…)}', find -exec, git -c core.pager=…, docker run …), and package managers whose
# every use installs and runs code through a shell (pnpm dlx -c, yarn exec, pip install with build scripts).
CODE_RUNNERS = frozenset("""
    perl ruby irb jruby php lua luajit texlua tclsh wish expect awk gawk mawk nawk busybox sed r rscript julia java
    jshell jrunscript groovy scala kotlin kotlinc erl escript elixir iex mix guile racket sbcl clisp ecl gcl ocaml
    utop ghc ghci runghc runhaskell stack cabal swift dotnet osascript vim vi nvim ex view vimdiff rvim emacs less
    more man git find make gmake cmake ninja meson gcc cc c99 g++ clang clang++ tcc m4 ed sqlite3 psql mysql mongo
    mongosh redis-cli docker podman nerdctl kubectl ctr crictl lxc systemctl service at batch crontab go cargo rustc
    rustup dart flutter zig nim crystal elm ansible ansible-playbook ansible-runner salt fab fabric pnpm pnpx yarn
    yarnpkg corepack volta nvm fnm tsx ts-node ts-node-esm ts-node-dev babel-node coffee lsc zx node-dev
    supervisor forever pm2 concurrently npm-run-all run-s run-p cross-env cross-env-shell env-cmd shx vite-node esno
    esrun jiti sucrase-node swc-node lerna nx turbo chokidar onchange npm-watch claude codex gemini aider
    interpreter pip pip3 pipenv poetry pdm hatch rye pixi conda mamba micromamba tox nox virtualenv ipython ipykernel
    jupyter jupyter-console jupyter-notebook jupyter-lab jupyter-nbconvert papermill ptpython ptipython bpython hy
    pdb pydoc idle ipdb pudb wdb debugpy pytest py.test coverage pyinstrument scalene memray viztracer kernprof
    pyperf invoke inv typer dotenv honcho watchmedo flask django-admin scrapy celery nuitka cython cythonize
    pyodide trio aioconsole twistd doit
""".split())
# npm packages (as named to npx / bunx / deno's npm:, or found in a script's node_modules path) that turn their
# own command line into code or commands.
JS_RUNNER_PACKAGES = frozenset("""
    npm npx pnpm yarn corepack node nodejs bun deno tsx ts-node ts-node-dev @babel/node babel-node coffeescript
    coffee-script livescript zx nodemon node-dev supervisor forever pm2 concurrently npm-run-all npm-run-all2
    cross-env dotenv-cli env-cmd shx shelljs vite-node esno esrun jiti sucrase @swc-node/register esbuild-runner
    lerna nx turbo chokidar-cli onchange watch npm-watch @anthropic-ai/claude-code @openai/codex @google/gemini-cli
    repl node-repl eval exec-sh execa-cli run-script-os @esbuild-kit/esm-loader ts-eager
""".split())
# Python modules (top-level, compared in lower case) that turn their command line into code, or run other
# programs: third-party ones; every standard-library module is refused as well (none is an MCP server, and
# timeit, cProfile, profile, trace, pdb, code, runpy, doctest, pydoc, idlelib, asyncio, sqlite3, pickle,
# http.server --cgi, webbrowser … all run code or programs named on their command line).
PYTHON_RUNNER_MODULES = frozenset("""
    pip pipx uv virtualenv ipython ipykernel jupyter jupyter_console jupyter_core jupyterlab notebook nbconvert
    nbclient qtconsole papermill xonsh hy ptpython bpython pdbpp ipdb pudb wdb web_pdb debugpy pydevd ptvsd pytest
    py coverage pyinstrument scalene memray viztracer kernprof line_profiler pyperf pyperformance fire invoke typer
    dotenv honcho watchdog flask django scrapy celery poetry pdm hatch hatchling tox nox pipenv conda mamba
    micromamba pixi rye build nuitka cython pyximport pyodide trio aioconsole interpreter aider ansible
    ansible_runner salt fabric doit twisted setuptools pkg_resources wheel ensurepip sh plumbum pexpect
""".split())
# Modules of other CPython versions than this one (sys.stdlib_module_names is this interpreter's list).
EXTRA_STDLIB = frozenset("""
    test __hello__ __phello__ _pyrepl _colorize annotationlib compression profiling _remote_debugging
    _interpreters _interpqueues _interpchannels _suggestions _sysconfig asynchat asyncore distutils imp smtpd
    aifc audioop cgi cgitb chunk crypt imghdr mailcap msilib nis nntplib ossaudiodev pipes sndhdr spwd sunau
    telnetlib uu xdrlib lib2to3 tkinter idlelib turtledemo pydoc_data ensurepip venv
""".split())
STDLIB = frozenset(name.lower() for name in (*sys.stdlib_module_names, *EXTRA_STDLIB))

# `-X` options of CPython that only change diagnostics or limits (no path, no module to import).
PYTHON_XOPTIONS = frozenset("""
    importtime dev utf8 faulthandler tracemalloc showrefcount int_max_str_digits warn_default_encoding
    no_debug_ranges frozen_modules perf perf_jit cpu_count gil context_aware_warnings thread_inherit_context
    disable_remote_debug showalloccount tlbc
""".split())
# --- environment -------------------------------------------------------------------------------------------------
# Names that redirect where programs, libraries or config files are found, or that name a program or file to run.
ENV_REFUSED = frozenset("""
    PATH HOME SHELL ENV BASH_ENV CDPATH IFS PS4 PROMPT_COMMAND SHELLOPTS BASHOPTS ZDOTDIR GLOBIGNORE GCONV_PATH
    GETCONF_DIR HOSTALIASES LOCALDOMAIN RES_OPTIONS NLSPATH LOCPATH TZDIR VIRTUAL_ENV CONDA_PREFIX PYENV_VERSION
    PYENV_ROOT PERL5OPT PERL5LIB PERLLIB PERL5DB RUBYOPT RUBYLIB CLASSPATH BROWSER EDITOR VISUAL PAGER MANPAGER
    LESSOPEN LESSCLOSE SSLKEYLOGFILE CC CXX CPP LD AR AS NM RANLIB CFLAGS CXXFLAGS CPPFLAGS LDFLAGS LDSHARED
    MAKEFLAGS MFLAGS MAKE APPDATA USERPROFILE LOCALAPPDATA COMSPEC PATHEXT TERMINFO TERMINFO_DIRS SSH_ASKPASS
    SSH_ASKPASS_REQUIRE SUDO_ASKPASS SSH_AUTH_SOCK
    TCL_LIBRARY TK_LIBRARY TCLLIBPATH GTK_MODULES GTK_PATH GTK_EXE_PREFIX GIO_EXTRA_MODULES GIO_MODULE_DIR
    GDK_PIXBUF_MODULE_FILE GDK_PIXBUF_MODULEDIR QT_PLUGIN_PATH QT_QPA_PLATFORM_PLUGIN_PATH KRB5_CONFIG
    KRB5_KDC_PROFILE SASL_PATH MPLBACKEND IPYTHONDIR JUPYTER_PATH JUPYTER_CONFIG_DIR LIBRARY_PATH
""".split())  # the last lines: libraries an interpreter loads load their plugins, init scripts or backends from there
# Namespaces refused as a whole except for the names listed (their readers are an interpreter, a package runner,
# the dynamic loader or a library they load; anything new there fails closed).
ENV_NAMESPACES: tuple[tuple[str, frozenset[str]], ...] = (
    ("PYTHON", frozenset({"PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE",
                          "PYTHONHASHSEED", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONFAULTHANDLER",
                          "PYTHONOPTIMIZE", "PYTHONWARNDEFAULTENCODING", "PYTHONINTMAXSTRDIGITS", "PYTHONDEVMODE",
                          "PYTHONTRACEMALLOC", "PYTHONCOERCECLOCALE", "PYTHONMALLOC", "PYTHONNODEBUGRANGES"})),
    ("NODE_", frozenset({"NODE_ENV", "NODE_NO_WARNINGS", "NODE_DEBUG", "NODE_PENDING_DEPRECATION",
                         "NODE_DISABLE_COLORS"})),
    ("NPM_CONFIG_", frozenset()),  # npm reads them in any case
    ("NPM_", frozenset({"NPM_TOKEN"})),
    ("UV_", frozenset({"UV_NO_PROGRESS", "UV_OFFLINE", "UV_NATIVE_TLS", "UV_NO_CACHE", "UV_PYTHON_DOWNLOADS",
                       "UV_COMPILE_BYTECODE", "UV_HTTP_TIMEOUT", "UV_CONCURRENT_DOWNLOADS", "UV_NO_SYNC",
                       "UV_FROZEN", "UV_LOCKED", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX",
                       "UV_DEFAULT_INDEX", "UV_LINK_MODE", "UV_PRERELEASE", "UV_RESOLUTION", "UV_EXCLUDE_NEWER",
                       "UV_NO_ENV_FILE", "UV_NO_CONFIG"})),
    ("DENO_", frozenset({"DENO_AUTH_TOKENS", "DENO_NO_UPDATE_CHECK", "DENO_NO_PROMPT",
                         "DENO_NO_DEPRECATION_WARNINGS"})),
    *((prefix, frozenset()) for prefix in (
        "LD_", "DYLD_", "PIP_", "PIPX_", "BUN_", "BUNFIG", "COREPACK_", "YARN_", "PNPM_", "TS_NODE_", "TSX_",
        "BASH_", "GIT_", "XDG_", "GLIBC_", "MALLOC_", "OPENSSL_", "JAVA_", "_JAVA_", "JDK_", "PERL",
        "RUBY", "GEM_", "BUNDLE_", "LUA_", "RUSTC", "CARGO_", "CONDA_", "PYENV_", "VOLTA_", "NVM_", "FNM_", "GST_")),
)


def env_name_refusal(name: str) -> str | None:
    """Why a variable may not be set for a stdio server (by its name, compared in upper case), or None."""
    upper = name.upper()
    if upper in ENV_REFUSED:
        return f"{name} changes what the launcher runs or where it finds programs, libraries or config files"
    for prefix, allowed in ENV_NAMESPACES:
        if upper.startswith(prefix) and upper not in allowed:
            return (f"{name} changes what the launcher runs: {prefix}… variables are read by an interpreter, a "
                    f"package runner or the dynamic loader" + (" (the few harmless ones are listed in docs/mcp.md)"
                                                                if allowed else ""))
    return None


def env_refusal(names: Iterable[str]) -> str | None:
    """The first refused variable name's reason, or None."""
    for name in names:
        if isinstance(name, str) and (why := env_name_refusal(name)):
            return f"{why}; it may not be set for an MCP server"
    return None


# --- option grammars ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Grammar:
    """One program's options: which take no value, which take one (next argument or attached), which take one only
    as `--opt=value`, and how short options combine. `forbidden` names options refused with a specific reason;
    any option in none of the sets is refused as unknown."""

    name: str
    flags: frozenset[str] = frozenset()
    valued: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()  # value only as --opt=value / -o=value
    terminal: frozenset[str] = frozenset()  # options after whose value the program's argv begins (python -m)
    aliases: Mapping[str, str] = field(default_factory=dict)
    forbidden: Mapping[str, str] = field(default_factory=dict)
    flag_prefixes: tuple[str, ...] = ()  # families of harmless flags (deno --unstable-*)
    clusters: bool = False  # -abc is -a -b -c
    cluster_values: bool = True  # a valued short option may end a cluster (-Im timeit)
    short_attached: bool = False  # -ovalue
    short_equals: bool = False  # -o=value
    long_equals: bool = True  # --opt=value (CPython: no)
    dash_values: bool = False  # a separate value may start with "-" (CPython's getopt; npm's nopt, node and clap
    # read such an argument as the next option instead, so taking it as a value would misread the line)
    underscores: bool = False  # node: --max_old_space_size is --max-old-space-size

    def kind(self, name: str) -> str | None:
        if name in self.flags or any(name.startswith(p) for p in self.flag_prefixes):
            return "flag"
        if name in self.optional:
            return "optional"
        if name in self.valued or name in self.terminal:
            return "value"
        return None


Options = list[tuple[str, "str | None"]]


def _refuse_option(g: Grammar, name: str, token: str) -> None:
    shown = token if len(token) <= 60 else token[:57] + "…"
    if name in g.forbidden:
        raise Refused(f"{g.name}: the argument {shown!r} uses {name}, which {g.forbidden[name]}")
    raise Refused(f"{g.name}: {shown!r} is not an option goclaw knows to be harmless for {g.name} (unknown options "
                  f"are refused: without knowing whether one takes a value, no parser can tell which argument is "
                  f"the program)")


def _long_option(args: Sequence[str], i: int, g: Grammar, out: Options) -> int:
    token = args[i]
    name, eq, value = token.partition("=")
    if g.underscores:
        name = "--" + name[2:].replace("_", "-")
    name = g.aliases.get(name, name)
    kind = g.kind(name) if name not in g.forbidden else None
    if kind is None:
        _refuse_option(g, name, token)
    if kind == "flag":
        if eq:
            raise Refused(f"{g.name}: {name} takes no value ({token[:60]!r})")
        out.append((name, None))
        return i + 1
    if kind == "optional":
        out.append((name, value if eq else None))
        return i + 1
    if eq:
        if not g.long_equals:
            raise Refused(f"{g.name}: write {name} and its value as two arguments ({token[:60]!r} is an error)")
        out.append((name, value))
        return i + 1
    out.append((name, _separate_value(args, i, g, name)))
    return i + 2


def _separate_value(args: Sequence[str], i: int, g: Grammar, name: str) -> str:
    if i + 1 >= len(args):
        raise Refused(f"{g.name}: {name} needs a value")
    value = args[i + 1]
    if value.startswith("-") and value != "-" and not g.dash_values:
        raise Refused(f"{g.name}: {name} needs a value, and {value[:60]!r} reads as an option; write {name}=VALUE")
    return value


def _short_option(args: Sequence[str], i: int, g: Grammar, out: Options) -> int:
    token = args[i]
    exact = g.aliases.get(token, token)
    if exact in g.forbidden:
        _refuse_option(g, exact, token)
    kind = g.kind(exact)
    if kind is not None:  # the whole token is one option (node's -pe, -C)
        if kind == "value":
            out.append((exact, _separate_value(args, i, g, token)))
            return i + 2
        out.append((exact, None))
        return i + 1
    if not g.clusters:
        head, rest = token[:2], token[2:]
        head = g.aliases.get(head, head)
        if head in g.forbidden:
            _refuse_option(g, head, token)
        if g.kind(head) in ("value", "optional") and rest:
            if g.short_equals and rest.startswith("="):
                out.append((head, rest[1:]))
                return i + 1
            if g.short_attached and g.kind(head) == "value":
                out.append((head, rest))
                return i + 1
        _refuse_option(g, token, token)
    for j in range(1, len(token)):
        opt = "-" + token[j]
        opt = g.aliases.get(opt, opt)
        if opt in g.forbidden:
            _refuse_option(g, opt, token)
        kind = g.kind(opt)
        rest = token[j + 1:]
        if kind == "flag":
            out.append((opt, None))
            continue
        if kind == "optional":
            if rest.startswith("=") and g.short_equals:
                out.append((opt, rest[1:]))
                return i + 1
            out.append((opt, None))
            continue
        if kind == "value":
            if j > 1 and not g.cluster_values:
                raise Refused(f"{g.name}: write {opt} as an argument of its own ({token[:60]!r})")
            if rest:
                if g.short_equals and rest.startswith("="):
                    out.append((opt, rest[1:]))
                elif g.short_attached:
                    out.append((opt, rest))
                else:
                    _refuse_option(g, opt, token)
                return i + 1
            out.append((opt, _separate_value(args, i, g, opt)))
            return i + 2
        _refuse_option(g, opt, token)
    return i + 1


def scan(args: Sequence[str], g: Grammar, start: int = 0) -> tuple[Options, int]:
    """The options from `start` up to the first operand: (options, index of the operand). `--` ends the options
    (the index is then past it); a terminal option ends them after its value."""
    out: Options = []
    i = start
    while i < len(args):
        token = args[i]
        if token == "--":
            return out, i + 1
        if token == "-" or not token.startswith("-"):
            return out, i
        i = _long_option(args, i, g, out) if token.startswith("--") else _short_option(args, i, g, out)
        if out and out[-1][0] in g.terminal:
            return out, i
    return out, i


def one_option(args: Sequence[str], i: int, g: Grammar) -> tuple[Options, int]:
    """Parse the single option at `i` (npm reads options anywhere before `--`)."""
    out: Options = []
    return out, (_long_option(args, i, g, out) if args[i].startswith("--") else _short_option(args, i, g, out))


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


PYTHON = Grammar(
    "python",
    flags=_words("-b -B -d -E -h -? -I -O -P -q -s -S -u -v -V -x -R -t --help --version --help-env "
                 "--help-xoptions --help-all"),
    valued=_words("-W -X --check-hash-based-pycs"),
    terminal=_words("-m"),
    forbidden={"-c": INLINE, "-i": "starts an interactive interpreter reading the MCP protocol stream",
               "-J": "is not a CPython option"},
    clusters=True, short_attached=True, long_equals=False, dash_values=True,
)

NODE = Grammar(
    "node",
    flags=_words("""
        --no-warnings --no-deprecation --throw-deprecation --trace-deprecation --trace-warnings
        --pending-deprecation --enable-source-maps --experimental-strip-types --no-experimental-strip-types
        --experimental-transform-types --experimental-vm-modules --experimental-wasm-modules
        --experimental-json-modules --experimental-fetch --no-experimental-fetch --experimental-global-webcrypto
        --experimental-websocket --experimental-require-module --no-experimental-require-module
        --experimental-detect-module --no-experimental-detect-module --experimental-eventsource
        --experimental-sqlite --no-experimental-global-navigator --abort-on-uncaught-exception --expose-gc
        --frozen-intrinsics --disallow-code-generation-from-strings --jitless --no-addons --no-global-search-paths
        --zero-fill-buffers --trace-uncaught --trace-exit --experimental-permission --permission
        --allow-child-process --allow-worker --allow-addons --allow-wasi --use-openssl-ca --use-bundled-ca
        --use-system-ca --force-context-aware --no-network-family-autoselection --watch --watch-preserve-output
        --tls-min-v1.0 --tls-min-v1.1 --tls-min-v1.2 --tls-min-v1.3 --tls-max-v1.2 --tls-max-v1.3
        --no-experimental-websocket --experimental-network-imports --harmony --no-harmony
    """),
    valued=_words("""
        --max-old-space-size --max-semi-space-size --stack-size --max-http-header-size --title
        --unhandled-rejections --dns-result-order --conditions --disable-warning --experimental-default-type
        --disable-proto --secure-heap --secure-heap-min --network-family-autoselection-attempt-timeout
        --max-old-space-size-percentage --allow-fs-read --allow-fs-write --tls-cipher-list --watch-path
        --heapsnapshot-near-heap-limit
    """),
    aliases={"-C": "--conditions"},
    forbidden={
        "-e": INLINE, "--eval": INLINE, "-p": INLINE, "--print": INLINE, "-pe": INLINE,
        "-i": "starts the REPL on the MCP protocol stream",
        "--interactive": "starts the REPL on the MCP protocol stream",
        "-r": "preloads a module before the server", "--require": "preloads a module before the server",
        "--import": "preloads a module before the server", "--loader": "installs a module loader",
        "--experimental-loader": "installs a module loader",
        "--env-file": "reads environment variables (NODE_OPTIONS among them) from a file",
        "--env-file-if-exists": "reads environment variables (NODE_OPTIONS among them) from a file",
        "--experimental-config-file": "reads node options from a file",
        "--experimental-default-config-file": "reads node options from a file",
        "--inspect": "opens a debugger port that runs any code sent to it",
        "--inspect-brk": "opens a debugger port that runs any code sent to it",
        "--inspect-wait": "opens a debugger port that runs any code sent to it",
        "--inspect-port": "opens a debugger port that runs any code sent to it",
        "--debug-port": "opens a debugger port that runs any code sent to it",
        "--run": "runs a package.json script through a shell",
        "--test": "runs test files instead of a server",
        "--snapshot-blob": "loads code from a snapshot file", "--build-snapshot": "builds a snapshot from a script",
        "--openssl-config": "loads an OpenSSL config file (which can load engines)",
        "--experimental-policy": "redirects module loading through a policy file",
        "--security-revert": "re-enables behaviour fixed for security",
    },
    underscores=True,
)

# npx first scans its options itself (npm/bin/npx-cli.js): an option that is not one of npm's boolean settings (by
# exact name: `--no-fund` is not `fund`) takes the next argument as its value, and the first operand starts the
# package's argv. Only options both that scan and npm's own parser read the same way are listed.
NPM = Grammar(
    "npx",
    flags=_words("-y --yes --no-install -q --quiet --silent -s --prefer-offline --prefer-online --offline "
                 "--ignore-scripts --legacy-peer-deps"),
    valued=_words("-p --package --loglevel --registry"),
    optional=frozenset(),
    aliases={"-p": "--package"},
    forbidden={"-c": "runs a command line through a shell", "--call": "runs a command line through a shell",
               "--shell": "chooses the shell npx runs commands with",
               "--script-shell": "chooses the shell npx runs commands with",
               "--node-options": "sets NODE_OPTIONS for the program", "-n": "passes options to node",
               "--node-arg": "passes options to node", "--userconfig": "reads npm settings from a file",
               "--globalconfig": "reads npm settings from a file", "--prefix": "changes where npx finds programs",
               "--cache": "changes where npx finds installed packages"},
    clusters=True, cluster_values=False, short_equals=True,
)

# `npm exec` is parsed by npm alone (nopt): there `-p` is --parseable, so the package is named with --package=.
NPM_EXEC = Grammar(**{**NPM.__dict__, "name": "npm", "valued": NPM.valued - {"-p"},
                      "aliases": {k: v for k, v in NPM.aliases.items() if k != "-p"}})

BUNX = Grammar(
    "bunx",
    flags=_words("--bun --silent --verbose --no-install"),
    valued=_words("-p --package"),
    aliases={"-p": "--package"},
    short_equals=True,
)

UV = Grammar(
    "uv",
    flags=_words("""
        -q --quiet -v --verbose --offline --no-offline -n --no-cache --native-tls --no-native-tls --no-progress
        --no-config --isolated --managed-python --no-managed-python --no-python-downloads --preview --no-preview
        --no-sync --frozen --locked --no-dev --dev --no-project --all-extras --no-default-groups --all-groups
        --all-packages --exact --inexact --no-editable --upgrade -U --reinstall --refresh --no-build --no-binary
        --compile-bytecode --no-compile-bytecode --no-env-file --no-sources --active --no-active
    """),
    valued=_words("""
        --color --cache-dir --python-preference --directory --project --allow-insecure-host --from --with -w
        --python -p --index --default-index --index-url -i --extra-index-url --find-links -f --extra --group
        --only-group --no-group --package --upgrade-package -P --reinstall-package --refresh-package
        --with-editable --exclude-newer --prerelease --resolution --index-strategy --link-mode
        --no-binary-package --no-build-package
    """),
    terminal=_words("-m --module -s --script --gui-script"),
    forbidden={"--env-file": "reads environment variables from a file",
               "--config-file": "reads uv settings from a file",
               "--with-requirements": "reads the packages from a file",
               "--keyring-provider": "runs a keyring program",
               "--python-install-mirror": "downloads the interpreter from another place",
               "-c": INLINE, "-e": INLINE},
    clusters=True, short_attached=True, short_equals=True,
)

PIPX = Grammar(
    "pipx",
    flags=_words("-q --quiet -v --verbose --no-cache --system-site-packages --fetch-missing-python"),
    valued=_words("--spec --python --index-url -i"),
    forbidden={"--pip-args": "passes arguments to pip", "--editable": "installs from a local directory",
               "-e": "installs from a local directory", "--path": "runs a file by path"},
    clusters=True, short_attached=True,
)

DENO = Grammar(
    "deno",
    flags=_words("-A --allow-all -q --quiet --no-check --no-prompt --cached-only --no-remote --no-npm --no-config "
                 "--no-lock --unstable --no-code-cache --no-clear-screen --watch-hmr"),
    optional=_words("""
        --allow-read -R --allow-write -W --allow-net -N --allow-env -E --allow-sys -S --allow-run --allow-ffi
        --allow-hrtime --allow-import -I --deny-read --deny-write --deny-net --deny-env --deny-sys --deny-run
        --deny-ffi --deny-import --check --reload -r --frozen --lock --node-modules-dir --vendor
        --unsafely-ignore-certificate-errors --watch --allow-scripts --watch-exclude
    """),
    valued=_words("--seed --location --cert --log-level -L --ext --conditions"),
    flag_prefixes=("--unstable-",),
    forbidden={"--config": "reads deno settings (import maps, tasks) from a file",
               "-c": "reads deno settings (import maps, tasks) from a file",
               "--import-map": "redirects module loading through a file",
               "--env-file": "reads environment variables from a file",
               "--env": "reads environment variables from a file",
               "--preload": "preloads a module before the script", "--require": "preloads a module before the script",
               "--inspect": "opens a debugger port that runs any code sent to it",
               "--inspect-brk": "opens a debugger port that runs any code sent to it",
               "--inspect-wait": "opens a debugger port that runs any code sent to it",
               "--v8-flags": "passes options to V8", "--eval": INLINE, "--eval-file": "evaluates a file given as "
                                                                                      "an option"},
    clusters=True, short_attached=True, short_equals=True,
)

BUN = Grammar(
    "bun",
    flags=_words("--smol --bun -b --silent --no-install --prefer-offline --prefer-latest --hot --watch "
                 "--no-clear-screen --no-deprecation --throw-deprecation --expose-gc --zero-fill-buffers "
                 "--no-macros --no-addons --no-env-file -i --use-system-ca"),
    valued=_words("--title --unhandled-rejections --console-depth --conditions --port --dns-result-order "
                  "--max-http-header-size --install"),
    forbidden={"-e": INLINE, "--eval": INLINE, "-p": INLINE, "--print": INLINE,
               "-r": "preloads a module before the script", "--preload": "preloads a module before the script",
               "--require": "preloads a module before the script", "--import": "preloads a module before the script",
               "--env-file": "reads environment variables from a file",
               "-c": "reads bun settings (preloads among them) from a file",
               "--config": "reads bun settings (preloads among them) from a file",
               "--cwd": "runs from another directory (and its bunfig.toml)",
               "--inspect": "opens a debugger port that runs any code sent to it",
               "--inspect-brk": "opens a debugger port that runs any code sent to it",
               "--inspect-wait": "opens a debugger port that runs any code sent to it",
               "-d": "rewrites identifiers in the code", "--define": "rewrites identifiers in the code",
               "-l": "changes how files are loaded", "--loader": "changes how files are loaded",
               "--filter": "runs package.json scripts through a shell", "--shell": "chooses a shell"},
)

DENO_SUBCOMMANDS = frozenset("""
    eval repl task x serve add remove bench bundle cache check clean compile completions coverage doc deploy fmt init
    info install i uninstall jupyter lint lsp outdated publish test types upgrade vendor approve-scripts audit update
    help
""".split())
BUN_SUBCOMMANDS = frozenset("""
    exec repl test build install i add a remove rm update outdated audit link unlink pm init create c upgrade patch
    patch-commit publish info why feedback help
""".split())

MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# A registry package, as npm reads it: [@scope/]name[@version-or-range-or-tag] (no git, URL, path or alias).
NPM_SPEC_RE = re.compile(
    r"((?:@[A-Za-z0-9][A-Za-z0-9._~-]*/)?[A-Za-z0-9][A-Za-z0-9._~-]*)(?:@([A-Za-z0-9.^~<>=*+-]+))?\Z")
BIN_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*\Z")
UVX_COMMAND_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._+-]*)(?:@[A-Za-z0-9.*+!=<>~,-]+)?\Z")
PYTHON_REQUEST_RE = re.compile(
    r"(?:(?:cpython|pypy|graalpy|python|cp|pp|any)[@-]?)?[0-9]+(?:\.[0-9]+){0,2}[a-z0-9+]*\Z"
    r"|(?:cpython|pypy|graalpy|any)\Z"
    r"|(?:[<>=!~]=?\s*[0-9]+(?:\.[0-9*]+)*\s*,?\s*)+\Z")
JS_EXTENSIONS = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx")
SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


# --- names and paths ---------------------------------------------------------------------------------------------
def base_name(program: str) -> str:
    """A program's name without directory, version suffix or script extension, in lower case: `python3.11` →
    `python`, `/usr/bin/pip3` → `pip`, `npx-cli.js` → `npx`."""
    name = program.rsplit("/", 1)[-1].lower()
    name = re.sub(r"(?:-cli)?\.(?:js|cjs|mjs|py|exe)$", "", name)
    return re.sub(r"[-_.]?[0-9][0-9.]*t?$", "", name) or name


FAMILY_NAMES = {"python": "python", "pypy": "python", "node": "node", "nodejs": "node", "npx": "npx",
                "npm": "npm", "uv": "uv", "uvx": "uvx", "pipx": "pipx", "deno": "deno", "bun": "bun", "bunx": "bunx"}


def family_of(program: str) -> str | None:
    return FAMILY_NAMES.get(base_name(program))


def refused_program(program: str) -> str | None:
    """Why a program may never be a launcher nor be started by a package runner (by its name), or None."""
    if family_of(program):
        return None  # judged by its family's model
    raw = program.rsplit("/", 1)[-1].lower()
    for name in dict.fromkeys((raw, base_name(program))):
        if name in SHELLS:
            return f"{program} is a shell"
        if name in EXEC_WRAPPERS:
            return f"{program} starts other programs named in its arguments"
        if name in CODE_RUNNERS or name in PYTHON_RUNNER_MODULES or name in JS_RUNNER_PACKAGES:
            return f"{program} runs code or programs named on its command line, and goclaw has no model of its options"
    return None


def search_dirs() -> list[str]:
    """Where a program named without a path is found: the system directories and this process's PATH (what a
    server's PATH is built from), absolute entries only."""
    dirs = list(SEARCH_DIRS)
    for entry in os.environ.get("PATH", "").split(":"):
        if entry and os.path.isabs(entry) and entry not in dirs:
            dirs.append(entry)
    return dirs


def host_program(name: str) -> str | None:
    """The path of the program `name` on the host, if there is one."""
    for directory in search_dirs():
        path = os.path.join(directory, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def resolved(command: str) -> str | None:
    """The real file a launcher runs (symlinks followed), when it exists on this host."""
    path = command if command.startswith("/") else host_program(command)
    if path is None or not os.path.exists(path):
        return None
    return os.path.realpath(path)


def _program_path(path: str, shown: str, cwd: str = "") -> str:
    """A script or program path, refused when it names a device or process file (stdin among them) or climbs out
    of the server's directory; returns the path to judge (against `cwd` when a runner changed directory; symlinks
    followed when it exists here)."""
    if not path:
        raise Refused(f"{shown}: an empty program path")
    if path == "-":
        raise Refused(f"{shown} {STDIN}")
    if cwd and not path.startswith("/"):
        if ".." in PurePosixPath(path).parts:
            raise Refused(f"{shown}: the program path {path[:80]!r} climbs out of its directory")
        path = os.path.join(cwd, path)
    pure = PurePosixPath(path)
    if not pure.is_absolute() and ".." in pure.parts:
        raise Refused(f"{shown}: the program path {path[:80]!r} climbs out of the server's directory")
    candidates = [os.path.normpath(path)] if pure.is_absolute() else []
    if pure.is_absolute() and os.path.exists(path):
        candidates.append(os.path.realpath(path))
    for candidate in candidates:
        if candidate in ("/dev", "/proc", "/sys") or candidate.startswith(("/dev/", "/proc/", "/sys/")):
            raise Refused(f"{shown}: {path[:80]!r} is a device or process file ({STDIN}, or another process's)")
    return candidates[-1] if candidates else path


def _installed_runner(path: str, shown: str, family: str) -> None:
    """A script that is part of a code runner's own installation: npm's npx-cli.js, a standard-library module run
    as a file (`python3 /usr/lib/python3.11/timeit.py CODE`), pip's __main__.py, /usr/bin/pip3."""
    parts = PurePosixPath(path).parts
    for index, part in enumerate(parts[:-1]):
        if part == "node_modules" or (part == "nodejs" and index and parts[index - 1] in ("share", "lib")):
            package = parts[index + 1]
            if package.startswith("@") and index + 2 < len(parts):
                package += "/" + parts[index + 2]
            if package == ".bin" and index + 2 < len(parts):  # node_modules/.bin/<program>: a package's program
                package = parts[index + 2]
                if family_of(package) or refused_program(package):
                    raise Refused(f"{shown}: {path[:120]} is the program {package}, which runs code or commands "
                                  f"named on its command line")
            if package.lower() in JS_RUNNER_PACKAGES:
                raise Refused(f"{shown}: {path[:120]} belongs to {package}, which runs code or commands named on "
                              f"its command line")
    if family == "python":
        packages = [i for i, part in enumerate(parts) if part in ("site-packages", "dist-packages")]
        if packages and packages[-1] + 1 < len(parts):
            top = re.sub(r"\.py[cw]?$", "", parts[packages[-1] + 1])
            if why := python_module_refusal(top):
                raise Refused(f"{shown}: {path[:120]} is part of {why}")
        elif any(re.fullmatch(r"python[0-9.]*t?\.zip", part) or re.fullmatch(r"python[0-9]+(?:\.[0-9]+)*t?", part)
                 and index and parts[index - 1] in ("lib", "lib64") for index, part in enumerate(parts[:-1])):
            raise Refused(f"{shown}: {path[:120]} is a standard-library module run as a script (timeit, pdb, code, "
                          f"trace … turn their arguments into code); no MCP server lives there")
    if len(parts) >= 2 and parts[-2] in ("bin", "sbin", "libexec"):
        if family := family_of(parts[-1]):
            raise Refused(f"{shown}: {path[:120]} is the {family} launcher itself, not a server script")
        if why := refused_program(parts[-1]):
            raise Refused(f"{shown}: {path[:120]}: {why}")


def python_module_refusal(module: str) -> str | None:
    """Why `python -m module` (or its files run as scripts) is refused, or None."""
    top = module.split(".", 1)[0]
    if top.startswith("_") or top.lower() in STDLIB:
        return (f"the standard library ({top}): no MCP server lives there, and modules such as timeit, cProfile, "
                f"trace, pdb, code, runpy, pydoc and asyncio run code given on their command line")
    if top.lower() in PYTHON_RUNNER_MODULES:
        return f"{top}, which runs code, commands or packages named on its command line"
    return None


# --- the families ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ctx:
    """Where a parse is: how many runners deep, and the directory relative program paths resolve against when a
    runner changed it (`uv --directory /usr/lib/python3.11 run timeit.py` runs the stdlib's timeit)."""

    depth: int = 0
    cwd: str = ""

    def deeper(self) -> "Ctx":
        return Ctx(self.depth + 1, self.cwd)

    def within(self, directory: str) -> "Ctx":
        return Ctx(self.depth, os.path.normpath(os.path.join(self.cwd, directory)) if self.cwd or
                   directory.startswith("/") else directory)


def _python(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    options, index = scan(args, _named(PYTHON, shown))
    for name, value in options:
        value = value or ""
        if name == "-m":
            if not MODULE_RE.match(value):
                raise Refused(f"{shown} -m: {value[:60]!r} is not a module name")
            if why := python_module_refusal(value):
                raise Refused(f"{shown} -m {value[:60]}: refused, it is {why}")
            return  # everything after the module is its own argv
        if name == "-X" and value.partition("=")[0] not in PYTHON_XOPTIONS:
            raise Refused(f"{shown} -X {value[:60]}: only diagnostic -X options are allowed "
                          f"({', '.join(sorted(PYTHON_XOPTIONS))})")
        if name == "-W" and "." in (value.split(":") + ["", "", ""])[2]:
            raise Refused(f"{shown} -W {value[:60]}: a warning filter whose category names a module imports that "
                          f"module at startup; use a built-in category")
        if name == "--check-hash-based-pycs" and value not in ("always", "default", "never"):
            raise Refused(f"{shown} --check-hash-based-pycs takes always, default or never")
    if index >= len(args):
        raise Refused(f"{shown} without a script {STDIN}")
    script = _program_path(args[index], shown, ctx.cwd)
    _installed_runner(script, shown, "python")


def _js_entry(entry: str, shown: str, ctx: Ctx, *, urls: bool) -> None:
    """A node / deno / bun program operand: a file (or, for deno, a remote module), never inline code or stdin."""
    if entry == "-":
        raise Refused(f"{shown} - {STDIN}")
    if SCHEME_RE.match(entry):
        scheme = entry.split(":", 1)[0].lower()
        if scheme in ("data", "blob", "javascript"):
            raise Refused(f"{shown}: a {scheme}: URL {INLINE}")
        if scheme == "npm":
            rest = entry[4:]
            name = "/".join(rest.split("/")[:2]) if rest.startswith("@") else rest.split("/")[0]
            name = re.match(r"@?[^@]*", name).group(0)
            if name.lower() in JS_RUNNER_PACKAGES or family_of(name.rsplit("/", 1)[-1]):
                raise Refused(f"{shown}: npm:{name} runs code or commands named on its command line")
            return
        if scheme == "file":
            entry = entry[5:].lstrip("/")
            entry = "/" + entry
        elif urls and scheme in ("jsr", "https", "http"):
            return  # a remote module: a package, like npx's
        else:
            raise Refused(f"{shown}: {entry[:60]!r} is not a file path")
    path = _program_path(entry, shown, ctx.cwd)
    _installed_runner(path, shown, "node")


def _node(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    _, index = scan(args, _named(NODE, shown))
    if index >= len(args):
        raise Refused(f"{shown} without a script starts the REPL, which {STDIN}")
    _js_entry(args[index], shown, ctx, urls=False)


def _npm_spec(spec: str, shown: str) -> str:
    """A package as npx / bunx installs it from the registry; returns its name. Git, URL, path, file and alias
    specs are refused (their program can't be told from the spec)."""
    match = NPM_SPEC_RE.match(spec)
    if not match:
        raise Refused(f"{shown}: {spec[:80]!r} is not a registry package (name, @scope/name, name@version); git, "
                      f"URL, path and alias specs are refused")
    return match.group(1)


def _package_runner(options: Options, operands: Sequence[str], ctx: Ctx, shown: str) -> None:
    """npx / npm exec / bunx after their options: `--package` specs, then the package (or, with --package, the
    command) and its own argv."""
    packages = [value or "" for name, value in options if name == "--package"]
    for spec in packages:
        _npm_spec(spec, shown)
    if not operands:
        raise Refused(f"{shown} without a package starts an interactive shell")
    first, rest = operands[0], list(operands[1:])
    if packages:
        if not BIN_NAME_RE.match(first):
            raise Refused(f"{shown}: {first[:80]!r} is not a command name (a path runs a host program)")
        run_command(first, rest, ctx, shown)
        return
    name = _npm_spec(first, shown)
    if name.lower() in JS_RUNNER_PACKAGES:
        raise Refused(f"{shown} {name}: refused, it runs code or commands named on its command line")
    # npx runs the program of that name from the project's node_modules/.bin or npm's global bin directory
    # (/usr/bin for a system npm) before it looks for a package: any host program is reachable that way
    if "/" not in first and (path := host_program(first)) and not family_of(first):
        raise Refused(f"{shown} {first[:60]}: {shown} would run the host program {path}, not a package; make it a "
                      f"launcher of its own if that is meant")
    run_command(name.rsplit("/", 1)[-1], rest, ctx, shown, host_checked=True)


def _npx(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    options, index = scan(args, _named(NPM, shown))
    _package_runner(options, args[index:], ctx, shown)


def _npm(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    """npm reads its options anywhere before `--`; only `npm exec` / `npm x` start a server."""
    options: Options = []
    operands: list[str] = []
    grammar, i = _named(NPM_EXEC, shown), 0
    while i < len(args):
        token = args[i]
        if token == "--":
            operands += args[i + 1:]
            break
        if token.startswith("-") and token != "-":
            parsed, i = one_option(args, i, grammar)
            options += parsed
            continue
        operands.append(token)
        i += 1
    if not operands or operands[0] not in ("exec", "x"):
        raise Refused(f"{shown} {operands[0][:40] if operands else ''}: only `npm exec` starts a server (npm's other "
                      f"commands run package scripts through a shell)")
    _package_runner(options, operands[1:], ctx, f"{shown} exec")


def _uv_values(options: Options, shown: str, ctx: Ctx) -> tuple[str | None, Ctx]:
    """Check uv option values: (the terminal option used, -m / --script, if any; the context, whose directory
    `--directory` / `--project` change)."""
    for name, value in options:
        value = value or ""
        if name in ("--python", "-p") and not PYTHON_REQUEST_RE.match(value):
            raise Refused(f"{shown} {name} {value[:60]!r}: give a Python version (3.12, >=3.11, cpython@3.12), not "
                          f"a path or program name")
        if name in ("--directory", "--project", "--with-editable", "--cache-dir"):
            _program_path(value, shown, ctx.cwd)
            if name in ("--directory", "--project"):
                ctx = ctx.within(value)
        if name in ("--from", "--with", "-w") and (not value or value.startswith("-")):
            raise Refused(f"{shown} {name}: a package requirement")
        if name in ("-m", "--module"):
            if not MODULE_RE.match(value):
                raise Refused(f"{shown} {name}: {value[:60]!r} is not a module name")
            if why := python_module_refusal(value):
                raise Refused(f"{shown} {name} {value[:60]}: refused, it is {why}")
            return name, ctx
        if name in ("-s", "--script", "--gui-script"):
            _installed_runner(_program_path(value, shown, ctx.cwd), shown, "python")
            return name, ctx
    return None, ctx


def _uv(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    grammar = _named(UV, shown)
    options, index = scan(args, grammar)
    terminal, ctx = _uv_values(options, shown, ctx)
    if terminal is None and index < len(args) and args[index] == "run":
        _uv_run(args[index + 1:], ctx, f"{shown} run")
        return
    if terminal is None and index < len(args) and args[index] == "tool":
        options, after = scan(args, grammar, index + 1)
        terminal, ctx = _uv_values(options, shown, ctx)
        if terminal is None and after < len(args) and args[after] == "run":
            _uvx(args[after + 1:], ctx, f"{shown} tool run")
            return
    what = args[index] if index < len(args) else ""
    raise Refused(f"{shown} {what[:40]}: only `uv run` and `uv tool run` start a server")


def _run_operand(command: str, rest: Sequence[str], ctx: Ctx, shown: str) -> None:
    """`uv run` / `pipx run` operand: a Python script file, or a command."""
    if command == "-":
        raise Refused(f"{shown} - {STDIN}")
    if SCHEME_RE.match(command) and "/" in command:
        raise Refused(f"{shown}: {command[:80]!r} runs a script fetched from a URL; install it as a package")
    if command.endswith((".py", ".pyw")):
        _installed_runner(_program_path(command, shown, ctx.cwd), shown, "python")
        return
    if "/" in command:
        raise Refused(f"{shown}: {command[:80]!r} runs a program file directly; make it a launcher of its own")
    run_command(command, rest, ctx, shown)


def _uv_run(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    options, index = scan(args, _named(UV, shown))
    terminal, ctx = _uv_values(options, shown, ctx)
    if terminal:
        return
    if index >= len(args):
        raise Refused(f"{shown} needs a command or script")
    _run_operand(args[index], args[index + 1:], ctx, shown)


def _uvx(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    options, index = scan(args, _named(UV, shown))
    terminal, ctx = _uv_values(options, shown, ctx)
    if terminal:
        raise Refused(f"{shown}: -m / --script belong to `uv run`")
    if index >= len(args):
        raise Refused(f"{shown} needs a command")
    match = UVX_COMMAND_RE.match(args[index])
    if not match:
        raise Refused(f"{shown}: {args[index][:80]!r} is not a tool name (name or name@version)")
    run_command(match.group(1), args[index + 1:], ctx, shown)


def _pipx(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    grammar = _named(PIPX, shown)
    _, index = scan(args, grammar)
    if index >= len(args) or args[index] != "run":
        raise Refused(f"{shown}: only `pipx run` starts a server")
    options, index = scan(args, grammar, index + 1)
    for name, value in options:
        if name == "--python" and not PYTHON_REQUEST_RE.match(value or ""):
            raise Refused(f"{shown} --python {str(value)[:60]!r}: give a Python version, not a path or program")
    if index >= len(args):
        raise Refused(f"{shown} run needs an app")
    _run_operand(args[index], args[index + 1:], ctx, f"{shown} run")


def _deno(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    grammar = _named(DENO, shown)
    _, index = scan(args, grammar)
    if index < len(args) and args[index] == "run":
        _, index = scan(args, grammar, index + 1)
    elif index < len(args) and args[index] in DENO_SUBCOMMANDS:
        sub = args[index]
        why = {"eval": INLINE, "repl": f"starts the REPL, which {STDIN}",
               "task": "runs a task's command line through a shell"}.get(sub, "only `deno run` (or a script) "
                                                                              "starts a server")
        raise Refused(f"{shown} {sub}: {why}")
    if index >= len(args):
        raise Refused(f"{shown} without a script starts the REPL, which {STDIN}")
    _js_entry(args[index], shown, ctx, urls=True)


def _bun(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    grammar = _named(BUN, shown)
    _, index = scan(args, grammar)
    if index < len(args) and args[index] == "x":
        _bunx(args[index + 1:], ctx, f"{shown} x")
        return
    if index < len(args) and args[index] == "run":
        _, index = scan(args, grammar, index + 1)
    if index >= len(args):
        raise Refused(f"{shown} needs a script file")
    target = args[index]
    if target in BUN_SUBCOMMANDS:
        raise Refused(f"{shown} {target}: only `bun run FILE` (or `bun FILE`) starts a server")
    if target != "-" and not SCHEME_RE.match(target) and "/" not in target and not target.endswith(JS_EXTENSIONS):
        raise Refused(f"{shown}: {target[:80]!r} is not a script file (by name bun runs package.json scripts, through "
                      f"a shell, and programs); give the file's path")
    _js_entry(target, shown, ctx, urls=False)


def _bunx(args: Sequence[str], ctx: Ctx, shown: str) -> None:
    options, index = scan(args, _named(BUNX, shown))
    _package_runner(options, args[index:], ctx, shown)


def _named(grammar: Grammar, shown: str) -> Grammar:
    """The grammar under the name the messages use (`uvx`, `npm exec` …)."""
    return grammar if grammar.name == shown else Grammar(**{**grammar.__dict__, "name": shown})


FAMILIES: dict[str, Callable[[Sequence[str], Ctx, str], None]] = {
    "python": _python, "node": _node, "npx": _npx, "npm": _npm, "uv": _uv, "uvx": _uvx, "pipx": _pipx,
    "deno": _deno, "bun": _bun, "bunx": _bunx,
}


def run_command(name: str, rest: Sequence[str], ctx: Ctx, via: str, *, host_checked: bool = False) -> None:
    """A command a package runner starts: an interpreter family is judged by its own model; shells, wrappers and
    code runners are refused; a host program is refused (the runner would reach any program on PATH)."""
    if ctx.depth >= MAX_DEPTH:
        raise Refused(f"{via}: too many runners inside each other")
    family = family_of(name)
    if family is not None:
        FAMILIES[family](rest, ctx.deeper(), f"{via} {name}")
        return
    if why := refused_program(name):
        raise Refused(f"{via} {name}: refused, {why}")
    if not host_checked and (path := host_program(name)):
        raise Refused(f"{via} {name}: {via} would run the host program {path}, not a package; make it a launcher of "
                      f"its own if that is meant")


# --- entry points ------------------------------------------------------------------------------------------------
def launcher_refusal(command: str) -> str | None:
    """Why `command` may never be an enabled launcher (a shell, an exec wrapper, an interpreter or runner goclaw
    has no model of — by its name and by the file it resolves to on this host), or None."""
    if why := refused_program(command):
        return f"{why}: it can't be an MCP launcher"
    real = resolved(command)
    if real is not None:
        if why := refused_program(real):
            return f"{command} is {real}, and {why}: it can't be an MCP launcher"
        named, real_family = family_of(command), family_of(real)
        same = {"bunx": "bun", "uvx": "uv", "npx": "npm"}  # installed as links to (or scripts of) the other
        if named and real_family and same.get(named, named) != same.get(real_family, real_family):
            return f"{command} is {real}, a {real_family} launcher, not {named}"
    return None


def launch_family(command: str) -> str | None:
    """The family whose model judges a launch of `command` (by its name, else by the file it resolves to)."""
    family = family_of(command)
    if family is None and (real := resolved(command)) is not None:
        family = family_of(real)
    return family


def launch_refusal(command: str, args: Sequence[str], denied_args: Sequence[str] = ()) -> Refused | None:
    """Why `command args` may not be launched, or None. Modelled families are parsed; a plain program is judged
    by its launcher's `denied_args` (whole arguments, `--flag=value`, short clusters, `"-m timeit"` pairs,
    `"data:*"` prefixes)."""
    if why := launcher_refusal(command):
        return Refused(why, "command")
    family = launch_family(command)
    try:
        if family is not None:
            FAMILIES[family](list(args), Ctx(), command.rsplit("/", 1)[-1])
            return None
        for index, arg in enumerate(args):
            following = args[index + 1] if index + 1 < len(args) else ""
            if flag := denied_arg(arg, denied_args, following):
                return Refused(f"the argument {arg[:60]!r} uses {flag}, which {INLINE} with {command}; start a "
                               f"server package or script instead")
    except Refused as refused:
        return refused
    return None


def denied_arg(arg: str, denied: Sequence[str], following: str = "") -> str | None:
    """The denied launcher flag `arg` uses: the flag itself, `--flag=…`, a short flag inside a cluster such as
    `-Ic` / `-cCODE` (for one-letter flags), a pair `"-m timeit"` (this argument and the next), or a prefix
    `"data:*"`. Whole-argument matching: `mcp-remote` is not `-r`."""
    for flag in denied:
        if " " in flag:
            first, _, second = flag.partition(" ")
            if arg == first and following == second:
                return flag
            continue
        if flag.endswith("*") and len(flag) > 1:
            if arg.startswith(flag[:-1]):
                return flag
            continue
        if arg == flag or (flag.startswith("--") and arg.startswith(flag + "=")):
            return flag
        if len(flag) == 2 and flag[0] == "-" and flag[1] != "-" and arg.startswith("-") and not arg.startswith("--"):
            if flag[1] in arg[1:]:
                return flag
    return None
