"""Which programs can start other programs or print their environment (docs/credentialed-exec.md, "Binaries that can
reveal their credentials").

A credentialed binary runs with its credentials in its environment and the agent's arguments. When the program can
run another program (a shell, an interpreter, `env`, `xargs`, `find -exec`, `ssh -o ProxyCommand`, `make`, `git -c
alias.x=!sh`, `busybox sh`, …), read and print any file (`cat /proc/self/environ`, `base64`, `od`, `curl file://`,
`tar --to-command`) or evaluate code (`awk`, `jq env`, GNU `sed`'s `e`), the agent can make it print the credential in
any spelling, so registering it needs the operator's explicit acknowledgement.

The program is judged by what it IS, not only by its name: the file's name (with version suffixes: python3.11,
perl5.36.0, vim.basic), a listing in /etc/shells, being the same file (hard link) as or a byte-for-byte copy of a known
such program installed on this machine (an alternatives target, a renamed copy), and the markers of multi-call
binaries (BusyBox, Toybox, GNU coreutils' single binary) inside the file. Scripts are judged by their own name, not by
their interpreter (`#!/bin/sh` runs the script, not the agent's code). Unknown programs are allowed: the operator knows
their tool, and its deny arguments are theirs to set.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class RiskFamily:
    """Programs recognised by their file name (`names` is matched whole), with why they can reveal credentials."""

    kind: str
    names: str
    reason: str


# Data: the families. A version suffix is allowed where distributions use one.
_V = r"(?:[-.]?[0-9][0-9.]*)?"
FAMILIES: tuple[RiskFamily, ...] = (
    RiskFamily("shell", r"(?:ba|da|a|z|k|mk|pdk|lk|c|tc|ya|po|rba|rk|rz|hu|sa)?sh" + _V + r"(?:-static)?|ksh93|fish"
               r"|pwsh(?:-preview|-lts)?|powershell|nu|xonsh|elvish|oil|osh|ysh|rc|es|scsh"
               r"|tmux|screen|byobu|dtach|abduco|zellij|script|expect|unbuffer",
               "a shell (or a program that starts one): it runs any command it is given"),
    RiskFamily("runner", r"env|printenv|xargs|nice|nohup|timeout|stdbuf|setsid|setpriv|setarch|linux32|linux64|chrt"
               r"|ionice|taskset|numactl|flock|chroot|unshare|nsenter|runuser|su|sudo|sudoedit|doas|pkexec|run0"
               r"|capsh|prlimit|time|watch|parallel|sem|run-parts|start-stop-daemon|systemd-run|systemd-nspawn"
               r"|firejail|bwrap|proot|fakeroot(?:-sysv|-tcp)?|fakechroot|faketime|catchsegv|cgexec|sg|newgrp"
               r"|aa-exec|chpst|softlimit|envdir|setuidgid|envuidgid|tini|dumb-init|su-exec|gosu|dbus-run-session"
               r"|dbus-launch|xvfb-run|at|batch|crontab|entr|ldd|ld\.so|ld-linux(?:-[a-z0-9_-]+)?\.so(?:\.[0-9]+)*"
               r"|ld-musl-[a-z0-9_]+\.so(?:\.[0-9]+)*|find|gfind|fd|fdfind"
               r"|op|aws-vault|doppler|infisical|chamber|envconsul|sops|direnv|dotenv|summon|teller",
               "it prints its environment or starts the program named in its arguments (env, xargs, "
               "find -exec, timeout, sudo, …) with this environment"),
    RiskFamily("multicall", r"busybox(?:-static)?|toybox|coreutils",
               "a multi-call binary: its applets include shells, env, awk and sed"),
    RiskFamily("interpreter", r"python" + _V + r"(?:d|m|u|dm)?(?:-dbg)?|pypy" + _V + r"|jython|i?python" + _V
               + r"|perl" + _V + r"|ruby" + _V + r"|j?irb" + _V + r"|erb|jruby|node(?:js)?" + _V + r"|deno|bunx?"
               r"|php" + _V + r"(?:-cgi|-cli|-fpm)?|lua(?:jit)?" + _V + r"|tclsh" + _V + r"|wish" + _V
               + r"|jimsh|R|Rscript|julia|guile" + _V + r"|racket|sbcl|clisp|ecl|gsi|csi|ghci|runghc|runhaskell"
               r"|ocaml|scala|groovy|java|jshell|kotlinc?|dotnet|mono|csharp|swift|elixir|iex|erl|escript|osascript"
               r"|awk|gawk|mawk|nawk|original-awk|sed|gsed|ssed|jq|gojq|jaq|yq|m4|dc|xmllint|xsltproc|gs|ghostscript",
               "an interpreter (awk, GNU sed's e command, jq's env and $ENV included): it runs code given in its "
               "arguments or in files the agent writes, and reads its environment"),
    RiskFamily("editor", r"vim?(?:\.[a-z0-9]+)?|vimdiff|view|rview|rvim|gvim|nvim|ex|ed|red|emacs" + _V
               + r"(?:-nox|-gtk|-lucid)?|emacsclient|nano|rnano|pico|joe|jed|mg|micro|kak|hx|helix|ne|mc|mcedit"
               r"|less|more|most|pg|man|info|pinfo|editor|pager|sensible-(?:editor|pager|browser)|select-editor"
               r"|w3m|lynx|links2?|elinks",
               "an editor, pager or browser: it runs shell commands (!cmd, -P pager, :!) and shows any file"),
    RiskFamily("tracer", r"strace|ltrace|gdb|gdbserver|lldb|valgrind|perf|rr|bpftrace|stap|ptrace",
               "a debugger or tracer: it runs any program and shows its memory and environment"),
    RiskFamily("build", r"g?make|bmake|pmake|cmake|ctest|cpack|ninja|meson|scons|bazel|bazelisk|buck2?"
               r"|npm|npx|pnpm|pnpx|yarn|yarnpkg|corepack|pip" + _V + r"|pipx|uvx?|poetry|pdm|hatch|tox|nox"
               r"|pytest|py\.test|cargo|rustup|go|gradlew?|mvnw?|ant|sbt|lein|mix|rake|bundler?|gem|composer"
               r"|terraform|tofu|terragrunt|pulumi|packer|vagrant|ansible(?:-[a-z]+)?|helm|docker|podman|nerdctl"
               r"|buildah|(?:[a-z0-9_]+-)*(?:gcc|g\+\+|c\+\+|cc|clang|clang\+\+|tcc)" + _V
               + r"|vercel|netlify|firebase|wrangler|heroku|serverless|sls|cdk|cdktf|sam|amplify|nx|turbo|lerna",
               "a build, package or infrastructure tool: it runs commands defined in files it reads (Makefile, "
               "package.json, *.tf external data, plugins, compiler -wrapper), which the agent can write in its "
               "workspace"),
    RiskFamily("database", r"psql|pgcli|mysql|mariadb|mycli|sqlite3?|duckdb|sqlcmd|mongo|mongosh|cqlsh"
               r"|clickhouse(?:-client)?|usql|litecli",
               "a database shell: it runs local commands (psql \\! and \\o |cmd, mysql system, sqlite3 .shell, "
               "sqlcmd !!, mongosh's JavaScript) with this environment"),
    RiskFamily("vcs", r"git(?:-[a-z0-9-]+)?|tig|hg|svn|fossil|bzr|brz|darcs",
               "a version control tool: aliases (`!cmd`), -c core.pager / core.sshCommand, hooks, filters and "
               "fsmonitor in the repository's config run programs, and that config is in the agent's workspace"),
    RiskFamily("network", r"ssh|scp|sftp|slogin|autossh|mosh|sshpass|ssh-agent|rsync|rclone|nc|ncat|netcat"
               r"|nc\.(?:openbsd|traditional)|socat|telnet|curl|wget2?|aria2c|lftp|ftp|tftp|sendmail|mail|mailx"
               r"|mutt|neomutt|openssl|gpg2?|age",
               "it runs a command through its options (ssh -o ProxyCommand, rsync -e, socat EXEC:, "
               "aria2c --on-download-complete) or reads any file, /proc/self/environ (its own environment) "
               "included, and sends, encrypts or prints it"),
    RiskFamily("file", r"cat|tac|head|tail|nl|od|xxd|hexdump|hd|base64|base32|basenc|uuencode|strings|cut|sort|uniq"
               r"|paste|fold|fmt|pr|split|csplit|comm|join|diff|diff3|sdiff|cmp|grep|egrep|fgrep|rg|ag|ack|iconv"
               r"|column|rev|look|expand|unexpand|shuf|ptx|tsort|bat|batcat|highlight|pygmentize|dd|cp|install"
               r"|zcat|gzip|gunzip|bzip2|bzcat|xz|xzcat|lzma|zstd|zstdcat|lz4|brotli|tar|gtar|bsdtar|zip|7z"
               r"|7za|7zr|cpio|pax",
               "it reads any file, /proc/self/environ (its own environment) included, and prints, encodes, archives "
               "or copies it into the workspace (tar also runs --to-command and --checkpoint-action, zip -TT)"),
)
# Any family name may carry a packaging suffix (bash.orig, node-real, python3.11.bin); names match in any case.
_SUFFIX = r"(?:[-.](?:bin|real|orig|static|exe|dist|new|old|distrib))?"


@functools.cache
def _name_re() -> re.Pattern:
    """Every family's names in one pattern: compiled on first use (~0.1 s), not when a process starts."""
    return re.compile("|".join(f"(?P<{f.kind}>(?:{f.names}){_SUFFIX})" for f in FAMILIES), re.IGNORECASE)


