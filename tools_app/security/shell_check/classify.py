"""Classification of analysed commands shared by several rule groups: does it fetch from the network,
decode data, execute its standard input, or run code at all.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .command import normalize_path, operands, short_flags, written_paths
from .vocabulary import (
    AWKS,
    DOWNLOADERS,
    INLINE_PATTERNS,
    INTERPRETERS,
    NETCAT,
    SHELLS,
    interpreter_name,
    word_set,
)
from .wrappers import shell_args

if TYPE_CHECKING:
    from .command import SimpleCommand


# ---------------------------------------------------------------- command classification

def is_fetch(c: SimpleCommand) -> bool:
    if c.name in DOWNLOADERS or c.name in NETCAT or (c.name == "openssl" and "s_client" in c.args):
        return True
    return bool(c.icode and INLINE_PATTERNS["remote"].search(c.icode)) or any(is_fetch(s) for s in c.subs)


def is_decoder(c: SimpleCommand) -> bool:
    nm, a = c.name, c.args
    sh = short_flags(a)
    if nm in ("base64", "base32", "basenc", "b64") and ("d" in sh or "D" in sh or "--decode" in a):
        return True
    if nm == "openssl" and ("-d" in a or "-base64" in a or "base64" in a or "-a" in a):
        return True
    if nm == "xxd" and "r" in sh or nm in ("uudecode", "rev", "tr", "zcat", "bzcat", "xzcat", "zstdcat", "gunzip", "unxz", "lzcat"):
        return True
    if nm in ("gzip", "bzip2", "xz", "zstd", "lzma", "brotli") and ("d" in sh or "--decompress" in a):
        return True
    if nm in ("printf", "echo") and any(re.search(r"\\(x[0-9a-fA-F]|[0-7]{3}|u[0-9a-fA-F]{4})", x) for x in a):
        return True
    return bool(c.icode) and c.name not in AWKS


def executes_stdin(c: SimpleCommand) -> bool:
    nm = c.name
    if c.unknown or c.stdin_exec:
        return True
    if "xargs" in c.wrappers and (nm in SHELLS or interpreter_name(nm) in SHELLS or interpreter_name(nm) in INTERPRETERS):
        return True
    if nm in SHELLS or interpreter_name(nm) in SHELLS:
        code, script = shell_args(c.args)
        return c.code is None and (script in (None, "-", "/dev/stdin") or "s" in short_flags(c.args))
    if interpreter_name(nm) in INTERPRETERS:
        ops = operands(c.args, word_set("-W -X -r --require -I -M -x"))
        return c.icode is None and (not ops or ops[0] in ("-", "/dev/stdin"))
    if nm in ("source", ".") and c.args[:1] in (["/dev/stdin"], ["-"]):
        return True
    if nm in ("at", "batch") and not any(x.startswith("-f") or x in ("-l", "-r", "-d", "-c") for x in c.args):
        return True
    return any(d == ">" and any(executes_stdin(x) for x in cs) for d, cs in c.procs)


def runs_code(c: SimpleCommand) -> bool:
    nm = c.name
    return c.unknown or c.code is not None or nm in ("eval", "source", ".") or nm in SHELLS or interpreter_name(nm) in INTERPRETERS


# Arguments that make a tool print its usage or version and exit without acting.
INFO_ARGS = word_set("--help -help --usage --version -version -? /? help version --help-all")
# `-h` / `-V` mean help / version only for some tools: `shutdown -h` halts, `sh -h` hashes commands (and still runs
# its input), `ls -h`/`df -h` print human-readable sizes. They count as an information request only for these tools,
# which the rule groups judge by name; long forms (`--help`, `--version`) count for every tool.
SHORT_INFO_TOOLS = word_set(
    "sudo su doas pkexec useradd usermod userdel adduser deluser groupadd groupdel passwd chpasswd chage visudo "
    "mount umount nsenter unshare chroot insmod modprobe rmmod setcap capsh mkfs mke2fs mkswap mkdosfs mkntfs wipefs "
    "blkdiscard fdisk sfdisk gdisk sgdisk cfdisk parted mdadm flashrom nwipe pvremove pvcreate vgremove vgreduce lvremove "
    "lvreduce cryptsetup hdparm nmap masscan zmap nikto sqlmap hydra medusa gobuster ffuf wfuzz nuclei john hashcat "
    "aircrack-ng aireplay-ng airmon-ng airodump-ng reaver bully wifite mdk4 bettercap ettercap ngrok cloudflared chisel "
    "frpc frps iodine tmate crontab iptables ufw setenforce auditctl xmrig")
# Wrappers that change nothing about what an information request does.
INFO_SAFE_WRAPPERS = word_set("sudo doas command builtin time nice timeout nohup stdbuf")


def is_information_request(c) -> bool:
    """`shutdown --help`, `mkfs.ext4 -V`, `sudo nmap --version`: the tool prints usage or its version and exits, so the
    rules about what the tool does in other modes do not apply. Only a bare request counts: no other argument, no
    variables set for it (`LD_PRELOAD=x tool --help` still loads x), no file written, no container or other wrapper
    whose own options matter, and a known program name."""
    if not c.args or (c.args[0] not in INFO_ARGS and c.args[0] not in ("-h", "-V")):
        return False  # the common case, decided before anything costlier
    if c.unknown or c.code is not None or c.icode or c.subs or c.procs or c.assigns:
        return False
    if any(w not in INFO_SAFE_WRAPPERS for w in c.wrappers) or any(normalize_path(t) != "/dev/null" for t in written_paths(c)):
        return False
    if c.stage > 0:
        return False  # a pipeline consumer: judged with what it reads (`curl .. | sh --help` stays a pipe into sh)
    short_ok = c.name in SHORT_INFO_TOOLS or c.name.startswith("mkfs.")
    return all(a in INFO_ARGS or (short_ok and a in ("-h", "-V")) for a in c.args)
