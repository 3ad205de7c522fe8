"""The analysed simple command (`SimpleCommand`) and what its words mean: operands and flags, the hosts it
talks to, and the paths it writes, classified (critical, system, secret, persistence).
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from .lexer import unescape
from .vocabulary import (
    HOME_RC,
    PERSIST_PREFIX,
    PROCESS_PATH,
    SAFE_DEV,
    SECRET_HOME,
    SYS_DIRS,
    SYSTEM_SUBDIRS,
    UNKNOWN_OUTPUT,
    UNKNOWN_VALUE,
    URL,
    basename,
    word_set,
)

# ---------------------------------------------------------------- analysed command

@dataclass(eq=False)
class SimpleCommand:
    argv: list
    assigns: dict
    redirs: list
    pipe: int
    stage: int
    bg: bool = False
    depth: int = 0
    wrappers: list = field(default_factory=list)
    wrapped: list = field(default_factory=list)  # full argv of each unwrapped wrapper (sudo -u x ...)
    subs: list = field(default_factory=list)   # commands inside $(..)/`..` of this command's words
    procs: list = field(default_factory=list)  # (direction, [commands]) of <(..)/>(..)
    code: list | None = None                   # inner commands of sh -c / eval / su -c / ssh host cmd
    icode: str | None = None                   # inline interpreter program
    unknown: bool = False                      # command word built from unresolved expansions (or a glob)
    globbed: bool = False                      # command word contains glob characters (/???/r?, /bin/[r]m)
    parent: str | None = None                  # interpreter whose shell-out produced this command (python, awk ...)
    indirect: bool = False
    stdin_exec: bool = False
    cwd: str | None = None                     # known working directory (after `cd /abs`)

    def path(self, p: str) -> str:
        """Resolve a relative operand against a known cwd (`cd / && rm -rf *`)."""
        if self.cwd and p and not p.startswith(("/", "~", UNKNOWN_VALUE, UNKNOWN_OUTPUT, PROCESS_PATH, "-")):
            return self.cwd.rstrip("/") + "/" + p
        return p

    @property
    def name(self) -> str:
        """Base name of the command word. Rules ask for it hundreds of thousands of times per benchmark run, so it is
        memoized against the current argv[0] (unwrapping replaces argv)."""
        a0 = self.argv[0] if self.argv else ""
        memo = self.__dict__.get("_name_memo")
        if memo is not None and memo[0] is a0:
            return memo[1]
        nm = basename(a0) if a0 else ""
        self.__dict__["_name_memo"] = (a0, nm)
        return nm

    @property
    def args(self) -> list:
        return self.argv[1:]


def operands(args: list, with_arg: frozenset | set = frozenset()) -> list:
    out, skip, dd = [], False, False
    for a in args:
        if skip:
            skip = False
        elif dd or not a.startswith("-") or a == "-":
            out.append(a)
        elif a == "--":
            dd = True
        elif a in with_arg:
            skip = True
    return out


def short_flags(args: list) -> str:
    return "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--") and a != "-")


def network_hosts(c: SimpleCommand) -> list:
    """Host names the network command talks to (URLs, user@host:path, bare host operands)."""
    hs = []
    for a in c.args:
        m = URL.match(a)
        if m:
            hs.append(m.group(1).strip("[]"))
        elif "@" in a and ":" in a.split("@", 1)[1] and not a.startswith("-"):
            hs.append(a.split("@", 1)[1].split(":", 1)[0])
    if not hs:
        ops = operands(c.args, word_set("-p -s -w -i -q -x -X -O -I -T -V -W -c -e -o -d -H -X -u -F -A -b -m -P -l"))
        hs = [o.split(":")[0] for o in ops[:1] if not o.startswith("@")]
    return hs


def is_loopback(h: str) -> bool:
    h = h.lower()
    return h in ("localhost", "::1", "0.0.0.0", "0", "ip6-localhost") or h.startswith("127.") or h.endswith(".localhost")


def talks_to_remote(c: SimpleCommand) -> bool:
    hs = network_hosts(c)
    return not hs or any(not is_loopback(h) for h in hs)


# ---------------------------------------------------------------- path classification

def normalize_path(p: str) -> str:
    if p.startswith("//"):
        p = "/" + p.lstrip("/")
    if p.startswith("/"):
        return posixpath.normpath(p) if p != "/" else "/"
    if p == "~" or p.startswith("~/"):
        return "~" + (posixpath.normpath(p[1:]) if len(p) > 2 else "")
    return p


def why_critical(p: str) -> str | None:
    """Why deleting/chmodding p recursively is catastrophic, or None."""
    if not p:
        return None
    if p[0] in (UNKNOWN_VALUE, UNKNOWN_OUTPUT) and p[1:2] == "/" and p[2:] in ("", "*", ".*", "."):
        return "unset variable would make this /"
    if p.startswith("/") and p[1:2] in (UNKNOWN_VALUE, UNKNOWN_OUTPUT):
        return "root-level path built from an unresolved variable"
    core = p
    while core.endswith(("/*", "/.*", "/")) and len(core) > 1:
        core = core[:-2] if core.endswith(("/*")) else core[:-3] if core.endswith("/.*") else core[:-1]
    if core in ("", "/*", "*") and p.startswith("/"):
        core = "/"
    if core == ".*":
        return "'.*' can match '..'"
    rel = posixpath.normpath(core) if not core.startswith(("/", "~")) else ""
    if rel.startswith("..") and set(rel.split("/")) == {".."} and rel.count("..") >= 3:
        return "relative path climbing towards /"
    if core == "~" or p in ("~/", "~/*", "~/.*"):
        return "home directory"
    if core.startswith("~/"):
        sub = normalize_path(core)[2:]
        return "home credentials/config" if sub in (".ssh", ".gnupg", ".aws", ".config", ".local", ".kube") else None
    if not core.startswith("/"):
        return None
    n = normalize_path(core)
    parts = [x for x in n.split("/") if x]
    if not parts:
        return "filesystem root"
    if any(ch in parts[0] for ch in "*?["):
        return "glob over root-level directories"
    if len(parts) == 1 and parts[0] in SYS_DIRS:
        return "system directory"
    if len(parts) == 2 and (parts[0] in ("etc", "boot", "bin", "sbin", "lib", "lib64", "root", "home", "sys", "proc", "dev") or "/".join(parts) in SYSTEM_SUBDIRS):
        return "system directory"
    return None


def is_system_path(p: str) -> bool:
    n = normalize_path(p)
    if not n.startswith("/") or n.startswith(("/usr/local/", "/var/tmp", "/var/log/", "/tmp")):
        return False
    if n.startswith("/dev/"):
        return not n.startswith(SAFE_DEV) and n not in SAFE_DEV
    return n.split("/")[1] in word_set("etc boot bin sbin lib lib32 lib64 libx32 usr root sys proc var")


def home_relative(p: str) -> str | None:
    n = normalize_path(p)
    m = re.match(r"^(~|/root|/home/[^/]+)(/.*)?$", n)
    return ("~" + (m.group(2) or "")) if m else None


def is_secret_path(p: str) -> bool:
    if any(ch.isspace() for ch in p):
        return False
    p = p.lstrip("@<")
    if "=@" in p or "=<" in p:
        p = re.split(r"=[@<]", p, 1)[1]
    h = home_relative(p) or normalize_path(p)
    b = h.rsplit("/", 1)[-1]
    if re.fullmatch(r"id_(rsa|dsa|ecdsa|ed25519)(_sk)?", b):
        return True
    if h in ("~/.ssh", "~/.ssh/*") or (h.startswith("~/.ssh/") and b not in ("known_hosts", "config", "authorized_keys") and not b.endswith(".pub")):
        return True
    if h.startswith(SECRET_HOME) or h.startswith(("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_")) and not b.endswith(".pub"):
        return True
    return "/proc/" in h and h.endswith("environ")


def is_persistence_path(p: str) -> bool:
    h = home_relative(p)
    if h and h[2:] in HOME_RC:
        return True
    return (h or normalize_path(p)).startswith(PERSIST_PREFIX)


def written_paths(c: SimpleCommand) -> list:
    """Paths this command creates, truncates, overwrites, deletes or re-permissions."""
    out = [t for op, t in c.redirs if ">" in op and not (op in (">&", "<&") and (t.isdigit() or t == "-"))]
    nm, ops = c.name, operands(c.args, word_set("-t -S -m -o -g -u -n -s -e -f -I -i"))
    if nm == "tee" or nm in ("rm", "unlink", "rmdir", "shred", "truncate", "srm", "wipe"):
        out += operands(c.args, word_set("-n -s -r --size --reference --iterations --random-source"))
    elif nm in ("cp", "install", "ln", "rsync", "scp") and len(ops) >= 2:
        out.append(ops[-1])
    elif nm == "mv":
        out += ops
    elif nm == "chattr":  # chattr [-RVf] [+-=attrs] files: the mode word may start with '-'
        k = next((i for i, a in enumerate(c.args) if re.fullmatch(r"[-+=][aAcCdDeFijmPsStTux]+", a)), None)
        out += [a for a in c.args[k + 1:] if not a.startswith("-")] if k is not None else ops
    elif nm in ("chmod", "chown", "chgrp", "setfacl"):
        out += ops[1:]
    elif nm == "dd":
        out += [a[3:] for a in c.args if a.startswith("of=")]
    elif nm in ("sed", "perl") and any(a.startswith("-i") or a.startswith("--in-place") for a in c.args):
        out += ops[1:]
    for flag in ("-o", "--output", "-O", "--output-document"):
        if nm in ("curl", "wget", "aria2c") and flag in c.args[:-1]:
            out.append(c.args[c.args.index(flag) + 1])
    return out


def literal_text(u) -> str | None:
    """Literal text printed by `echo`/`printf` or fed to `cat` by a heredoc/here-string, else None."""
    if u.name == "cat" and not u.args:
        return next((t for op, t in u.redirs if op in ("<<", "<<<")), None)
    if u.name in ("echo", "printf") and not u.subs:
        text = " ".join(a for a in u.args if a not in ("-n", "-e", "-E"))
        return unescape(text) if u.name == "printf" or "-e" in u.args else text
    return None