_BY_KIND = {f.kind: f for f in FAMILIES}
# Strings found only in multi-call binaries (BusyBox, Toybox, GNU coreutils built as one binary).
MULTICALL_MARKERS = (b"BusyBox v", b"multi-call binary", b"multicall binary", b"--coreutils-prog=")
# Multi-call binaries are small (BusyBox ~2 MB, coreutils ~6 MB); larger files are not read, so a call never pays
# for reading a 100 MB CLI.
MAX_SCAN_BYTES = 32 * 1024 * 1024
# Where installed programs are looked for (to recognise a hard link, an alternatives target or a renamed copy).
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin", "/etc/alternatives",
               "/usr/libexec", "/usr/lib/git-core")
SHELLS_FILE = "/etc/shells"


def family_for_name(name: str) -> RiskFamily | None:
    """The family a program's file name belongs to, or None."""
    m = _name_re().fullmatch(name)
    return _BY_KIND[m.lastgroup] if m else None


@dataclass(frozen=True)
class _Known:
    path: str
    name: str
    reason: str


class _Inventory:
    """The risky programs installed here, by file identity and by size. Built from SYSTEM_DIRS and /etc/shells;
    rebuilt when one of them changes (their mtimes are the key)."""

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.by_inode: dict[tuple[int, int], _Known] = {}
        self.by_size: dict[int, list[tuple[str, _Known]]] = {}
        self.shells: set[str] = set()
        for line in _read_lines(SHELLS_FILE):
            if line.startswith("/"):
                real = os.path.realpath(line)
                self.shells.add(real)
                self._add(real, os.path.basename(line), "listed in /etc/shells: a shell runs any command it is given")
        for directory in SYSTEM_DIRS:
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                family = family_for_name(entry.name)
                if family is not None:
                    self._add(os.path.realpath(entry.path), entry.name, family.reason)

    def _add(self, real: str, name: str, reason: str) -> None:
        try:
            st = os.stat(real)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            return
        known = _Known(real, name, reason)
        self.by_inode.setdefault((st.st_dev, st.st_ino), known)
        if all(path != real for path, _ in self.by_size.get(st.st_size, [])):
            self.by_size.setdefault(st.st_size, []).append((real, known))


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return [line.strip() for line in fh if line.strip() and not line.lstrip().startswith("#")]
    except OSError:
        return []


