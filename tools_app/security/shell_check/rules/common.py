"""Helpers used by more than one rule group.
"""
from __future__ import annotations

import re

from ..analysis import analyse
from ..command import is_loopback
from ..vocabulary import (
    CRED_HELPERS,
    HOOK_PROGRAMS,
    PROCESS_PATH,
    UNKNOWN_OUTPUT,
    UNKNOWN_VALUE,
    WEBSHELL,
    basename,
)
from ..wrappers import git_subcommand


# The whole check, handed over by the check module when it loads (it imports every rule group, this one included):
# a git hook value is a command of its own, judged by every rule.
_evaluator = None


def use_evaluator(evaluate) -> None:
    global _evaluator
    _evaluator = evaluate


def data_store_abuse(analysis, c):
    """Data stores and credential stores driven into writing files or handing out secrets. Two groups ask (by the
    group of each hit), so the answer is memoized on the command."""
    memo = c.__dict__.get("_data_store_abuse")
    if memo is None:
        memo = c.__dict__["_data_store_abuse"] = _data_store_abuse(c)
    return memo


def _data_store_abuse(c):
    nm, low = c.name, [x.lower() for x in c.args]
    j = " ".join(low)
    if nm in ("redis-cli", "valkey-cli", "keydb-cli") and (re.search(r"\bconfig set (dir|dbfilename)\b|\bmodule load\b", j) or
                                                           re.search(r"\b(slaveof|replicaof) (?!no\b)(\S+)", j) and not is_loopback(re.search(r"\b(slaveof|replicaof) (\S+)", j).group(2))):
        return [("code_injection", f"{nm} makes the server write files or load code (CONFIG SET dir/dbfilename, MODULE LOAD, rogue replica)", True)]
    if nm in ("mysql", "mariadb", "psql", "sqlite3") and re.search(r"\binto\s+(outfile|dumpfile)\b|\bcopy\b.*\bto\s+'/", j) and \
            (WEBSHELL.search(" ".join(c.args)) or re.search(r"(outfile|dumpfile|to)\s+'(/var/www|/usr/share/nginx|/srv/www|/root/\.ssh|/home/[^/']+/\.ssh|/etc/cron)", j)):
        return [("code_injection", f"{nm} writes a web shell / key / cron file through SQL", True)]
    if nm == "git" and git_subcommand(c.args)[0] in ("credential", "credential-store", "credential-cache", "credential-manager") and set(low) & {"fill", "get"}:
        return [("data_exfiltration", "git credential fill prints stored passwords/tokens", True)]
    if nm == "security" and low[:1] and low[0] in ("find-generic-password", "find-internet-password", "dump-keychain") and ("-w" in low or "-g" in low or low[0] == "dump-keychain"):
        return [("data_exfiltration", "macOS keychain secret read", True)]
    return []


def hook_value_ok(key: str, value: str) -> bool:
    """A command-valued setting (GIT_SSH_COMMAND, core.pager, ProxyCommand ...) that only runs a known program harmlessly.

    The value is analysed like a command line: every command in it must be on the key's list and no rule may deny it."""
    k = key.lower()
    if k == "core.fsmonitor":
        return value.strip().lower() in ("true", "false", "")
    if k == "credential.helper":
        w = value.split()
        return not w or (w[0] in CRED_HELPERS and all(re.fullmatch(r"--(timeout=\d+|file=[\w./~-]+|socket=[\w./~-]+)", x) for x in w[1:]))
    if k == "core.hookspath":  # a hooks directory tracked in the repository (.husky, .githooks); not /tmp or ../..
        v = value.strip()
        return v == "/dev/null" or bool(v) and not v.startswith(("/", "~", "-")) and ".." not in v.split("/") and not re.search(r"[\s$`;|&<>" + UNKNOWN_VALUE + UNKNOWN_OUTPUT + "]", v)
    progs = next((ps for rx, ps in HOOK_PROGRAMS if rx.match(key)), None)
    if progs is None or not value.strip() or any(m in value for m in (UNKNOWN_OUTPUT, PROCESS_PATH)) or len(value) > 500:
        return False
    try:
        sub = analyse(value)
        if not sub.cmds or any(x.unknown or x.code is not None or basename(x.name) not in progs for x in sub.cmds):
            return False
        if any(x.name == "ssh" and any(y == "-F" or y.startswith("-F") for y in x.args) for x in sub.cmds):
            return False  # an ssh config file can carry its own ProxyCommand/LocalCommand
        return not any(d for _, _, d in _evaluator(sub, frozenset()))
    except Exception:
        return False
