"""Rule group `filter_bypass`: Shell escapes hidden in sed/vim/tar/zip/git/rsync/ssh options, ${!var}/${var@P}, control
chars.
"""
from __future__ import annotations

import re

from ..command import operands, short_flags
from ..vocabulary import SHELLS, basename, interpreter_name, word_set
from ..wrappers import git_subcommand, shell_args
from .base import Rule, RuleGroup
from .common import hook_value_ok

GROUP = RuleGroup(
    "filter_bypass",
    "Shell escapes hidden in sed/vim/tar/zip/git/rsync/ssh options, ${!var}/${var@P}, control chars.",
)


def shell_escape_in_options(analysis, c):
    nm, a = c.name, c.args
    out = []
    if c.wrappers[-1:] == ["find"] and (nm in SHELLS or interpreter_name(nm) in SHELLS) and c.code is None and \
            (shell_args(a)[1] is None or set(short_flags(a)) & set("isp")):  # `-exec bash -n {}` checks/runs a found script
        out.append(("find -exec spawns a shell", True))
    if c.parent and (nm in SHELLS or interpreter_name(nm) in SHELLS) and c.code is None and shell_args(a)[1] is None:
        out.append((f"{c.parent} spawns an interactive shell (escape from a restricted program)", True))
    if nm == "sed":
        scripts = [a[i + 1] for i, x in enumerate(a[:-1]) if x in ("-e", "--expression")] or operands(a, word_set("-f -l"))[:1]
        for s in scripts:
            if re.search(r"(^|[;\n{}])\s*(\d+|\$|/[^/]*/)?\s*e(\s|;|$)", s) or re.search(r"s(.)(?:(?!\1).)*\1(?:(?!\1).)*\1[gpiIm0-9w]*e", s):
                out.append(("sed 'e' executes shell commands", True))
    if nm in ("vim", "vi", "nvim", "ex", "view", "rvim"):
        for i, x in enumerate(a):
            v = a[i + 1] if x in ("-c", "--cmd") and i + 1 < len(a) else x[1:] if x.startswith("+") else ""
            if re.search(r"!|\bsh(ell)?\b|system\(|terminal|py3?\s|lua\s", v):
                out.append((f"{nm} command runs a shell", True))
    if nm in ("tar", "bsdtar") and any(x.startswith(("--checkpoint-action", "--to-command", "--rsh-command", "--info-script", "--new-volume-script", "--use-compress-program=sh", "--use-compress-program=bash")) for x in a):
        out.append(("tar option runs a command", True))
    if nm == "zip" and any(x in ("-TT", "--unzip-command") or x.startswith("--unzip-command") for x in a):
        out.append(("zip -TT runs a command", True))
    if nm == "git":
        sub, rest = git_subcommand(a)
        # -u is --upload-pack only for clone/ls-remote (push -u = --set-upstream); rebase --exec is analysed as code
        bad = ("--upload-pack", "--receive-pack") + (() if sub == "rebase" else ("--exec",)) + (("-u",) if sub in ("clone", "ls-remote") else ())
        if any(x.startswith(bad) and x != "--exec-path" or x.startswith("ext::") for x in a):
            out.append(("git option runs a command", True))
    if nm == "rsync":
        for i, x in enumerate(a):
            v = a[i + 1] if x in ("-e", "--rsh", "--rsync-path") and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith(("--rsh=", "--rsync-path=")) else None
            if v and basename(v.split()[0] if v.split() else "") not in ("ssh", "rsh", "rsync", "sudo") or v and re.search(r"[;|&`$]", v):
                out.append(("rsync -e/--rsync-path runs a non-ssh command", True))
    if nm in ("ssh", "scp", "sftp", "autossh") and re.search(r"(ProxyCommand|LocalCommand|PermitLocalCommand)\s*=?\s*", " ".join(a), re.I):
        vals = [(m.group(1), m.group(2)) for x in a for m in [re.match(r"^(?:-o)?\s*(ProxyCommand|LocalCommand|PermitLocalCommand)\s*(?:=\s*|\s+)(.*)$", x, re.I | re.S)] if m]
        # a jump through a bastion (`ProxyCommand=ssh -W %h:%p bastion`, `aws ssm start-session ..`) is routine
        if not vals or any(k.lower() != "proxycommand" or not hook_value_ok("ProxyCommand", v) for k, v in vals):
            out.append(("ssh option runs a local command", True))
    if nm in ("man", "less", "more") and any(x.startswith(("-P", "--pager")) for x in a):
        out.append((f"{nm} custom pager command", True))
    if c.indirect:
        out.append(("indirect/prompt expansion (${!var} / ${var@P})", c.unknown or c.code is not None or "prompt" in analysis.flags))
    return out


def obfuscated_syntax(analysis):
    out = []
    if "prompt" in analysis.flags:
        out.append(("${var@P} prompt expansion can execute command substitutions", True))
    for f, why in (("control", "control characters in command"), ("ansi_c", "ANSI-C quoted escapes"), ("ifs", "$IFS used as separator"),
                   ("obfuscated_name", "quoted/escaped command name"), ("unbalanced", "unbalanced quoting")):
        if f in analysis.flags:
            out.append((why, False))
    return out


RULES = (
    Rule(
        "shell_escape_in_options",
        GROUP.name,
        "Shell escapes hidden in options of sed/vim/tar/zip/git/rsync/ssh/man, find -exec shells, indirect expansion.",
        shell_escape_in_options,
    ),
    Rule(
        "obfuscated_syntax",
        GROUP.name,
        "Observe-level flags for control characters, ANSI-C quoting, $IFS tricks, quoted command names, unbalanced quotes.",
        obfuscated_syntax,
        whole_line=True,
    ),
)