def _inventory_key() -> tuple:
    key = []
    for path in (SHELLS_FILE, *SYSTEM_DIRS):
        try:
            st = os.stat(path)
            key.append((path, st.st_mtime_ns, st.st_ino))
        except OSError:
            key.append((path, None, None))
    return tuple(key)


_lock = threading.Lock()
_inventory: _Inventory | None = None
_verdicts: dict[tuple, str | None] = {}
_digests: dict[tuple, str] = {}


def _current_inventory() -> _Inventory:
    global _inventory
    key = _inventory_key()
    inventory = _inventory
    if inventory is None or inventory.key != key:
        inventory = _Inventory(key)
        with _lock:
            _inventory = inventory
            _verdicts.clear()
    return inventory


def _digest(path: str, st: os.stat_result) -> str | None:
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    found = _digests.get(key)
    if found is None:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError:
            return None
        found = _digests[key] = h.hexdigest()
    return found


def _multicall_marker(path: str) -> bytes | None:
    """The multi-call marker inside an ELF file of at most MAX_SCAN_BYTES, or None (scripts are not scanned)."""
    overlap = max(len(m) for m in MULTICALL_MARKERS) - 1
    try:
        if os.stat(path).st_size > MAX_SCAN_BYTES:
            return None
        with open(path, "rb") as fh:
            head = fh.read(4)
            if head != b"\x7fELF":
                return None
            tail = head
            while chunk := fh.read(1 << 20):
                window = tail + chunk
                for marker in MULTICALL_MARKERS:
                    if marker in window:
                        return marker
                tail = window[-overlap:]
    except OSError:
        return None
    return None


def program_risk(path: str) -> str | None:
    """Why the program at `path` (an existing, canonical path) can start other programs or print its environment,
    or None when it is not known to. Cached per file identity (device, inode, size, mtime, ctime)."""
    name = os.path.basename(path)
    try:
        st = os.stat(path)
    except OSError:
        return None
    inventory = _current_inventory()
    key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, inventory.key)
    if key in _verdicts:
        return _verdicts[key]
    verdict = _judge(path, name, st, inventory)
    with _lock:
        if len(_verdicts) > 4096:
            _verdicts.clear()
        _verdicts[key] = verdict
    return verdict


def _judge(path: str, name: str, st: os.stat_result, inventory: _Inventory) -> str | None:
    family = family_for_name(name)
    if family is not None:
        return f"{name}: {family.reason}"
    real = os.path.realpath(path)
    if real in inventory.shells:
        return f"{name} is listed in {SHELLS_FILE}: a shell runs any command it is given"
    known = inventory.by_inode.get((st.st_dev, st.st_ino))
    if known is not None:
        return f"{name} is the same file as {known.path} ({known.name}): {known.reason}"
    same_size = [(p, k) for p, k in inventory.by_size.get(st.st_size, []) if p != real]
    if same_size:
        digest = _digest(real, st)
        for other, known in same_size:
            try:
                other_st = os.stat(other)
            except OSError:
                continue
            if digest is not None and digest == _digest(other, other_st):
                return f"{name} is a copy of {other} ({known.name}): {known.reason}"
    marker = _multicall_marker(real)
    if marker is not None:
        return f"{name} contains {marker.decode()!r}: {_BY_KIND['multicall'].reason}"
    return None
