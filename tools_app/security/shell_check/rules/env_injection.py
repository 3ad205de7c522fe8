"""Rule group `env_injection`: LD_PRELOAD/BASH_ENV/PROMPT_COMMAND/GIT_SSH_COMMAND style variables and git -c hooks.
"""
from __future__ import annotations

import posixpath
import re

from ..command import normalize_path, operands, written_paths
from ..vocabulary import (
    DANGER_ENV,
    GIT_BAD_KEYS,
    PROCESS_PATH,
    SHELLS,
    UNKNOWN_OUTPUT,
    UNKNOWN_VALUE,
    WORLD_WRITABLE,
    shown,
    word_set,
)
from ..wrappers import git_subcommand
from .base import Rule, RuleGroup
from .common import hook_value_ok

GROUP = RuleGroup(
    "env_injection",
    "LD_PRELOAD/BASH_ENV/PROMPT_COMMAND/GIT_SSH_COMMAND style variables and git -c hooks.",
)


def _libpath_ok(v: str) -> bool:
    """LD_LIBRARY_PATH/DYLD_LIBRARY_PATH pointing at build output or toolchains (./build/lib, $CONDA_PREFIX/lib,
    /usr/local/cuda/lib64) is normal development; a world-writable drop directory (/tmp, /dev/shm) or a command
    output is the library-hijack pattern."""
    if UNKNOWN_OUTPUT in v or PROCESS_PATH in v:
        return False
    for e in v.split(":"):
        if not e or e.startswith(UNKNOWN_VALUE):  # the previous value, or $CONDA_PREFIX/lib
            continue
        n = normalize_path(e)
        if n.startswith("/") and (n == "/" or n.startswith(WORLD_WRITABLE)):
            return False
        if not n.startswith(("/", "~")) and posixpath.normpath(n).startswith("../.."):
            return False
    return True


def _node_options_ok(v: str) -> bool:
    """NODE_OPTIONS preloads: packages (`dotenv/config`, `@opentelemetry/..`, `ts-node/register`) and project-relative
    files are normal; absolute, home, URL/data: or unresolved modules are the injection pattern."""
    w = v.split()
    for i, x in enumerate(w):
        mod = None
        if x in ("-r", "--require", "--import", "--loader", "--experimental-loader") and i + 1 < len(w):
            mod = w[i + 1]
        elif re.match(r"^--(require|import|loader|experimental-loader)=", x):
            mod = x.split("=", 1)[1]
        elif x.startswith("-r") and len(x) > 2 and not x.startswith("--"):
            mod = x[2:]
        if mod is not None:
            mod = mod.strip("'\"")
            if not mod or mod.startswith(("/", "~", "data:", "http:", "https:", "file:")) or UNKNOWN_VALUE in mod or UNKNOWN_OUTPUT in mod or ".." in mod.split("/"):
                return False
    return True


def dangerous_environment_or_git_hook(analysis, c):
    out = []
    for k, v in c.assigns.items():
        if k in ("LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "DYLD_FALLBACK_LIBRARY_PATH"):
            bad = not _libpath_ok(v)
        elif k in ("GIT_SSH_COMMAND", "GIT_EXTERNAL_DIFF"):
            bad = not hook_value_ok(k, v)
        elif k == "NODE_OPTIONS":
            bad = not _node_options_ok(v)
        else:
            bad = (k in DANGER_ENV and (k != "ENV" or c.name in SHELLS)) or k.startswith("BASH_FUNC_") or (k == "PS4" and (UNKNOWN_OUTPUT in v or UNKNOWN_VALUE in v))
        if bad:
            out.append((f"sets {k}", True))
    if c.name == "git":
        for i, x in enumerate(c.args):
            kv = c.args[i + 1] if x == "-c" and i + 1 < len(c.args) else x[2:] if x.startswith("-c") and len(x) > 2 else None
            if kv and GIT_BAD_KEYS.match(kv.split("=", 1)[0]) and not hook_value_ok(kv.split("=", 1)[0], kv.split("=", 1)[1] if "=" in kv else "true"):
                out.append((f"git -c {kv.split('=', 1)[0]} runs a command", True))
        sub, rest = git_subcommand(c.args)
        if sub == "config":
            if any(x in ("--get", "--get-all", "--get-regexp", "--unset", "--unset-all", "-l", "--list", "--remove-section") for x in rest) or rest[:1] in (["get"], ["unset"], ["list"]):
                rest = []
            ops = operands(rest, word_set("-f --file --blob --type --default --comment"))
            if ops[:1] == ["set"]:
                ops = ops[1:]
            if len(ops) >= 2 and GIT_BAD_KEYS.match(ops[0]) and not hook_value_ok(ops[0], ops[1]):
                out.append((f"git config {ops[0]} installs a command hook", True))
    out += [(f"writes {shown(t)}", True) for t in written_paths(c) if normalize_path(t).startswith("/etc/ld.so")]
    return out


RULES = (
    Rule(
        "dangerous_environment_or_git_hook",
        GROUP.name,
        "LD_PRELOAD-style variables, command-valued git settings and ld.so configuration.",
        dangerous_environment_or_git_hook,
    ),
)
