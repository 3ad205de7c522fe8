"""FROZEN REFERENCE: the pre-restructure (P7) implementation of tools_app.security.shell_check, copied verbatim.

Kept only for tests/tools_app/test_shell_check_differential.py, which proves the restructured package gives the
same verdicts. Never import it from application code. Delete it (and the differential test) once it is no longer
useful. Original module docstring follows.

Shell-command safety check for commands an agent wants to run with ``sh -c``.

Pipeline: normalize -> parse (bashlex, else our own tolerant tokenizer) into raw simple commands
-> expand words statically (quotes, ``$'..'``, variables assigned earlier, ``$IFS``, ``~``/``$HOME``,
brace lists, ``$(echo ..)``) -> unwrap wrappers (sudo, env, timeout, xargs, ``sh -c``, ``eval``,
``find -exec``, interpreter shell-outs ...) -> run data-driven rule groups per command and over the
whole command (pipelines, download-then-run chains, fork bombs). See docs/shell-safety.md.
"""
from __future__ import annotations

import base64
import fnmatch
import functools
import ipaddress
import posixpath
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Callable

try:  # bashlex is the primary parser; the fallback tokenizer covers what it rejects.
    import bashlex
except Exception:  # pragma: no cover - optional at import time
    bashlex = None

__all__ = ["CommandVerdict", "RuleGroup", "RULE_GROUPS", "check_command", "extract_simple_commands"]


@dataclass(frozen=True)
class CommandVerdict:
    verdict: str
    observe: bool
    reasons: list[str]
    groups: tuple[str, ...]


@dataclass(frozen=True)
class RuleGroup:
    name: str
    description: str
    default_enabled: bool = True


_G = [
    ("destructive_ops", "Recursive deletes / chmod / chown / find -delete / mv aimed at /, ~, system dirs or empty-able $VAR/."),
    ("data_exfiltration", "Reading secret files, uploading local files or command output to non-loopback hosts, DNS exfil."),
    ("reverse_shell", "/dev/tcp redirects, nc -e, socat exec:, network client piped to a shell, socket+exec one-liners."),
    ("code_injection", "Downloaded/decoded/unknown content executed; eval of remote output; command names built from expansions."),
    ("privilege_escalation", "sudo/su/doas/pkexec, setuid bits, mount, kernel modules, user and sudoers/shadow changes."),
    ("dangerous_paths", "Writes, deletes or permission changes under system paths (/etc, /usr, /boot, /dev ...)."),
    ("env_injection", "LD_PRELOAD/BASH_ENV/PROMPT_COMMAND/GIT_SSH_COMMAND style variables and git -c hooks."),
    ("container_escape", "docker.sock, privileged/host-mount containers, /proc/sys and cgroup release_agent writes, nsenter -t 1."),
    ("crypto_mining", "Known miners, stratum pool URLs and mining pool hosts."),
    ("filter_bypass", "Shell escapes hidden in sed/vim/tar/zip/git/rsync/ssh options, ${!var}/${var@P}, control chars."),
    ("network_recon", "Port/host scanners and password crackers (loopback-only scans are observe)."),
    ("persistence", "crontab installs and writes to shell rc files, authorized_keys, cron/systemd/rc.local."),
    ("process_control", "kill -1 / PID 1, killall5, killing every root process or init/sshd."),
    ("env_dump", "Dumping the environment: env, printenv, set, export -p, /proc/*/environ."),
    ("fork_bomb", "Self-recursive background/pipe functions, background spawn loops, fork loops in interpreters."),
    ("system_power", "shutdown/reboot/halt/poweroff, init 0/6, systemctl power verbs, sysrq-trigger."),
    ("disk_write", "Writes to block devices, mkfs/wipefs/partitioning, blkdiscard, hdparm erase."),
    ("package_install", "Package installs (observe only: approvals handle them elsewhere)."),
    ("anti_forensics", "Erasing traces: shell history clearing/disabling, tampering with auth/audit logs and wtmp."),
    ("security_disable", "Turning off defences: firewall flush/disable, SELinux/AppArmor off, stopping auditd/EDR, kernel hardening sysctls."),
    ("network_tunnel", "Exposing local ports to the outside: ssh -R, ngrok tcp, chisel/frp/iodine, tmate, tunnels of ssh/rdp ports."),
]
RULE_GROUPS: dict[str, RuleGroup] = {n: RuleGroup(n, d) for n, d in _G}

U, S, P = "\ue000", "\ue001", "\ue002"  # unresolved $var, unresolved $(cmd) output, <(..) path
MAX_DEPTH = 8
_ZW = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_VARNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")
_URL = re.compile(r"^[a-zA-Z][\w+.-]*://(?:[^@/?#]*@)?(\[[^\]]*\]|[^/:?#]*)")
_BLOCKDEV = re.compile(r"^/dev/(sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|rdisk\d|md\d|dm-\d|mapper/|loop\d|sr\d|mem$|kmem$|port$|fd\d)")


def _sh_set(s: str) -> frozenset:
    return frozenset(s.split())


SHELLS = _sh_set("sh bash zsh dash ksh mksh pdksh ash fish csh tcsh yash rbash")
INTERP = {  # interpreter -> flags whose next argument is inline program text
    "python": ("-c",), "pypy": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p", "--print"),
    "nodejs": ("-e", "--eval", "-p", "--print"), "bun": ("-e", "--eval"), "deno": ("eval",), "php": ("-r",), "lua": ("-e",),
    "luajit": ("-e",), "rscript": ("-e",), "osascript": ("-e",), "tclsh": (), "wish": (), "irb": (), "iex": ("-e",),
    "elixir": ("-e",), "julia": ("-e",), "pwsh": ("-c", "-command", "-encodedcommand", "-enc", "-e", "-ec"),
    "powershell": ("-c", "-command", "-encodedcommand", "-enc", "-e", "-ec"),
}
AWKS = _sh_set("awk gawk mawk nawk busybox-awk")
DOWNLOADERS = _sh_set("curl wget wget2 fetch aria2c axel lwp-download lwp-request GET POST http https xh curlie lynx w3m tftp ftp iwr invoke-webrequest certutil dig nslookup")
NETCAT = _sh_set("nc ncat netcat telnet socat cryptcat pwncat")
READERS = _sh_set("cat tac less more head tail nl base64 base32 xxd od hexdump strings cp scp rsync sftp tar zip 7z gzip bzip2 xz zstd openssl gpg sed awk grep egrep fgrep rg sort uniq cut jq yq vi vim nano view bat curl nc ncat dd mail sendmail xclip pbcopy paste")
DATA_CMDS = _sh_set("echo printf grep egrep fgrep rg ag ack ls stat test [ [[ file git man which type whatis apropos")
PRIV = _sh_set("sudo su doas pkexec run0 runuser nsenter unshare chroot setcap capsh insmod modprobe rmmod useradd usermod userdel adduser deluser groupadd groupmod groupdel passwd chpasswd chage visudo gpasswd newgrp sg sudoedit")
POWER = _sh_set("shutdown reboot poweroff halt kexec")
MINERS = _sh_set("xmrig minerd cpuminer cgminer bfgminer ethminer nbminer t-rex phoenixminer lolminer xmr-stak ccminer nanominer gminer srbminer teamredminer xmrig-notls cpuminer-multi")
SCANNERS = _sh_set("nmap masscan zmap nikto sqlmap hydra medusa gobuster dirb dirbuster ffuf wfuzz nuclei wpscan arp-scan netdiscover unicornscan enum4linux smbmap crackmapexec responder amass rustscan")
CRACKERS = _sh_set("john hashcat msfvenom msfconsole ophcrack aircrack-ng")
DISK_TOOLS = _sh_set("wipefs blkdiscard mke2fs mkswap mkdosfs mkntfs newfs cfdisk gdisk zpool flashrom")
PKG = {"pip": "install", "pip3": "install", "uv": "add", "poetry": "add", "npm": "install", "yarn": "add", "pnpm": "add",
       "gem": "install", "cargo": "install", "go": "install", "brew": "install", "conda": "install", "apt": "install",
       "apt-get": "install", "composer": "require", "bundle": "add", "dnf": "install", "yum": "install", "apk": "add"}
SYS_DIRS = _sh_set("etc usr bin sbin lib lib32 lib64 libx32 boot var opt root home sys proc dev srv mnt snap")
SYS2 = _sh_set("usr/bin usr/sbin usr/lib usr/lib64 usr/local usr/share usr/include usr/libexec var/lib var/log var/spool var/cache var/www var/mail var/backups var/run")
SAFE_DEV = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/", "/dev/shm/", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/full")
HOME_RC = _sh_set(".bashrc .bash_profile .bash_login .bash_logout .profile .zshrc .zprofile .zshenv .zlogin .kshrc .cshrc .tcshrc .inputrc .xinitrc .xprofile .xsession .ssh/authorized_keys .ssh/authorized_keys2 .ssh/rc .ssh/environment .config/fish/config.fish .pam_environment")
PERSIST_PREFIX = ("/etc/cron", "/etc/crontab", "/etc/anacrontab", "/etc/profile", "/etc/bash.bashrc", "/etc/bashrc", "/etc/zsh", "/etc/rc.local",
                  "/etc/rc.d", "/etc/init.d", "/etc/init/", "/etc/systemd/", "/etc/xdg/autostart", "/etc/update-motd.d", "/etc/environment",
                  "/lib/systemd/", "/usr/lib/systemd/", "/var/spool/cron", "~/.config/systemd", "~/.local/share/systemd", "~/.config/autostart",
                  "~/Library/LaunchAgents", "/Library/LaunchAgents", "/Library/LaunchDaemons")
SECRET_HOME = ("~/.aws", "~/.gnupg", "~/.netrc", "~/.git-credentials", "~/.docker/config.json", "~/.kube/config", "~/.pgpass",
               "~/.config/gcloud", "~/.azure", "~/.npmrc", "~/.pypirc", "~/.vault-token", "~/.password-store",
               "~/.config/gh/hosts.yml", "~/.config/hub", "~/.cargo/credentials", "~/.gem/credentials", "~/.terraform.d/credentials.tfrc.json",
               "~/.s3cfg", "~/.config/rclone/rclone.conf", "~/.local/share/keyrings")
DANGER_ENV = _sh_set("LD_PRELOAD LD_LIBRARY_PATH LD_AUDIT DYLD_INSERT_LIBRARIES DYLD_LIBRARY_PATH BASH_ENV ENV PROMPT_COMMAND GIT_SSH_COMMAND GIT_SSH GIT_EXTERNAL_DIFF GIT_PROXY_COMMAND GIT_ASKPASS SSH_ASKPASS LESSOPEN LESSCLOSE PERL5OPT PYTHONSTARTUP SHELLOPTS BASHOPTS")
CMD_ENV = _sh_set("PAGER MANPAGER GIT_PAGER EDITOR VISUAL GIT_EDITOR GIT_SEQUENCE_EDITOR SYSTEMD_PAGER BROWSER")
# Command-valued settings that are normal with a known program: key pattern -> programs the value may run.
# Anything else in these keys (`sh -c id`, `touch /tmp/pwn`, `curl ..|sh`) stays denied; see _hook_value_ok.
_PAGERS = _sh_set("cat less more most bat delta diff-so-fancy diff-highlight tig")
_EDITORS = _sh_set("true : false vim vi nvim nano emacs emacsclient code code-insiders codium cursor subl mate micro hx helix kak kate gedit notepad ed cat sed")
HOOK_PROGRAMS = (
    (re.compile(r"^(core\.sshcommand|GIT_SSH_COMMAND)$", re.I), _sh_set("ssh")),
    (re.compile(r"^(core\.pager|pager\.[\w.-]+|GIT_PAGER)$", re.I), _PAGERS),
    (re.compile(r"^(core\.editor|sequence\.editor)$", re.I), _EDITORS),
    (re.compile(r"^(diff\.external|GIT_EXTERNAL_DIFF)$", re.I), _sh_set("difft difftastic delta icdiff ydiff diff-so-fancy")),
    (re.compile(r"^filter\.lfs\.(clean|smudge|process)$", re.I), _sh_set("git-lfs")),
    (re.compile(r"^ProxyCommand$", re.I), _sh_set("ssh nc ncat netcat connect connect-proxy corkscrew proxytunnel cloudflared aws gcloud")),
)
CRED_HELPERS = _sh_set("store cache osxkeychain manager manager-core libsecret wincred gnome-keyring")
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/dev/mqueue", "/var/crash")
# Command substitutions whose output carries no local secret (arch, date, commit id, version): fine inside a download URL.
LOW_INFO_CMDS = _sh_set("uname arch date lsb_release nproc getconf")
TEXT_FILTERS = _sh_set("tr sed cut head tail awk xargs grep sort uniq")
GIT_BAD_KEYS = re.compile(r"^(core\.(sshcommand|pager|editor|fsmonitor|hookspath|gitproxy|askpass)|protocol\.ext\.allow|uploadpack\.packobjectshook|diff\.external|.*\.(textconv|command)|filter\..*\.(clean|smudge|process)|sequence\.editor|credential\.helper)$", re.I)

# Cloud instance-metadata services (credential theft / SSRF targets); numeric forms are decoded by _inet_aton.
META_NAMES = _sh_set("metadata.google.internal metadata.goog metadata instance-data instance-data.ec2.internal metadata.tencentyun.com metadata.platformequinix.com")
META_IPS = frozenset(int(ipaddress.IPv4Address(x)) for x in ("169.254.169.254", "169.254.170.2", "169.254.170.23", "100.100.100.200"))
META_LITERALS = ("169.254.169.254", "169.254.170.2", "metadata.google.internal", "100.100.100.200", "fd00:ec2::254", "169-254-169-254", "a9fea9fe", "instance-data.ec2.internal")
NETCLIENTS = DOWNLOADERS | NETCAT | _sh_set("xh curlie httpie openssl ssh ws websocat grpcurl")
# Files worth stealing even when world-readable (used for copies/uploads to remote hosts, see r_exfil_copy).
SENSITIVE_NAMES = re.compile(r"^(\.env(\.(?!(example|sample|template|dist|defaults?)$)[\w.-]+)?|.*\.(pem|key|p12|pfx|jks|keystore|kdbx|ppk|ovpn|tfstate)|id_(rsa|dsa|ecdsa|ed25519)(_sk)?|credentials(\.json)?|\.?(bash|zsh|sh|mysql|psql|python)_history|\.npmrc|\.pypirc|\.pgpass|\.netrc|\.git-credentials|wp-config\.php|service[-_]account.*\.json)$")
SENSITIVE_SYS = ("/etc/passwd", "/etc/group", "/etc/master.passwd", "/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_", "/etc/kubernetes/admin.conf", "/etc/rancher/k3s/k3s.yaml", "/var/lib/kubelet/", "/run/secrets/", "/var/run/secrets/")
UPLOAD_VERBS = _sh_set("cp mv sync put upload upload-batch copy copyto create send")
UPLOADERS = _sh_set("aws gsutil gcloud az rclone s3cmd mc azcopy gh transfer smbclient b2 oci doctl")
RAW_MEM = re.compile(r"^(/dev/(k?mem|port)|/proc/kcore|/proc/[^/]+/mem)$")
HIST_VARS = _sh_set("HISTFILE HISTSIZE HISTFILESIZE SAVEHIST HISTIGNORE")
HIST_FILES = _sh_set(".bash_history .zsh_history .history .sh_history .ash_history .python_history .mysql_history .psql_history .node_repl_history .lesshst .viminfo .rediscli_history .sqlite_history .local/share/fish/fish_history")
SEC_LOGS = ("/var/log/auth.log", "/var/log/secure", "/var/log/wtmp", "/var/log/btmp", "/var/log/lastlog", "/var/log/faillog", "/var/log/syslog",
            "/var/log/messages", "/var/log/kern.log", "/var/log/audit", "/var/log/sudo.log", "/var/log/journal", "/var/log/system.log",
            "/var/run/utmp", "/run/utmp", "/var/log/*")
SEC_SERVICES = re.compile(r"^(auditd|audit|apparmor|firewalld|ufw|iptables|ip6tables|nftables|netfilter-persistent|fail2ban|selinux\S*|falcon\S*|crowdstrike\S*|cbagentd|cbdaemon|sentinel\S*|s1-agent|mdatp|wdavdaemon|osqueryd?|wazuh-agent|wazuh-agentd|ossec\S*|clamav-daemon|clamav-freshclam|clamd|sysmon\S*|auditbeat|elastic-agent|elastic-endpoint|aide|tripwire|suricata|snort|rsyslog|rsyslogd|syslog|syslog-ng|systemd-journald|journald|amazon-guardduty-agent|qualys-cloud-agent|rapid7\S*|ir_agent|tanium\S*|xagt|cylancesvc|bdsec|sophos\S*|esets|kesl|apparmor\.service)(\.service)?$", re.I)
KERNEL_SYSCTL = re.compile(r"^(kernel\.|fs\.suid_dumpable|fs\.protected_|net\.ipv[46]\.(ip_forward|conf\.[^.]+\.forwarding|conf\.[^.]+\.accept_source_route)|user\.max_user_namespaces|dev\.tty\.ldisc_autoload|vm\.mmap_min_addr|vm\.unprivileged_userfaultfd)")
TUNNEL_TOOLS = _sh_set("chisel frpc frps iodine iodined dns2tcpc dns2tcpd ptunnel ptunnel-ng ligolo ligolo-ng revsocks rpivot gost tmate sish")
TUNNEL_SHARE = _sh_set("ngrok cloudflared bore lt localtunnel pagekite pagekite.py zrok tailscale loophole expose serveo")
REMOTE_ADMIN_PORTS = _sh_set("22 23 2222 3389 5900 5901 2375 2376 445 139")
# Windows living-off-the-land binaries used to download or run payloads: name -> argument pattern that makes it hostile.
LOLBINS = {
    "certutil": re.compile(r"^[-/](urlcache|verifyctl|decode|decodehex)$", re.I),
    "bitsadmin": re.compile(r"^/(transfer|addfile|setnotifycmdline|create)$", re.I),
    "mshta": re.compile(r"https?://|javascript:|vbscript:", re.I),
    "regsvr32": re.compile(r"^/i:\S*(https?://|scrobj)|scrobj\.dll", re.I),
    "rundll32": re.compile(r"javascript:|url\.dll|ieframe\.dll|advpack\.dll|shell32\.dll,ShellExec_RunDLL", re.I),
    "wmic": re.compile(r"^(call|create)$|/format:\S*https?://", re.I),
    "msiexec": re.compile(r"https?://", re.I),
    "installutil": re.compile(r"^/logfile=|^/u$", re.I),
}
WEBSHELL = re.compile(r"(system|exec|passthru|shell_exec|popen|proc_open|eval|assert|pcntl_exec)\s*\(\s*(base64_decode\s*\(\s*)?\$_(GET|POST|REQUEST|COOKIE|SERVER|FILES)|Runtime\.getRuntime\(\)\.exec\(\s*request\.getParameter|eval\s*\(\s*Request|Process\.Start\s*\(\s*Request", re.I)
C_PAYLOAD = re.compile(r"set(e|re)?[ug]id\s*\(\s*0|system\s*\(|exec[lv]p?e?\s*\(|/bin/(ba|z|da)?sh|socket\s*\(|ptrace\s*\(|init_module|dup2\s*\(")
COMPILERS = _sh_set("gcc cc clang g++ c++ tcc clang++ musl-gcc")

_RX = {  # patterns applied to inline interpreter programs (python -c, perl -e, awk '...')
    "sock": re.compile(r"socket|fsockopen|TCPSocket|/inet/(tcp|udp)|net\.connect|createConnection|net\.Socket|IO::Socket|-rsocket|Socket::INET"),
    "exec": re.compile(r"subprocess|dup2|pty\.spawn|exec|system|popen|proc_open|spawn|child_process|/bin/(ba|z|da)?sh|\bsh\b|cmd\.exe|STDIN|os\.execute|\|&|getline"),
    "decode": re.compile(r"b64decode|decode64|base64|decode_base64|atob\(|fromhex|unhexlify|decompress|marshal\.loads|fromCharCode|FromBase64String|unpack\(\s*['\"]m|rot13|codecs\.decode|(\\x[0-9a-fA-F]{2}){4}"),
    "run": re.compile(r"\b(exec|eval|system|compile|Function|popen|iex|Invoke-Expression|execSync|spawnSync|os\.execute|loadstring|instance_eval)\b|\bIEX\b"),
    "remote": re.compile(r"urlopen|urllib|requests\.(get|post)|http\.get|https\.get|fetch\(|Net::HTTP|LWP|open-uri|file_get_contents\(\s*['\"]https?|DownloadString|Invoke-WebRequest|\bhttpx\b"),
    "rawsock": re.compile(r"use\s+Socket|-M(IO::)?Socket|IO::Socket|Socket::INET|socket\s*\(\s*\w+\s*,\s*(PF|AF)_INET|socket\.socket\s*\(|import\s+socket|from\s+socket\s+import|create_connection\s*\(|TCPSocket|UDPSocket|Socket\.tcp|fsockopen|stream_socket_client|net\.connect|createConnection|net\.Socket|require\(\s*['\"]net['\"]\s*\)|socket\.tcp|socket\.connect|require\s*\(?\s*['\"]socket['\"]|/inet/(tcp|udp)|Sockets\.TCPClient|java\.net\.Socket"),
    "connect": re.compile(r"connect|PeerAddr|PeerHost|TCPSocket\.(new|open)|fsockopen|stream_socket_client|create_connection|IO::Socket::INET\s*(->\s*new)?\s*\(?\s*['\"][^'\"]+:\d+|/inet/tcp/\d+/|TCPClient|new\s+Socket\s*\(|use\s+Socket|-MSocket"),
    "ipv4": re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?![\w.])"),
    "pty": re.compile(r"pty\.spawn|pty\.fork\(|openpty.*exec|IO\.popen\(.*pty|require\s*['\"]pty['\"]"),
    "fork": re.compile(r"fork\s+while\s+fork|while\s*\(?\s*(1|true|True)\s*\)?\s*:?\s*\{?\s*(os\.)?fork|loop\s*\{\s*fork|for\s*\(\s*;\s*;\s*\)\s*\{?\s*fork"),
    "envdump": re.compile(r"(print|console\.log|puts|pp|p|json\.dumps|dump)\s*\(?\s*(dict\()?\s*(os\.environ|process\.env|ENV|%ENV)\s*\)?\s*\)?\s*(;|$)"),
    "secret": re.compile(r"\.ssh/id_(rsa|dsa|ecdsa|ed25519)(?!\.pub)|\.aws/credentials|/etc/shadow|\.git-credentials|\.netrc|/proc/\w+/environ"),
    "rmtree": re.compile(r"(?:rmtree|rm_rf|rm_r|rmSync|remove_tree|rimraf|rmdirSync)\s*\(\s*(['\"])(.*?)\1"),
    "call": re.compile(r"(?:do\s+shell\s+script|system|popen[23]?|exec[lv]?p?e?|execSync|execFileSync|spawnSync|spawn|shell_exec|passthru|proc_open|check_output|check_call|getoutput|getstatusoutput|call|run|Popen|execute|%x|qx)\s*\(?\s*(['\"])((?:\\.|(?!\1).)*)\1"),
    "calllist": re.compile(r"(?:call|run|Popen|check_output|check_call|spawnSync|spawn|execv?p?)\s*\(\s*\[([^\]]*)\]"),
    "tick": re.compile(r"`([^`]+)`"),
    "awkpipe": re.compile(r"(['\"])((?:\\.|(?!\1).)*)\1\s*\|\s*getline|\|\s*(['\"])((?:\\.|(?!\3).)*)\3"),
    "lit": re.compile(r"(['\"])((?:\\.|(?!\1).)*)\1"),
}


def _show(s: str) -> str:
    return s.replace(U, "$?").replace(S, "$(..)").replace(P, "<(..)")[:80]


def _base(a: str) -> str:
    return a.rsplit("/", 1)[-1] if "/" in a and not any(m in a for m in (U, S)) else a


def _glob_name(a: str) -> bool:
    """A command word with glob characters (`/???/r?`, `/bin/[r]m`, `/*/bash`) is resolved by the filesystem, not by us."""
    return a not in ("[", "[[", "]]") and bool(re.search(r"[*?]|\[[^\]]+\]", a))


def _name_unknown(cmd) -> None:
    """Mark the command word unresolved when it is built from expansions or contains glob characters."""
    a0 = cmd.argv[0] if cmd.argv else ""
    cmd.globbed = bool(a0) and U not in a0 and S not in a0 and _glob_name(a0)
    cmd.unknown = bool(a0) and (U in a0 or S in a0 or cmd.globbed)


def _iname(nm: str) -> str:
    """python3.11 -> python, lua5.4 -> lua; used for interpreter lookups only."""
    return re.sub(r"[\d.]+$", "", nm).lower() or nm


# ---------------------------------------------------------------- tokenizer (fallback parser)

@dataclass(eq=False)
class _Raw:
    words: list
    redirs: list
    pipe: int
    stage: int = 0
    bg: bool = False
    kind: str = "cmd"  # cmd | for (words[0]=var) | words (expand only, e.g. case subject)


def _match(s: str, i: int, op: str, cl: str, bad: list) -> int:
    """Index just past the bracket closing s[i]; quote aware; len(s) (and bad flag) if unbalanced."""
    depth, j, n = 0, i, len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "'" and op != "{":
            k = s.find("'", j + 1)
            j = n if k < 0 else k + 1
            continue
        if c == '"':
            j = _dq_end(s, j + 1, bad)
            continue
        if c == "`":
            j = _bt_end(s, j + 1, bad)
            continue
        if c == op:
            depth += 1
        elif c == cl:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    bad.append(s[i:])
    return n


def _dq_end(s: str, j: int, bad: list) -> int:
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
        elif c == '"':
            return j + 1
        elif c == "$" and s[j + 1:j + 2] in ("(", "{"):
            j = _match(s, j + 1, s[j + 1], ")" if s[j + 1] == "(" else "}", bad)
        elif c == "`":
            j = _bt_end(s, j + 1, bad)
        else:
            j += 1
    bad.append("dq")
    return n


def _bt_end(s: str, j: int, bad: list) -> int:
    n = len(s)
    while j < n:
        if s[j] == "\\":
            j += 2
        elif s[j] == "`":
            return j + 1
        else:
            j += 1
    bad.append("bt")
    return n


_OP = re.compile(r"(\d*)(<<<|<<-|<<|&>>|&>|>>|>&|<&|<>|>\||>|<)|(;;&|;;|;&|&&|\|\||\|&|[;&|()\n])")


def _scan_word(s: str, i: int, bad: list) -> int:
    n, j = len(s), i
    if s.startswith(("<(", ">("), j):
        j = _match(s, j + 1, "(", ")", bad)
    while j < n:
        c = s[j]
        if c in " \t\n;&|()<>":
            break
        if c == "\\":
            j += 2
        elif c == "'":
            k = s.find("'", j + 1)
            if k < 0:
                bad.append("sq")
            j = n if k < 0 else k + 1
        elif c == '"':
            j = _dq_end(s, j + 1, bad)
        elif c == "`":
            j = _bt_end(s, j + 1, bad)
        elif c == "$" and s[j + 1:j + 2] in ("(", "{"):
            j = _match(s, j + 1, s[j + 1], ")" if s[j + 1] == "(" else "}", bad)
        elif c == "$" and s[j + 1:j + 2] == "'":
            j += 2
            while j < n and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            j += 1
        else:
            j += 1
    return min(j, n)


def _lex(s: str, bad: list) -> list:
    """Tokens: ('w', raw) | ('op', op) | ['r', op, target]; heredoc bodies replace the target."""
    toks, pend, i, n = [], [], 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\r":
            i += 1
            continue
        if c == "\\" and s[i + 1:i + 2] == "\n":
            i += 2
            continue
        if c == "#" and (i == 0 or s[i - 1] in " \t\n;&|("):
            k = s.find("\n", i)
            i = n if k < 0 else k
            continue
        m = None if s.startswith(("<(", ">("), i) else _OP.match(s, i)
        if m and m.group(3) == "\n":
            toks.append(("op", "\n"))
            i += 1
            for tok, delim, strip in pend:  # read heredoc bodies
                lines = []
                while i < n:
                    k = s.find("\n", i)
                    line = s[i:n if k < 0 else k]
                    i = n if k < 0 else k + 1
                    if (line.lstrip("\t") if strip else line) == delim:
                        break
                    lines.append(line)
                tok[2] = "\n".join(lines)
            pend = []
        elif m and m.group(3):
            toks.append(("op", m.group(3)))
            i = m.end()
        elif m:
            op = m.group(2)
            i = m.end()
            while i < n and s[i] in " \t":
                i += 1
            j = _scan_word(s, i, bad)
            tok = ["r", op, s[i:j]]
            if op in ("<<", "<<-"):
                pend.append((tok, re.sub(r"[\"'\\]", "", s[i:j]), op == "<<-"))
                tok[1], tok[2] = "<<", ""
            toks.append(tok)
            i = j
        else:
            j = _scan_word(s, i, bad)
            if j == i:
                j = i + 1
            toks.append(("w", s[i:j]))
            i = j
    return toks


# ---------------------------------------------------------------- analysed command

@dataclass(eq=False)
class _Cmd:
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
        if self.cwd and p and not p.startswith(("/", "~", U, S, P, "-")):
            return self.cwd.rstrip("/") + "/" + p
        return p

    @property
    def name(self) -> str:
        return _base(self.argv[0]) if self.argv else ""

    @property
    def args(self) -> list:
        return self.argv[1:]


def _operands(args: list, with_arg: frozenset | set = frozenset()) -> list:
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


def _shorts(args: list) -> str:
    return "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--") and a != "-")


def _hosts(c: _Cmd) -> list:
    """Host names the network command talks to (URLs, user@host:path, bare host operands)."""
    hs = []
    for a in c.args:
        m = _URL.match(a)
        if m:
            hs.append(m.group(1).strip("[]"))
        elif "@" in a and ":" in a.split("@", 1)[1] and not a.startswith("-"):
            hs.append(a.split("@", 1)[1].split(":", 1)[0])
    if not hs:
        ops = _operands(c.args, _sh_set("-p -s -w -i -q -x -X -O -I -T -V -W -c -e -o -d -H -X -u -F -A -b -m -P -l"))
        hs = [o.split(":")[0] for o in ops[:1] if not o.startswith("@")]
    return hs


def _loopback(h: str) -> bool:
    h = h.lower()
    return h in ("localhost", "::1", "0.0.0.0", "0", "ip6-localhost") or h.startswith("127.") or h.endswith(".localhost")


def _remote(c: _Cmd) -> bool:
    hs = _hosts(c)
    return not hs or any(not _loopback(h) for h in hs)


# ---------------------------------------------------------------- path classification

def _npath(p: str) -> str:
    if p.startswith("//"):
        p = "/" + p.lstrip("/")
    if p.startswith("/"):
        return posixpath.normpath(p) if p != "/" else "/"
    if p == "~" or p.startswith("~/"):
        return "~" + (posixpath.normpath(p[1:]) if len(p) > 2 else "")
    return p


def _critical(p: str) -> str | None:
    """Why deleting/chmodding p recursively is catastrophic, or None."""
    if not p:
        return None
    if p[0] in (U, S) and p[1:2] == "/" and p[2:] in ("", "*", ".*", "."):
        return "unset variable would make this /"
    if p.startswith("/") and p[1:2] in (U, S):
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
        sub = _npath(core)[2:]
        return "home credentials/config" if sub in (".ssh", ".gnupg", ".aws", ".config", ".local", ".kube") else None
    if not core.startswith("/"):
        return None
    n = _npath(core)
    parts = [x for x in n.split("/") if x]
    if not parts:
        return "filesystem root"
    if any(ch in parts[0] for ch in "*?["):
        return "glob over root-level directories"
    if len(parts) == 1 and parts[0] in SYS_DIRS:
        return "system directory"
    if len(parts) == 2 and (parts[0] in ("etc", "boot", "bin", "sbin", "lib", "lib64", "root", "home", "sys", "proc", "dev") or "/".join(parts) in SYS2):
        return "system directory"
    return None


def _system_path(p: str) -> bool:
    n = _npath(p)
    if not n.startswith("/") or n.startswith(("/usr/local/", "/var/tmp", "/var/log/", "/tmp")):
        return False
    if n.startswith("/dev/"):
        return not n.startswith(SAFE_DEV) and n not in SAFE_DEV
    return n.split("/")[1] in _sh_set("etc boot bin sbin lib lib32 lib64 libx32 usr root sys proc var")


def _home_rel(p: str) -> str | None:
    n = _npath(p)
    m = re.match(r"^(~|/root|/home/[^/]+)(/.*)?$", n)
    return ("~" + (m.group(2) or "")) if m else None


def _secret(p: str) -> bool:
    if any(ch.isspace() for ch in p):
        return False
    p = p.lstrip("@<")
    if "=@" in p or "=<" in p:
        p = re.split(r"=[@<]", p, 1)[1]
    h = _home_rel(p) or _npath(p)
    b = h.rsplit("/", 1)[-1]
    if re.fullmatch(r"id_(rsa|dsa|ecdsa|ed25519)(_sk)?", b):
        return True
    if h in ("~/.ssh", "~/.ssh/*") or (h.startswith("~/.ssh/") and b not in ("known_hosts", "config", "authorized_keys") and not b.endswith(".pub")):
        return True
    if h.startswith(SECRET_HOME) or h.startswith(("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_")) and not b.endswith(".pub"):
        return True
    return "/proc/" in h and h.endswith("environ")


def _persist(p: str) -> bool:
    h = _home_rel(p)
    if h and h[2:] in HOME_RC:
        return True
    return (h or _npath(p)).startswith(PERSIST_PREFIX)


def _writes(c: _Cmd) -> list:
    """Paths this command creates, truncates, overwrites, deletes or re-permissions."""
    out = [t for op, t in c.redirs if ">" in op and not (op in (">&", "<&") and (t.isdigit() or t == "-"))]
    nm, ops = c.name, _operands(c.args, _sh_set("-t -S -m -o -g -u -n -s -e -f -I -i"))
    if nm == "tee" or nm in ("rm", "unlink", "rmdir", "shred", "truncate", "srm", "wipe"):
        out += _operands(c.args, _sh_set("-n -s -r --size --reference --iterations --random-source"))
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


# ---------------------------------------------------------------- analyser

class _An:
    """Parses and statically expands one command string (recursively) into _Cmd objects."""

    def __init__(self):
        self.vars = {"HOME": "~", "IFS": " \t\n", "0": "sh", "BASH": "/bin/bash", "PWD": ".", "PATH": "/usr/local/bin:/usr/bin:/bin", "SHELL": "/bin/sh"}
        self.cmds: list[_Cmd] = []
        self.hits: list[tuple[str, str, bool]] = []
        self.funcs, self.loops, self.flags = [], [], set()
        self.npipe, self.cwd = 0, None
        self.written: dict[str, str] = {}  # basename -> literal text written earlier in this command line
        self._subs, self._procs, self._ind = [], [], False

    def pipe(self) -> int:
        self.npipe += 1
        return self.npipe

    def hit(self, group: str, reason: str, deny: bool = True):
        self.hits.append((group, reason, deny))

    # ---- parsing
    def text(self, s: str, depth: int) -> list:
        if depth > MAX_DEPTH:
            self.hit("code_injection", f"nesting deeper than {MAX_DEPTH} levels")
            return []
        start = len(self.cmds)
        for r in self._parse(s):
            self._build(r, depth)
        return self.cmds[start:]

    def _parse(self, s: str) -> list:
        if bashlex is not None and len(s) < 20000 and "\ue000" not in s:
            try:
                src = s + "\n" if "<<" in s and not s.endswith("\n") else s
                out: list = []
                for tree in bashlex.parse(src):
                    self._walk(tree, src, out, None, 0)
                return out
            except Exception:
                pass
        return self._fallback(s)

    def _walk(self, node, src, out, pipe, stage):
        k = node.kind
        if k == "command":
            r = _Raw([], [], pipe or self.pipe(), stage)
            for p in node.parts:
                if p.kind in ("word", "assignment"):
                    r.words.append(src[p.pos[0]:p.pos[1]])
                elif p.kind == "redirect":
                    r.redirs.append(self._bl_redir(p, src))
            out.append(r)
        elif k == "pipeline":
            pid, st = self.pipe(), 0
            for p in node.parts:
                if p.kind == "pipe":
                    st += 1
                else:
                    self._walk(p, src, out, pid, st)
        elif k == "list":
            last = len(out)
            for p in node.parts:
                if p.kind == "operator":
                    if p.op == "&":
                        for r in out[last:]:
                            r.bg = True
                    continue
                last = len(out)
                self._walk(p, src, out, pipe, stage)
        elif k == "function":
            names = [p for p in node.parts if p.kind == "word"]
            start = len(out)
            for p in node.parts:
                if p.kind not in ("word", "reservedword"):
                    self._walk(p, src, out, None, 0)
            self.funcs.append((src[names[0].pos[0]:names[0].pos[1]] if names else "", out[start:]))
        elif k == "for":
            out.append(_Raw([src[p.pos[0]:p.pos[1]] for p in node.parts if p.kind == "word"], [], self.pipe(), kind="for"))
            for p in node.parts:
                if p.kind not in ("word", "reservedword"):
                    self._walk(p, src, out, pipe, stage)
        else:
            marks = []
            for p in (getattr(node, "parts", None) or getattr(node, "list", None) or []):
                if p.kind not in ("reservedword", "operator", "pipe"):
                    s0 = len(out)
                    self._walk(p, src, out, pipe, stage)
                    marks.append(out[s0:])
            if k in ("while", "until") and len(marks) >= 2:
                self.loops.append((marks[0], marks[1]))
            for rd in getattr(node, "redirects", None) or []:
                out.append(_Raw([], [self._bl_redir(rd, src)], pipe or self.pipe(), stage))

    @staticmethod
    def _bl_redir(p, src):
        if getattr(p, "heredoc", None) is not None:
            body = p.heredoc.value
            return ("<<", body.rsplit("\n", 1)[0] if "\n" in body else "")
        o = p.output
        return (p.type, str(o) if isinstance(o, int) else src[o.pos[0]:o.pos[1]])

    def _fallback(self, s: str) -> list:
        bad: list = []
        toks = _lex(s, bad)
        if bad:
            self.flags.add("unbalanced")
        out, cur, pid, stage, blocks, func, case_pat, i = [], None, self.pipe(), 0, [], None, False, 0
        while i < len(toks):
            t = toks[i]
            nxt = toks[i + 1:i + 3]
            if t[0] == "w" and cur is None:
                w = t[1]
                if case_pat:
                    j = i
                    while j < len(toks) and (toks[j][0] == "w" or toks[j] == ("op", "|") or toks[j] == ("op", "(")):
                        j += 1
                    case_pat = False
                    if j < len(toks) and toks[j] == ("op", ")"):
                        i = j + 1
                        continue
                if w in ("if", "then", "else", "elif", "fi", "do", "!", "time", "in", "esac", "coproc"):
                    if w == "do" and blocks and blocks[-1][0] in ("while", "for"):
                        blocks[-1][3] = len(out)
                elif w in ("while", "until"):
                    blocks.append(["while", None, len(out), len(out)])
                elif w == "done" and blocks and blocks[-1][0] in ("while", "for"):
                    b = blocks.pop()
                    if b[0] == "while":
                        self.loops.append((out[b[2]:b[3]], out[b[3]:]))
                elif w == "{":
                    blocks.append(["{", func, len(out), 0])
                    func = None
                elif w == "}":
                    if blocks and blocks[-1][0] == "{":
                        b = blocks.pop()
                        if b[1] is not None:
                            self.funcs.append((b[1], out[b[2]:]))
                elif w in ("for", "select", "case"):
                    j, words = i + 1, []
                    while j < len(toks) and toks[j][0] == "w" and toks[j][1] not in ("do",):
                        words.append(toks[j][1])
                        j += 1
                        if w == "case" and words[-1] == "in":
                            break
                    if w == "case":
                        out.append(_Raw(words, [], self.pipe(), kind="words"))
                        case_pat = True
                    else:
                        out.append(_Raw(words[:1] + words[2:], [], self.pipe(), kind="for"))
                        blocks.append(["for", None, len(out), len(out)])
                    i = j if w != "case" else j
                    continue
                elif w == "function" and nxt and nxt[0][0] == "w":
                    func = nxt[0][1]
                    i += 2
                    if toks[i:i + 2] == [("op", "("), ("op", ")")]:
                        i += 2
                    continue
                elif w == "[[":
                    j, words = i, []
                    while j < len(toks) and toks[j] != ("w", "]]"):
                        words.append(toks[j][1] if toks[j][0] != "r" else toks[j][1] + toks[j][2])
                        j += 1
                    out.append(_Raw(words + ["]]"], [], pid, stage))
                    i = j + 1
                    continue
                elif nxt == [("op", "("), ("op", ")")]:
                    func = w
                    i += 3
                    continue
                else:
                    cur = _Raw([w], [], pid, stage)
                    out.append(cur)
            elif t[0] == "w":
                cur.words.append(t[1])
            elif t[0] == "r":
                if cur is None:
                    cur = _Raw([], [], pid, stage)
                    out.append(cur)
                cur.redirs.append((t[1], t[2]))
            elif t[1] in ("|", "|&"):
                stage, cur = stage + 1, None
            elif t[1] == "(":
                blocks.append(["(", func, len(out), 0])
                func, cur = None, None
            elif t[1] == ")":
                if blocks and blocks[-1][0] == "(":
                    b = blocks.pop()
                    if b[1] is not None:
                        self.funcs.append((b[1], out[b[2]:]))
                cur = None
            else:
                if t[1] == "&":
                    for r in out:
                        if r.pipe == pid:
                            r.bg = True
                case_pat = case_pat or t[1] in (";;", ";&", ";;&")
                cur, pid, stage = None, self.pipe(), 0
            i += 1
        return out

    # ---- word expansion
    def expand(self, raw: str, depth: int) -> list:
        out = []
        for w in _brace(raw):
            out.extend(self._expand1(w, depth))
        return out

    def join(self, raw: str, depth: int) -> str:
        return " ".join(self._expand1(raw, depth)) if raw else ""

    def _var(self, name: str) -> str:
        return self.vars.get(name, U)

    def _expand1(self, w: str, depth: int) -> list:
        pieces, lit, i, n, dq, quoted = [], [], 0, len(w), False, False

        def flush():
            if lit:
                pieces.append(("".join(lit), False))
                lit.clear()

        while i < n:
            c = w[i]
            if c == "\\":
                nx = w[i + 1:i + 2]
                if dq and nx not in ("$", "`", '"', "\\", "\n"):
                    lit.append("\\")
                    i += 1
                else:
                    lit.append("" if nx == "\n" else nx)
                    i += 2
            elif c == "'" and not dq:
                k = w.find("'", i + 1)
                k = n if k < 0 else k
                lit.append(w[i + 1:k])
                i, quoted = k + 1, True
            elif c == '"':
                dq, quoted, i = not dq, True, i + 1
            elif c == "$" and not dq and w[i + 1:i + 2] == "'":
                val, i = _ansi_c(w, i + 2)
                if val != w[i - len(val) - 1:i - 1]:
                    self.flags.add("ansi_c")
                lit.append(val)
                quoted = True
            elif c == "$" and not dq and w[i + 1:i + 2] == '"':
                i += 1
            elif c == "$" and w.startswith("$((", i):
                k = _match(w, i + 1, "(", ")", [])
                if "$(" in w[i + 3:k] or "`" in w[i + 3:k]:
                    self._expand1(w[i + 3:k - 2], depth)
                flush()
                pieces.append((U, not dq))
                i = k
            elif (c == "$" and w[i + 1:i + 2] == "(") or c == "`":
                k = _match(w, i + 1, "(", ")", []) if c == "$" else _bt_end(w, i + 1, [])
                inner = w[i + 2:k - 1] if c == "$" else w[i + 1:k - 1].replace("\\`", "`")
                flush()
                pieces.append((self._cmdsub(inner, depth), not dq))
                i = k
            elif c == "$" and w[i + 1:i + 2] == "{":
                k = _match(w, i + 1, "{", "}", [])
                flush()
                pieces.append((self._param(w[i + 2:k - 1], depth), not dq))
                i = k
            elif c == "$" and _VARNAME.match(w, i + 1):
                m = _VARNAME.match(w, i + 1)
                flush()
                pieces.append((self._var(m.group(0)), not dq))
                if m.group(0) == "IFS":
                    self.flags.add("ifs")
                i = m.end()
            elif c in "<>" and i == 0 and w[1:2] == "(":
                k = _match(w, 1, "(", ")", [])
                self._procs.append((c, self.text(w[2:k - 1], depth + 1)))
                flush()
                pieces.append((P, False))
                i = k
            else:
                lit.append(c)
                i += 1
        flush()
        fields, cur, have = [], "", quoted
        ifs = self.vars.get("IFS", " \t\n")
        ifs = ifs if ifs and U not in ifs else " \t\n"
        splitter = re.compile("[" + re.escape(ifs) + "]+")
        for t, sp in pieces:
            if not sp or not t:
                cur += t
                continue
            parts = [x for x in splitter.split(t) if x]
            if t[0] in ifs and (cur or have):
                fields.append(cur)
                cur, have = "", False
            if parts:
                cur += parts[0]
                for p in parts[1:]:
                    fields.append(cur)
                    cur = p
                have = True
            if t[-1] in ifs and (cur or have):
                fields.append(cur)
                cur, have = "", False
        if cur or have:
            fields.append(cur)
        return fields

    def _cmdsub(self, inner: str, depth: int) -> str:
        cmds = self.text(inner, depth + 1)
        self._subs.extend(cmds)
        if len(cmds) == 1 and not cmds[0].subs and cmds[0].name in ("echo", "printf"):
            args = [a for a in cmds[0].args if a not in ("-n", "-e", "-E")]
            return _unescape(" ".join(args)) if cmds[0].name == "printf" or "-e" in cmds[0].args else " ".join(args)
        if len(cmds) == 1 and cmds[0].name == "pwd":
            return "."
        if len(cmds) == 1 and cmds[0].name == "cat" and not cmds[0].args and cmds[0].redirs[:1] and cmds[0].redirs[0][0] in ("<<", "<<<"):
            return cmds[0].redirs[0][1]
        return S

    def _param(self, inner: str, depth: int) -> str:
        if inner.startswith("!"):
            self._ind = True
            self.flags.add("indirect")
            return U
        if re.search(r"@[PEAQaKk]$", inner):
            self._ind = True
            self.flags.add("prompt" if inner.endswith("@P") else "indirect")
            return U
        if inner.startswith("#"):
            v = self.vars.get(inner[1:])
            return str(len(v)) if v is not None and U not in v else U
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])(.*)$", inner, re.S)
        if not m:
            return U
        name, op = m.groups()
        if name == "IFS":
            self.flags.add("ifs")
        val = self.vars.get(name)
        known = val is not None and U not in val and S not in val
        if not op:
            return val if val is not None else U
        if op[:2] in (":-", ":=") or op[:1] in ("-", "="):
            word = op[2:] if op[0] == ":" else op[1:]
            return val if known and val else self.join(word, depth)
        if op[:2] == ":+" or op[:1] == "+":
            return self.join(op[2:] if op[0] == ":" else op[1:], depth) if known and val else ("" if known else U)
        if op[:2] == ":?":  # `${X:?msg}` aborts when X is unset or empty: the value is unknown but never empty
            return val if known and val else U + U
        if not known:
            return U
        sm = re.match(r":\s*(-?\d+)\s*(?::\s*(-?\d+))?$", op)
        if sm:
            a, b = int(sm.group(1)), sm.group(2)
            a = max(len(val) + a, 0) if a < 0 else a
            return val[a:] if b is None else val[a:a + int(b)] if int(b) >= 0 else val[a:int(b)]
        for pre, fn in (("//", lambda v, x, y: v.replace(x, y)), ("/", lambda v, x, y: v.replace(x, y, 1))):
            if op.startswith(pre):
                x, _, y = op[len(pre):].partition("/")
                return fn(val, x, y) if x and not any(ch in x for ch in "*?[") else U
        for pre, fn in (("##", str.removeprefix), ("#", str.removeprefix), ("%%", str.removesuffix), ("%", str.removesuffix)):
            if op.startswith(pre):
                x = op[len(pre):]
                return fn(val, x) if not any(ch in x for ch in "*?[") else U
        return {"^^": val.upper(), ",,": val.lower()}.get(op, U)

    # ---- building and unwrapping simple commands
    def _build(self, r: _Raw, depth: int):
        saved = (self._subs, self._procs, self._ind)
        self._subs, self._procs, self._ind = [], [], False
        try:
            if r.kind == "for":
                items = [f for w in r.words[1:] for f in self.expand(w, depth)]
                if r.words:
                    crit = [x for x in items if _critical(x)]
                    self.vars[r.words[0]] = (crit or items or [U])[0]
                return
            if r.kind == "words":
                for w in r.words:
                    self.expand(w, depth)
                return
            words, assigns = list(r.words), {}
            while words and _ASSIGN.match(words[0]):
                nm, val = words.pop(0).split("=", 1)
                assigns[nm.rstrip("+").split("[")[0]] = self.join(val, depth)
            argv = [f for w in words for f in self.expand(w, depth)]
            redirs = []
            for op, tgt in r.redirs:
                redirs.append((op, tgt if op == "<<" else self.join(tgt, depth)))
            if not words:
                self.vars.update(assigns)
            cmd = _Cmd(argv, assigns, redirs, r.pipe, r.stage, r.bg, depth, subs=self._subs, procs=self._procs)
            _name_unknown(cmd)
            cmd.indirect, cmd.cwd = self._ind, self.cwd
            if words and argv and argv[0] != words[0] and not cmd.unknown and not words[0].startswith(("$", '"$')):
                self.flags.add("obfuscated_name")
            self._finish(cmd, depth)
        finally:
            self._subs, self._procs, self._ind = saved

    def _finish(self, cmd: _Cmd, depth: int):
        for _ in range(MAX_DEPTH + 2):
            if not cmd.argv or cmd.unknown:
                break
            nm = cmd.name
            if nm in ("export", "declare", "typeset", "local", "readonly"):
                for a in cmd.args:
                    if _ASSIGN.match(a):
                        k, v = a.split("=", 1)
                        cmd.assigns[k] = self.vars[k] = v
                break
            res = _unwrap(self, cmd)
            if res is None:
                break
            kind, val = res
            cmd.wrappers.append(nm)
            cmd.wrapped.append(list(cmd.argv))
            if len(cmd.wrappers) > MAX_DEPTH:
                self.hit("code_injection", "too many nested wrappers")
                break
            if kind == "code":
                cmd.code = self.text(val, depth + 1)
                break
            cmd.argv = val
            _name_unknown(cmd)
        for k, v in cmd.assigns.items():  # prefix, `env K=V` and `export K=V` values that name a program
            if k in CMD_ENV and v:
                cmd.subs.extend(self.text(v, depth + 1))
        nm = cmd.name
        tool_code = _tool_code(cmd) if nm in TOOL_SHELLS and not cmd.unknown else []
        for code in tool_code[:16]:  # sqlite3 '.shell ..', mysql '\\! ..', psql COPY .. PROGRAM '..', gdb -ex '!..'
            inner = self.text(code, depth + 1)
            for x in inner:
                x.parent = x.parent or nm
            cmd.subs.extend(inner)
        if nm == "git" and not cmd.unknown:
            for code in _git_code(cmd.args):
                inner = self.text(code, depth + 1)
                for x in inner:
                    x.parent = x.parent or "git"
                cmd.subs.extend(inner)
        if nm in ("cd", "pushd"):
            t = (cmd.args or ["~"])[0]
            self.cwd = _npath(t) if t.startswith(("/", "~")) and not (U in t or S in t) else cmd.path(t) if self.cwd and U not in t else None
        if cmd.unknown and "-c" in cmd.args[:-1] and not (nm in SHELLS or _iname(nm) in SHELLS):
            cmd.subs.extend(self.text(cmd.args[cmd.args.index("-c") + 1], depth + 1))
        if nm in SHELLS or _iname(nm) in SHELLS:
            code, script = _shell_args(cmd.args)
            body = next((t for op, t in cmd.redirs if op in ("<<", "<<<")), None)
            if code is not None:
                cmd.code = self.text(code, depth + 1)
            elif script is None and body is not None:
                cmd.code = self.text(body, depth + 1)
            elif script is not None and _base(script) in self.written:
                cmd.subs.extend(self.text(self.written[_base(script)], depth + 1))
        elif nm in ("at", "batch"):
            body = next((t for op, t in cmd.redirs if op in ("<<", "<<<")), None)
            if body is not None:
                cmd.code = self.text(body, depth + 1)
        elif nm == "find":
            self._find_exec(cmd, depth)
        elif nm in ("eval", "source", "."):
            if nm == "eval":
                cmd.code = self.text(" ".join(cmd.args), depth + 1)
            elif cmd.args and _base(cmd.args[0]) in self.written:
                cmd.subs.extend(self.text(self.written[_base(cmd.args[0])], depth + 1))
        else:
            cmd.icode = _interp_code(cmd)
            if cmd.icode:
                self._shell_outs(cmd, depth)
        if cmd.argv and "/" in cmd.argv[0] and not cmd.unknown and nm in self.written and cmd.code is None:
            cmd.subs.extend(self.text(self.written[nm], depth + 1))  # echo '..' > x.sh && ./x.sh
        if cmd.stage > 0 and _executes_stdin(cmd):
            self._piped_script(cmd, depth)
        self._track_written(cmd, depth)
        self.cmds.append(cmd)

    def _track_written(self, cmd: _Cmd, depth: int):
        """Remember literal text written by echo/printf/cat-heredoc so a later `sh x.sh`/`./x.sh` is analysed.

        Text written into git hooks is analysed at once: git runs it later without any visible command."""
        text = _literal_text(cmd)
        if text is None:
            return
        for op, t in cmd.redirs:
            if op in (">", ">>", ">|") and t and U not in t and S not in t:
                b = _base(t)
                self.written[b] = (self.written.get(b, "") + "\n" + text) if op == ">>" else text
                if re.search(r"(^|/)(\.git/hooks|\.githooks|\.husky|\.git-hooks)/", t):  # git runs these later
                    cmd.subs.extend(self.text(text, depth + 1))

    def _piped_script(self, cmd: _Cmd, depth: int):
        """`echo 'ls' | sh`, `cat <<EOF | bash`: analyse the literal text the interpreter will run."""
        for u in self.cmds:
            if u.pipe == cmd.pipe and u.stage < cmd.stage:
                text = _literal_text(u)
                for text in ([text] if text is not None else []):
                    if cmd.name in SHELLS or _iname(cmd.name) in SHELLS or cmd.unknown or cmd.name in ("at", "batch"):
                        cmd.subs.extend(self.text(text, depth + 1))
                    elif not cmd.icode:
                        cmd.icode = text
                        self._shell_outs(cmd, depth)

    def _find_exec(self, cmd: _Cmd, depth: int):
        args = cmd.args
        root = next((a for a in args if not a.startswith(("-", "(", "!"))), ".")
        i = 0
        while i < len(args):
            if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
                j = i + 1
                while j < len(args) and args[j] not in (";", "+", "\\;"):
                    j += 1
                inner = [root if a == "{}" else a for a in args[i + 1:j]]
                if inner:
                    self._finish(_Cmd(inner, {}, [], self.pipe(), 0, depth=depth + 1, wrappers=["find"]), depth + 1)
                i = j
            i += 1

    def _shell_outs(self, cmd: _Cmd, depth: int):
        """Recurse into literal shell commands an inline program hands to system()/exec()/backticks."""
        code, lits = cmd.icode, []
        for m in _RX["call"].finditer(code):
            lits.append(m.group(2))
        for m in _RX["calllist"].finditer(code):
            lits.append(" ".join(x.group(2) for x in _RX["lit"].finditer(m.group(1))))
        if _iname(cmd.name) in ("perl", "ruby", "php") or cmd.name in AWKS:
            lits += [m.group(1) for m in _RX["tick"].finditer(code)]
        if cmd.name in AWKS:
            lits += [m.group(2) or m.group(4) for m in _RX["awkpipe"].finditer(code)]
        for lit in lits[:16]:
            if lit and lit.strip():
                inner = self.text(_unescape(lit), depth + 1)
                for x in inner:
                    x.parent = x.parent or cmd.name
                cmd.subs.extend(inner)
        if re.search(r"(system|exec|eval|popen)\s*\(?\s*(\$0|\$_|<STDIN>|sys\.stdin|STDIN|gets|readline|input\()", code):
            cmd.stdin_exec = True


def _brace(raw: str, limit: int = 64) -> list:
    """Unquoted brace lists: {rm,-rf,/} -> three words, r{m,} -> rm r."""
    if "{" not in raw or "," not in raw or len(raw) > 2000:
        return [raw]
    i, n, q = 0, len(raw), None
    while i < n:
        c = raw[i]
        if q:
            q = None if c == q else q
        elif c == "\\":
            i += 1
        elif c in "'\"":
            q = c
        elif c == "{" and (i == 0 or raw[i - 1] != "$"):
            depth, j, commas = 0, i, []
            while j < n:
                if raw[j] == "{":
                    depth += 1
                elif raw[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif raw[j] == "," and depth == 1:
                    commas.append(j)
                elif raw[j] in " '\"\t":
                    break
                j += 1
            if j < n and raw[j] == "}" and commas:
                cuts = [i] + commas + [j]
                alts = [raw[cuts[k] + 1:cuts[k + 1]] for k in range(len(cuts) - 1)]
                res = []
                for a in alts:
                    res.extend(_brace(raw[:i] + a + raw[j + 1:], limit))
                    if len(res) >= limit:
                        break
                return [" ".join(res)] if len(res) > limit else res
        i += 1
    return [raw]


_ESC = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
        "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _ansi_c(w: str, i: int) -> tuple:
    out, n = [], len(w)
    while i < n and w[i] != "'":
        if w[i] == "\\" and i + 1 < n:
            m = re.compile(r"x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{1,4})|U([0-9a-fA-F]{1,8})|([0-7]{1,3})|c(.)").match(w, i + 1)
            if m:
                h = m.group(1) or m.group(2) or m.group(3)
                out.append(chr(int(h, 16)) if h else chr(int(m.group(4), 8)) if m.group(4) else chr(ord(m.group(5)) & 31))
                i = m.end()
                continue
            out.append(_ESC.get(w[i + 1], "\\" + w[i + 1]))
            i += 2
        else:
            out.append(w[i])
            i += 1
    return "".join(out), i + 1


def _unescape(s: str) -> str:
    """printf / echo -e / string-literal escapes (\\x72, \\162, \\u0072, \\n)."""
    if "\\" not in s:
        return s
    return _ansi_c(s.replace("'", "\\'") + "'", 0)[0]


def _literal_text(u) -> str | None:
    """Literal text printed by `echo`/`printf` or fed to `cat` by a heredoc/here-string, else None."""
    if u.name == "cat" and not u.args:
        return next((t for op, t in u.redirs if op in ("<<", "<<<")), None)
    if u.name in ("echo", "printf") and not u.subs:
        text = " ".join(a for a in u.args if a not in ("-n", "-e", "-E"))
        return _unescape(text) if u.name == "printf" or "-e" in u.args else text
    return None


def _shell_args(args: list) -> tuple:
    """(code for -c or None, script operand or None) for sh/bash/zsh style argv."""
    has_c, i = False, 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if a == "--":
            i += 1
            break
        if a.startswith("--command"):
            return (a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")), None
        if a[:1] in "-+" and len(a) > 1:
            has_c = has_c or (a[0] == "-" and not a.startswith("--") and "c" in a)
            i += 1
            continue
        break
    rest = args[i:]
    if has_c:
        return (rest[0] if rest else ""), None
    return None, (rest[0] if rest else None)


PWSH_VALUE_OPTS = _sh_set("-w -windowstyle -executionpolicy -ep -ex -exec -version -v -inputformat -if -outputformat -of -configurationname -workingdirectory -wd -settingsfile -custompipename")


def _interp_code(cmd: _Cmd) -> str | None:
    """Inline program of python -c / perl -e / awk '...' / pwsh -enc, or a heredoc fed to an interpreter."""
    nm, args = cmd.name, cmd.args
    if nm in AWKS:
        ops = _operands(args, _sh_set("-F -v -W --assign --field-separator"))
        return None if "-f" in args or not ops else ops[0]
    base = _iname(nm)
    flags = INTERP.get(base)
    if flags is None:
        return None
    skip = False
    for i, a in enumerate(args):
        al = a.lower() if base in ("pwsh", "powershell") else a
        if skip:
            skip = False
            continue
        if base in ("pwsh", "powershell") and al in PWSH_VALUE_OPTS:
            skip = True  # -w hidden, -ExecutionPolicy Bypass ... precede the code
            continue
        if al in flags or (base in ("perl", "ruby") and re.fullmatch(r"-[a-zA-Z]*[eE]", a)):
            code = args[i + 1] if i + 1 < len(args) else ""
            if base in ("pwsh", "powershell") and al.startswith(("-e", "-enc")) and al != "-command":
                try:
                    code = "IEX base64 " + base64.b64decode(code).decode("utf-16-le", "ignore")
                except Exception:
                    code = "IEX base64 " + code
            return " ".join(args[:i]) + " " + code
        if len(a) > 2 and a[:2] in flags:
            return " ".join(args[:i]) + " " + a[2:]
        if a in ("-m", "-f") or not a.startswith("-"):
            return None
    return next((t for op, t in cmd.redirs if op in ("<<", "<<<")), None)


# ---------------------------------------------------------------- wrappers

_WRAP_OPTS = {  # wrapper -> (options taking a value, extra operands before the command)
    "sudo": ("-u -g -C -D -h -p -r -t -T -U --user --group --chdir --prompt --role --type --host --other-user --close-from", 0),
    "doas": ("-u -C", 0), "pkexec": ("--user", 0), "run0": ("-u --user -D --setenv", 0), "nohup": ("", 0),
    "nice": ("-n --adjustment", 0), "ionice": ("-c -n --class --classdata", 0), "timeout": ("-s -k --signal --kill-after", 1),
    "stdbuf": ("-i -o -e --input --output --error", 0), "setsid": ("", 0), "time": ("-f -o --format --output", 0),
    "command": ("", 0), "builtin": ("", 0), "exec": ("-a", 0), "chroot": ("--userspec --groups", 1),
    "strace": ("-e -o -p -s -u -E -a -b -I -O -P -S -X", 0), "ltrace": ("-e -o -p -s -u -a -n", 0), "taskset": ("", 1),
    "unbuffer": ("", 0), "rlwrap": ("-a -f -H -p -S", 0), "proxychains": ("-f", 0), "proxychains4": ("-f", 0),
    "torsocks": ("-u -p -a -P", 0), "catchsegv": ("", 0), "firejail": ("", 0), "chrt": ("", 1), "caffeinate": ("-t -w", 0),
    "nsenter": ("-t --target -S -G --setuid --setgid -r -w --root --wd", 0), "cgexec": ("-g", 0),
    "unshare": ("--propagation --setgroups -R --root -w --wd -S -G --map-user --map-group", 0),
    "numactl": ("-C -N -m -p -i --cpunodebind --membind --physcpubind --preferred --interleave", 0),
    "systemd-run": ("-u --unit -p --property -E --setenv --description --slice -M --machine --uid --gid --working-directory", 0),
    "busybox": ("", 0), "toybox": ("", 0), "flock": ("-w -E --timeout --conflict-exit-code", 1), "xargs": ("-I -n -P -L -l -d -E -e -s -a --arg-file --delimiter --max-args --max-procs --max-lines --replace --eof --max-chars --process-slot-var", 0),
    "doas-": ("", 0), "runuser": ("-u -g -G -s -w --user --group --shell", 0), "watch": ("-n --interval -d -g -q", 0),
}
_CODE_OPT = {"su": ("-c", "--command"), "runuser": ("-c", "--command"), "flock": ("-c", "--command"), "script": ("-c", "--command"), "sg": ("-c",)}


def _skip(args: list, with_arg: frozenset) -> int:
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return i + 1
        if not a.startswith("-") or a == "-" or _ASSIGN.match(a):
            return i
        if a in with_arg or (len(a) == 2 and a in with_arg):
            i += 2
        else:
            i += 1
    return i


_DOCKER_VAL = _sh_set(
    "-e --env --env-file -u --user -w --workdir --detach-keys -v --volume --mount -p --publish --name --network --net --entrypoint "
    "-l --label --label-file --cpus -m --memory --memory-swap --platform --restart --add-host --cap-add --cap-drop --device --dns "
    "--dns-search --hostname -h --ipc --pid --security-opt --tmpfs --ulimit --log-driver --log-opt --gpus --shm-size --runtime "
    "--userns --uts --cidfile --cgroupns --cgroup-parent --cpu-shares -c --cpuset-cpus --health-cmd --volumes-from --link --expose "
    "--pull --network-alias --ip --ip6 --group-add --sysctl --pids-limit --index -f --file -H --host --context --project-name "
    "--project-directory --profile --stop-signal --stop-timeout --annotation -a --attach --mac-address --domainname --oom-score-adj")
_KUBE_VAL = _sh_set("-c --container -n --namespace --context --cluster --kubeconfig -f --filename --pod-running-timeout --image --restart -l --selector --as --user -s --server")


def _container_inner(nm: str, args: list) -> list | None:
    """Command run inside a container by `docker exec/run`, `docker compose exec/run`, `kubectl exec/run/debug -- CMD`.

    The payload runs with the container's (often root) privileges and mounts, so it is judged like a local command."""
    if nm in ("kubectl", "oc"):
        k = next((i for i, a in enumerate(args) if a in ("exec", "run", "debug")), None)
        if k is None:
            return None
        rest = args[k + 1:]
        if "--" in rest:
            return rest[rest.index("--") + 1:] or None
        return _after_first_operand(rest, _KUBE_VAL) if args[k] == "exec" else None
    i = 0
    while i < len(args) and args[i].startswith("-"):  # global options: docker -H x / compose -f x.yml
        i += 2 if args[i] in _DOCKER_VAL else 1
    if args[i:i + 1] in (["container"], ["compose"]):
        i += 1
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] in _DOCKER_VAL else 1
    if args[i:i + 1] not in (["exec"], ["run"]):
        return None
    return _after_first_operand(args[i + 1:], _DOCKER_VAL)


def _after_first_operand(args: list, with_arg: frozenset) -> list | None:
    """Everything after the first operand (container/image/pod), skipping leading options; inner options stay intact."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 2 if args[i] in with_arg else 1
    if i < len(args) and args[i] == "--":
        i += 1
    return args[i + 1:] or None


TOOL_SHELLS = _sh_set("sqlite3 sqlite mysql mariadb psql gdb make gmake gcc cc g++ c++ clang clang++ emacs expect tclsh wish julia")


def _tool_code(cmd) -> list:
    """Shell commands that non-shell tools run for you: sqlite3 `.shell`/`.system`, mysql `\\!`/`system`, psql `\\!` and
    `COPY .. TO/FROM PROGRAM '..'`, gdb `-ex '!..'`/`shell ..`/`python ..`, `make --eval` recipes, `gcc -wrapper`,
    emacs `(shell-command ..)`, expect `spawn`, tcl `exec`, julia backticks."""
    nm, a = cmd.name, cmd.args
    texts = a + [t for op, t in cmd.redirs if op in ("<<", "<<<")]
    out = []
    if nm in ("sqlite3", "sqlite"):
        out += [m.group(2) for t in texts for m in re.finditer(r"(?m)^\s*\.(shell|system)\s+(.+)$", t)]
    elif nm in ("mysql", "mariadb"):
        out += [m.group(2) for t in texts for m in re.finditer(r"(?im)(^|;)\s*(?:\\!|system)\s+([^;]+)", t)]
    elif nm == "psql":
        out += [m.group(1) for t in texts for m in re.finditer(r"(?m)\\!\s*(.+)$", t)]
        out += [m.group(1).replace("''", "'") for t in texts for m in re.finditer(r"(?i)\bPROGRAM\s+(?:E)?'((?:''|[^'])*)'", t)]
    elif nm == "gdb":
        for i, x in enumerate(a):
            v = a[i + 1] if x in ("-ex", "--ex", "-eval-command", "--eval-command", "-iex") and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith("--eval-command=") else None
            m = re.match(r"^\s*(?:!|shell\s+|pipe\s+.*?\|\s*)(.+)$", v or "", re.S)
            if m:
                out.append(m.group(1))
            elif v and re.match(r"^\s*(python|py|pi)\b", v):
                out += [m.group(2) for m in _RX["call"].finditer(v)]
    elif nm in ("make", "gmake"):
        for i, x in enumerate(a):
            v = a[i + 1] if x == "--eval" and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith("--eval=") else None
            out += [ln.lstrip("\t-@+ ") for ln in (v or "").split("\n") if ln.startswith("\t")]
    elif nm in ("gcc", "cc", "g++", "c++", "clang", "clang++"):
        out += [" ".join(a[i + 1].split(",")) for i, x in enumerate(a[:-1]) if x == "-wrapper"]
    elif nm == "emacs":
        out += [m.group(1) for t in a for m in re.finditer(r"(?:shell-command|call-process-shell-command|start-process-shell-command)[^\"]*\"((?:\\.|[^\"])*)\"", t)]
        out += [m.group(1) for t in a for m in re.finditer(r"\((?:term|ansi-term|shell)\s+\"([^\"]+)\"", t)]
    elif nm in ("expect", "tclsh", "wish"):
        out += [m.group(2) for t in texts for m in re.finditer(r"(?m)(^|[;{\[])\s*(?:spawn|exec|open\s+\|)\s+([^;\]}\n]+)", t)]
    elif nm == "julia":
        out += [m.group(1) for t in a for m in _RX["tick"].finditer(t)]
    return [re.sub(r"\s*\d?[<>]@\w+", "", x).strip() for x in out if x and x.strip()]


_GIT_GLOBAL_VAL = _sh_set("-C -c --git-dir --work-tree --namespace --exec-path --config-env")


def _git_sub(args: list) -> tuple:
    """(subcommand, its arguments) of a git argv, skipping global options such as `-C dir` and `-c k=v`."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GIT_GLOBAL_VAL else 1
    return (args[i], args[i + 1:]) if i < len(args) else ("", [])


def _git_code(args: list) -> list:
    """Shell code git itself will run: `rebase -x CMD`, `bisect run CMD..`, `submodule foreach CMD`, `!` aliases."""
    out = []
    sub, rest = _git_sub(args)
    for i, x in enumerate(args):  # git -c alias.x='!cmd'
        if x == "-c" and i + 1 < len(args) and re.match(r"^alias\.[^=]+=\s*!", args[i + 1], re.I):
            out.append(args[i + 1].split("!", 1)[1])
    if sub == "rebase":
        for i, x in enumerate(rest):
            if x in ("-x", "--exec") and i + 1 < len(rest):
                out.append(rest[i + 1])
            elif x.startswith("--exec="):
                out.append(x.split("=", 1)[1])
    elif sub == "bisect" and rest[:1] == ["run"] and rest[1:]:
        out.append(" ".join(_shq(x) for x in rest[1:]))
    elif sub == "submodule" and "foreach" in rest:
        cmd = [x for x in rest[rest.index("foreach") + 1:] if x not in ("--recursive", "-q", "--quiet")]
        if cmd:
            out.append(" ".join(cmd) if len(cmd) == 1 else " ".join(_shq(x) for x in cmd))
    elif sub == "config":
        ops = _operands(rest, _sh_set("-f --file --blob --type --default --comment"))
        if len(ops) >= 2 and re.match(r"^alias\.", ops[0], re.I) and ops[1].lstrip().startswith("!"):
            out.append(ops[1].lstrip()[1:])
    return out


def _shq(x: str) -> str:
    return x if re.fullmatch(r"[\w./:=@%+,-]+", x) else "'" + x.replace("'", "'\\''") + "'"


def _unwrap(an: _An, cmd: _Cmd):
    """Return ('argv', inner_argv) / ('code', shell_text) for wrapper commands, else None."""
    nm, args = cmd.name, cmd.args
    if nm in _CODE_OPT:
        for i, a in enumerate(args):
            for f in _CODE_OPT[nm]:
                if a == f and i + 1 < len(args):
                    return ("code", args[i + 1])
                if a.startswith(f + "=") and f.startswith("--"):
                    return ("code", a.split("=", 1)[1])
        if nm == "sg" and len(args) >= 2:
            return ("code", " ".join(args[1:]))
        if nm in ("su", "script", "sg"):
            return None
    if nm == "env":
        i = 0
        while i < len(args):
            a = args[i]
            if a in ("-u", "-C", "--unset", "--chdir"):
                i += 2
            elif a in ("-S", "--split-string") or a.startswith(("-S", "--split-string=")):
                s = args[i + 1] if a in ("-S", "--split-string") and i + 1 < len(args) else a.split("=", 1)[-1] if "=" in a else a[2:]
                return ("argv", s.split() + args[i + 2 if a in ("-S", "--split-string") else i + 1:])
            elif a.startswith("-") and a != "-":
                i += 1
            elif _ASSIGN.match(a):
                k, v = a.split("=", 1)
                cmd.assigns[k] = v
                i += 1
            else:
                return ("argv", args[i:])
        return None
    if nm == "trap" and args and args[0] not in ("-p", "-l"):
        return ("code", args[0])
    if nm in ("docker", "podman", "nerdctl", "docker-compose", "kubectl", "oc"):
        inner = _container_inner(nm, args)
        return ("argv", inner) if inner else None
    if nm == "ssh":
        ops = _operands(args, _sh_set("-b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w -B"))
        return ("code", " ".join(ops[1:])) if len(ops) > 1 else None
    spec = _WRAP_OPTS.get(nm)
    if spec is None:
        return None
    if nm == "command" and any(a in ("-v", "-V") for a in args):
        return None
    if nm in ("sudo", "doas", "sudoedit") and any(re.fullmatch(r"-[a-zA-Z]*[lvkKe][a-zA-Z]*", a) for a in args[:1]):
        return None
    i = _skip(args, _sh_set(spec[0])) + spec[1]
    rest = args[i:]
    if nm == "sudo" and any(a in ("-s", "-i") for a in args[:i]) and rest:
        return ("code", " ".join(rest))
    if nm == "watch" and "-x" not in args[:i] and rest:
        return ("code", " ".join(rest))
    if nm == "xargs":
        rest = (rest or ["echo"]) + [w for op, t in cmd.redirs if op == "<<<" for w in t.split()]
        ups = [u for u in an.cmds if u.pipe == cmd.pipe and u.stage == cmd.stage - 1]
        for u in ups:
            if u.name in ("echo", "printf"):
                rest = rest + [a for a in u.args if not a.startswith("-")]
            elif u.name == "find":
                rest = rest + [next((a for a in u.args if not a.startswith("-")), ".")]
    if nm == "chroot" and not rest:
        return None
    return ("argv", rest) if rest else None


# ---------------------------------------------------------------- command classification

def _is_fetch(c: _Cmd) -> bool:
    if c.name in DOWNLOADERS or c.name in NETCAT or (c.name == "openssl" and "s_client" in c.args):
        return True
    return bool(c.icode and _RX["remote"].search(c.icode)) or any(_is_fetch(s) for s in c.subs)


def _is_decoder(c: _Cmd) -> bool:
    nm, a = c.name, c.args
    sh = _shorts(a)
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


def _executes_stdin(c: _Cmd) -> bool:
    nm = c.name
    if c.unknown or c.stdin_exec:
        return True
    if "xargs" in c.wrappers and (nm in SHELLS or _iname(nm) in SHELLS or _iname(nm) in INTERP):
        return True
    if nm in SHELLS or _iname(nm) in SHELLS:
        code, script = _shell_args(c.args)
        return c.code is None and (script in (None, "-", "/dev/stdin") or "s" in _shorts(c.args))
    if _iname(nm) in INTERP:
        ops = _operands(c.args, _sh_set("-W -X -r --require -I -M -x"))
        return c.icode is None and (not ops or ops[0] in ("-", "/dev/stdin"))
    if nm in ("source", ".") and c.args[:1] in (["/dev/stdin"], ["-"]):
        return True
    if nm in ("at", "batch") and not any(x.startswith("-f") or x in ("-l", "-r", "-d", "-c") for x in c.args):
        return True
    return any(d == ">" and any(_executes_stdin(x) for x in cs) for d, cs in c.procs)


def _runs_code(c: _Cmd) -> bool:
    nm = c.name
    return c.unknown or c.code is not None or nm in ("eval", "source", ".") or nm in SHELLS or _iname(nm) in INTERP


# ---------------------------------------------------------------- rules (one function per concern)

Rule = Callable[["_An", "_Cmd"], list]


def r_rm(an, c):
    if c.name not in ("rm", "srm"):
        return []
    rec = bool(re.search(r"[rR]", _shorts(c.args))) or "--recursive" in c.args
    out = [("rm --no-preserve-root", True)] if "--no-preserve-root" in c.args else []
    for t in map(c.path, _operands(c.args)):
        why = _critical(t)
        if why and (rec or "*" in t or t in ("/", "~")):
            out.append((f"rm{' -r' if rec else ''} targets {_show(t)} ({why})", True))
        elif rec and (U in t or S in t) and not why:
            out.append((f"rm -r of unresolved path {_show(t)}", False))
    return out


def r_destructive_misc(an, c):
    nm, a = c.name, c.args
    if nm == "find":
        roots = [c.path(x) for x in a[:next((i for i, x in enumerate(a) if x.startswith(("-", "(", "!"))), len(a))]]
        if any(_critical(r) for r in roots) and ("-delete" in a or any(x in a for x in ("-exec", "-execdir", "-ok")) and
                                                  any(x in ("rm", "/bin/rm", "shred", "unlink", "mv", "truncate") for x in a)):
            return [(f"find {_show(roots[0])} deletes files", True)]
    if nm in ("chmod", "chown", "chgrp"):
        rec = "R" in _shorts(a) or "--recursive" in a
        for t in map(c.path, _operands(a, _sh_set("--reference"))[1:]):
            why = _critical(t)
            if why and (rec or _npath(t) in ("/", "~") or why == "filesystem root"):
                if why in ("home credentials/config", "home directory") and _self_only(nm, a):
                    continue  # chmod -R go-rwx ~/.ssh tightens; chown -R $USER ~/.config gives back to the user
                return [(f"{nm}{' -R' if rec else ''} on {_show(t)} ({why})", True)]
    if nm == "mv":
        ops = _operands(a, _sh_set("-t -S"))
        if any(_critical(t) for t in ops[:-1]) or (ops and ops[-1] == "/dev/null"):
            return [(f"mv of {_show(' '.join(ops))}", True)]
    if nm == "rsync" and any(x.startswith("--delete") for x in a):
        ops = _operands(a, _sh_set("-e --rsh --exclude --include --filter"))
        if ops and _critical(ops[-1]):
            return [(f"rsync --delete into {_show(ops[-1])}", True)]
    return []


PKG_CACHES = ("/var/lib/apt/lists/", "/var/cache/apt/", "/var/cache/apk/", "/var/cache/yum/", "/var/cache/dnf/", "/var/cache/pacman/pkg/")


def _app_path(n: str) -> bool:
    """Paths that are a user's or an application's files although they sit under a system prefix: root's home
    (/root/project/dist, when the agent runs as root its home is /root) and a site under /var/www/<site>/<...>.
    Home dotfiles, keys and whole directories stay covered by persistence/secrets/destructive_ops."""
    parts = [x for x in n.split("/") if x]
    return (parts[:1] == ["root"] and len(parts) >= 3 and not parts[1].startswith(".")) or (parts[:2] == ["var", "www"] and len(parts) >= 4)


def _self_only(nm: str, a: list) -> bool:
    """chmod that only removes group/other access (go-rwx, 700, 600, u=rwX,go=), or chown to the invoking user
    ($USER, $(id -u), $(whoami)): harmless on the user's own home directories."""
    ops = _operands(a, _sh_set("--reference"))
    if not ops:
        return False
    mode = ops[0]
    if nm == "chmod":
        if re.fullmatch(r"0?[4-7]00", mode):
            return True
        clauses = mode.split(",")
        return all(re.fullmatch(r"[go]+-[rwxXst]+|[go]+=|u[+=][rwxX]+", x) for x in clauses) and any(x[0] in "go" for x in clauses)
    return bool(re.fullmatch(rf"[{U}{S}]([:.][{U}{S}])?:?", mode))


def r_system_writes(an, c):
    out = []
    for t in _writes(c):
        n = _npath(c.path(t))
        if _app_path(n) or (c.name == "rm" and n.startswith(PKG_CACHES) and len(n.split("/")) > 4):
            continue  # rm -rf /var/lib/apt/lists/* is the standard image-size cleanup
        if _BLOCKDEV.match(n) or _persist(t) or n.startswith(("/etc/sudoers", "/etc/shadow", "/etc/passwd", "/etc/group", "/etc/gshadow", "/etc/ld.so", "/proc/sys", "/sys/", "/proc/sysrq")):
            continue  # owned by disk_write / persistence / privilege_escalation / env_injection / container_escape
        if _system_path(t):
            out.append((f"{c.name or 'redirect'} modifies system path {_show(t)}", True))
    return out


def r_secret_read(an, c):
    if c.icode and _RX["secret"].search(c.icode):
        return [("inline program reads secret files", True)]
    srcs = [t for op, t in c.redirs if op == "<"]
    if c.name in READERS or c.unknown:
        srcs += [x for i, x in enumerate(c.args) if not (i and c.args[i - 1] in ("-i", "-F", "-o", "--identity-file"))]
    return [(f"reads secret {_show(s)}", True) for s in srcs if _secret(s)][:1]


def r_upload(an, c):
    nm, a = c.name, c.args
    data = []
    if nm in ("curl", "curlie", "http", "https", "xh"):
        for i, x in enumerate(a):
            v = a[i + 1] if i + 1 < len(a) else ""
            if x in ("-d", "--data", "--data-binary", "--data-raw", "--data-urlencode", "--data-ascii", "--json") or x.startswith(("--data=", "--data-binary=")):
                v = v if not x.startswith("--data") or "=" not in x else x.split("=", 1)[1]
                if (v.startswith("@") or S in v or "=@" in v) and not _request_body_file(v):
                    data.append(v)
            elif x in ("-F", "--form") and ("@" in v or "=<" in v):
                data.append(v)
            elif x in ("-T", "--upload-file") or x.startswith("-T") and len(x) > 2:
                data.append(v or x[2:])
            elif "@" in x and re.match(r"^[\w.-]+=@", x):
                data.append(x)
    elif nm in ("wget", "wget2"):
        data = [x for x in a if x.startswith(("--post-file", "--body-file")) or (x.startswith("--post-data") and S in x)]
    if data and _remote(c):
        return [(f"{nm} uploads {_show(data[0])} to a non-loopback host", True)]
    ups = [u for u in an.pipes.get(c.pipe, []) if u.stage < c.stage]
    if nm in NETCAT and _remote(c) and not set(_shorts(a)) & set("zl") and (any(u.name not in ("echo", "printf") for u in ups) or any(op == "<" for op, _ in c.redirs)):
        return [(f"{nm} sends local data to a remote host", True)]
    return []


_BODY_FILE = re.compile(r"^@(?!.*(secret|credential|passw|token|private|key|auth|kube|adminsdk|service.?account|vault|config|\.env|dump|backup|\.db|sqlite))[\w][\w./-]*\.(json|xml|graphql|gql|ya?ml)$", re.I)


def _request_body_file(v: str) -> bool:
    """`curl -d @payload.json`: a JSON/XML/GraphQL/YAML request body kept in the project (relative path, ordinary
    name). Data files, dumps, archives, anything secret-looking, home or absolute paths remain uploads."""
    return bool(_BODY_FILE.match(v)) and ".." not in v.split("/") and not _sensitive(v[1:])


def _low_info_sub(s, url_host: str) -> bool:
    """A command substitution whose output is not local data: machine architecture, date, commit id, a version
    string, or text fetched from the same host as the outer URL (`dl.k8s.io/release/$(curl dl.k8s.io/..stable.txt)`)."""
    nm, a = s.name, s.args
    if s.unknown or s.code is not None or s.icode or any(op == "<" for op, _ in s.redirs) or any(not _low_info_sub(x, url_host) for x in s.subs):
        return False
    if nm in LOW_INFO_CMDS or (nm == "dpkg" and a == ["--print-architecture"]) or (nm == "rpm" and a[:1] == ["--eval"]):
        return True
    if a and all(x in ("--version", "-v", "-V", "version", "--short") for x in a):
        return True
    if nm == "git" and _git_sub(a)[0] in ("rev-parse", "describe", "rev-list") or nm == "git" and a[:2] == ["branch", "--show-current"]:
        return True
    if nm == "go" and a[:1] == ["env"] and all(x.startswith("GO") for x in a[1:]):
        return True
    if nm in ("curl", "wget") and url_host and _hosts(s) and all(h.lower() == url_host.lower() for h in _hosts(s)) and \
            not any(x.startswith(("-d", "--data", "-F", "--form", "-T", "--upload", "--json", "--post", "--body")) for x in a):
        return True
    # `$(uname -s | tr A-Z a-z)`: a filter fed by the pipe, with no file operands of its own
    nfiles = len(_operands(a, _sh_set("-d -f -F -n -c -e -v"))) - {"tr": 2, "sed": 1, "awk": 1, "grep": 1}.get(nm, 0)
    return nm in TEXT_FILTERS and s.stage > 0 and nfiles <= 0


def r_dns_exfil(an, c):
    if c.name in DOWNLOADERS | NETCAT | _sh_set("host dig nslookup ping drill traceroute whois getent ping6"):
        urls = [m for m in map(_URL.match, c.args) if m]
        plain = [x for x in c.args if not _URL.match(x)] if c.name not in DOWNLOADERS or not urls else []
        for h in [m.group(1) for m in urls] + _hosts(c) + plain:
            if S in h and re.search(S + r"[^/\s]*\.[a-zA-Z]|[a-zA-Z0-9-]\." + S, h) or (S in h and _URL.match(h) and S in (_URL.match(h).group(1))):
                return [(f"command output embedded in hostname {_show(h)}", True)]
        if any(S in m.group(0) or S in m.string for m in urls) and _remote(c):
            host = urls[0].group(1)
            if not c.subs or not all(_low_info_sub(s, host) for s in c.subs) or any(S in m.group(1) for m in urls):
                return [("command output embedded in a remote URL", True)]
    return []


def r_env_dump(an, c):
    nm, a = c.name, c.args
    dump = (nm == "env" and not c.wrappers[-1:] == ["env"] and all(x.startswith("-") or "=" in x for x in a)) or \
        (nm == "printenv" and not _operands(a)) or (nm == "set" and not a) or (nm == "export" and a in ([], ["-p"])) or \
        (nm in ("declare", "typeset") and (not a or any(x in ("-x", "-p", "-px", "-xp") for x in a) and not any(_ASSIGN.match(x) or not x.startswith("-") for x in a))) or \
        (nm == "compgen" and any(x in ("-v", "-e") for x in a))
    if any("/proc/" in x and "environ" in x for x in a + [t for _, t in c.redirs]) or (c.icode and _RX["envdump"].search(c.icode)):
        return [("reads process environment", True)]
    if not dump:
        return []
    later = sorted((u for u in an.pipes.get(c.pipe, []) if u.stage > c.stage), key=lambda u: u.stage)
    # `env | sort | grep -i path`: pass-through sorting before the grep shows no more than the grep alone
    while later and later[0].name in ("sort", "uniq") and not later[0].redirs:
        later = later[1:]
    if later and later[0].name in ("grep", "egrep", "fgrep", "rg") and not any(">" in op for op, _ in c.redirs):
        return [(f"{nm} output filtered through grep (still exposes matching variables)", False)]
    if later and later[0].name == "wc" and len(later) == 1 and not any(">" in op for op, _ in c.redirs):
        return []  # `env | wc -l` prints a count
    return [(f"{nm} dumps the environment", True)]


def r_revshell(an, c):
    nm, a = c.name, c.args
    out = [(f"network redirect {_show(t)}", True) for _, t in c.redirs if "/dev/tcp/" in t or "/dev/udp/" in t][:1]
    if nm in NETCAT and (re.search(r"[ec]", _shorts([x for x in a if not x.startswith("--")])) or any(x.startswith(("--exec", "--sh-exec", "--lua-exec")) for x in a)):
        out.append((f"{nm} with program execution", True))
    if nm == "socat" and any(re.search(r"(exec|system):", x, re.I) for x in a):
        out.append(("socat exec:/system: address", True))
    if nm == "xterm" and "-display" in a:
        out.append(("xterm -display to a remote X server", True))
    code = " ".join(c.argv) if c.icode else ""
    if code and _RX["sock"].search(code) and _RX["exec"].search(code):
        out.append((f"{nm} one-liner wires a socket to a shell/exec", True))
    elif code:
        out += _raw_socket(nm, code)
    if (code and _RX["pty"].search(code)) or (_iname(nm) == "python" and _python_module(a) == "pty"):
        out.append((f"{nm} spawns a PTY shell (reverse-shell TTY upgrade)", True))
    if nm == "socat" and any(re.search(r"tty|pty|raw,echo=0|^file:" + S, x, re.I) for x in a) and any(re.match(r"(tcp|udp|ssl|openssl|sctp)[46]?(-listen|-connect)?:", x, re.I) for x in a):
        out.append(("socat bridges a terminal to a network socket", True))
    if nm == "ztcp" and a and not a[0].startswith("-") and not _loopback(a[0]):
        out.append(("zsh ztcp opens a raw TCP connection", True))
    if nm in NETCAT or (nm == "openssl" and "s_client" in a):
        shells = [u for u in an.pipes.get(c.pipe, []) if u is not c and (u.name in SHELLS or _iname(u.name) in SHELLS) and u.code is None]
        if shells:
            out.append((f"{nm} connected to a shell in one pipeline", True))
    return out


def _python_module(args: list) -> str | None:
    """Module run by `python -m MOD` (`python3 -m pty` spawns a shell on a new PTY)."""
    i = args.index("-m") if "-m" in args else -1
    return args[i + 1] if 0 <= i < len(args) - 1 else None


def _raw_socket(nm: str, code: str) -> list:
    """Inline programs that open an outbound raw TCP socket: reverse-shell staging even without an exec yet.

    Denied when they target a literal non-loopback IP, or for perl `use Socket`/IO::Socket (a reverse-shell staple);
    a UDP `connect` + `getsockname` (the "what is my IP" idiom) and loopback-only targets are left alone."""
    if not (_RX["rawsock"].search(code) and _RX["connect"].search(code)):
        return []
    if "SOCK_DGRAM" in code and "getsockname" in code:
        return []
    ips = [ip for ip in _RX["ipv4"].findall(code) if not _loopback(ip)]
    perl = _iname(nm) == "perl" and re.search(r"use\s+Socket|-M(IO::)?Socket|IO::Socket|Socket::INET", code)
    if ips or (perl and not re.search(r"localhost|127\.0\.0\.1", code)):
        return [(f"{nm} one-liner opens a raw TCP connection{' to ' + ips[0] if ips else ''}", True)]
    return [(f"{nm} one-liner opens a TCP connection", False)]


def _could_be(pattern: str) -> str | None:
    """A dangerous program name the glob command word could expand to (`/???/r?` -> rm)."""
    base = pattern.rsplit("/", 1)[-1]
    return next((n for n in sorted(GLOB_DANGER) if fnmatch.fnmatchcase(n, base)), None)


GLOB_DANGER = SHELLS | _sh_set("rm srm shred dd mkfs nc ncat netcat socat telnet curl wget python python3 perl ruby php node lua chmod chown cat base64 sudo su kill busybox env xargs awk find tar openssl ssh scp tee cp mv")


def _lolbin(c) -> list:
    """Windows living-off-the-land binaries (certutil -urlcache, bitsadmin /transfer, mshta http:, regsvr32 /i:http)."""
    w = c.name.lower().removesuffix(".exe")
    rx = LOLBINS.get(w)
    if rx and any(rx.search(x) for x in c.args):
        return [(f"{w} used to download or run a payload (LOLBin)", True)]
    return []


def _written_payload(an, c) -> list:
    """Web shells written to disk and inline C compiled from stdin that spawns shells or sets uid 0."""
    text = _literal_text(c)
    if text is not None and any(">" in op for op, _ in c.redirs) and WEBSHELL.search(text):
        return [("writes a web shell", True)]
    if c.name in COMPILERS and "-" in c.args:
        src = [t for op, t in c.redirs if op in ("<<", "<<<")] + [_literal_text(u) or "" for u in an.pipes.get(c.pipe, []) if u.stage < c.stage]
        if any(C_PAYLOAD.search(x) for x in src):
            return [(f"{c.name} compiles an inline payload that spawns a shell / changes uid", True)]
    return []


def r_code_exec(an, c):
    out = _lolbin(c) + _written_payload(an, c)
    if c.globbed:
        hit = _could_be(c.argv[0])
        if hit:
            out.append((f"glob command name {_show(c.argv[0])} can expand to {hit}", True))
    if c.unknown:
        danger = [x for x in c.args if _critical(x) or _BLOCKDEV.match(x) or re.fullmatch(r"-[rRf]{2,}|--no-preserve-root|--recursive", x) or "/dev/tcp" in x]
        if danger or c.indirect or any(_is_fetch(s) or _is_decoder(s) for s in c.subs):
            out.append((f"command name built from expansion ({_show(c.argv[0])}) with dangerous arguments", True))
        else:
            out.append((f"command name built from expansion ({_show(c.argv[0])})", False))
    if _runs_code(c):
        if any(_is_fetch(s) or (_is_decoder(s) and s.name not in ("echo", "printf")) for s in c.subs):
            out.append((f"{c.name or 'shell'} executes downloaded/decoded content from $(..)", True))
        if any(_is_fetch(x) or _is_decoder(x) for _, cs in c.procs for x in cs):
            out.append((f"{c.name} executes downloaded/decoded content from <(..)", True))
    if c.icode:
        if _RX["run"].search(c.icode) and _RX["decode"].search(c.icode):
            out.append((f"{c.name} decodes and executes an embedded payload", True))
        if _RX["run"].search(c.icode) and _RX["remote"].search(c.icode):
            out.append((f"{c.name} fetches and executes remote code", True))
    if c.stage > 0 and _executes_stdin(c):
        ups = [u for u in an.pipes.get(c.pipe, []) if u.stage < c.stage]
        bad = [u for u in ups if _is_fetch(u) or _is_decoder(u) or u.unknown or any(U in x or S in x for x in u.args if u.name in ("echo", "printf"))]
        if bad:
            out.append((f"{bad[0].name or 'expansion'} output piped into {c.name or 'an interpreter'}", True))
        elif ups and not all(u.name in ("echo", "printf") for u in ups):
            out.append((f"{c.name} executes piped input", False))
    elif c.stage == 0 and _is_fetch(c) and c.name in DOWNLOADERS and any(u.stage > 0 for u in an.pipes.get(c.pipe, [])):
        out.append((f"{c.name} output piped to another program", False))
    return out


def r_tool_abuse(an, c):
    """Data stores and credential stores driven into writing files or handing out secrets."""
    nm, low = c.name, [x.lower() for x in c.args]
    j = " ".join(low)
    if nm in ("redis-cli", "valkey-cli", "keydb-cli") and (re.search(r"\bconfig set (dir|dbfilename)\b|\bmodule load\b", j) or
                                                           re.search(r"\b(slaveof|replicaof) (?!no\b)(\S+)", j) and not _loopback(re.search(r"\b(slaveof|replicaof) (\S+)", j).group(2))):
        return [("code_injection", f"{nm} makes the server write files or load code (CONFIG SET dir/dbfilename, MODULE LOAD, rogue replica)", True)]
    if nm in ("mysql", "mariadb", "psql", "sqlite3") and re.search(r"\binto\s+(outfile|dumpfile)\b|\bcopy\b.*\bto\s+'/", j) and \
            (WEBSHELL.search(" ".join(c.args)) or re.search(r"(outfile|dumpfile|to)\s+'(/var/www|/usr/share/nginx|/srv/www|/root/\.ssh|/home/[^/']+/\.ssh|/etc/cron)", j)):
        return [("code_injection", f"{nm} writes a web shell / key / cron file through SQL", True)]
    if nm == "git" and _git_sub(c.args)[0] in ("credential", "credential-store", "credential-cache", "credential-manager") and set(low) & {"fill", "get"}:
        return [("data_exfiltration", "git credential fill prints stored passwords/tokens", True)]
    if nm == "security" and low[:1] and low[0] in ("find-generic-password", "find-internet-password", "dump-keychain") and ("-w" in low or "-g" in low or low[0] == "dump-keychain"):
        return [("data_exfiltration", "macOS keychain secret read", True)]
    return []


def r_tool_abuse_ci(an, c):
    return [(r, d) for g, r, d in r_tool_abuse(an, c) if g == "code_injection"]


def r_tool_abuse_ex(an, c):
    return [(r, d) for g, r, d in r_tool_abuse(an, c) if g == "data_exfiltration"]


def r_priv(an, c):
    nm, a = c.name, c.args
    w = [x for x in c.wrappers if x in PRIV]
    if w:
        return [(f"runs via {w[0]}", True)]
    if nm in PRIV:
        return [(f"{nm} changes identity/privileges", True)]
    if (nm in SHELLS or _iname(nm) in SHELLS) and "p" in _shorts(a[:next((i for i, x in enumerate(a) if not x.startswith(("-", "+"))), len(a))]):
        return [(f"{nm} -p keeps setuid privileges", True)]
    if nm == "find" and re.search(r"-perm\s+[-/+]?(u=s|g=s|[0-7]*[246]000|-u=s)", " ".join(a)):
        return [("searches for setuid binaries (privilege-escalation recon)", False)]
    if nm == "rsync" and any(re.match(r"^(sudo|doas|su|pkexec)\b", v) for i, x in enumerate(a) for v in [a[i + 1] if x == "--rsync-path" and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith("--rsync-path=") else ""]):
        return [("rsync --rsync-path runs the remote side via sudo", True)]
    if nm == "mount" and _operands(a, _sh_set("-t -o -L -U")) or nm == "umount":
        return [(f"{nm} changes mounts", True)]
    if nm == "chmod":
        mode = next((x for x in a if not x.startswith("-") or re.fullmatch(r"-[rwxXst]+", x)), "")
        if re.fullmatch(r"0*[2-7][0-7]{3}", mode) and int(mode[-4]) & 6 or re.search(r"[ugoa]*[+=][rwxXt]*s", mode):
            return [(f"chmod sets setuid/setgid bit ({mode})", True)]
    for t in _writes(c):
        if _npath(t).startswith(("/etc/sudoers", "/etc/shadow", "/etc/passwd", "/etc/group", "/etc/gshadow")):
            return [(f"modifies {_npath(t)}", True)]
    return []


def _hook_value_ok(key: str, value: str) -> bool:
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
        return v == "/dev/null" or bool(v) and not v.startswith(("/", "~", "-")) and ".." not in v.split("/") and not re.search(r"[\s$`;|&<>" + U + S + "]", v)
    progs = next((ps for rx, ps in HOOK_PROGRAMS if rx.match(key)), None)
    if progs is None or not value.strip() or any(m in value for m in (S, P)) or len(value) > 500:
        return False
    try:
        sub = _analyse(value)
        if not sub.cmds or any(x.unknown or x.code is not None or _base(x.name) not in progs for x in sub.cmds):
            return False
        if any(x.name == "ssh" and any(y == "-F" or y.startswith("-F") for y in x.args) for x in sub.cmds):
            return False  # an ssh config file can carry its own ProxyCommand/LocalCommand
        return not any(d for _, _, d in _evaluate(sub, frozenset()))
    except Exception:
        return False


def _libpath_ok(v: str) -> bool:
    """LD_LIBRARY_PATH/DYLD_LIBRARY_PATH pointing at build output or toolchains (./build/lib, $CONDA_PREFIX/lib,
    /usr/local/cuda/lib64) is normal development; a world-writable drop directory (/tmp, /dev/shm) or a command
    output is the library-hijack pattern."""
    if S in v or P in v:
        return False
    for e in v.split(":"):
        if not e or e.startswith(U):  # the previous value, or $CONDA_PREFIX/lib
            continue
        n = _npath(e)
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
            if not mod or mod.startswith(("/", "~", "data:", "http:", "https:", "file:")) or U in mod or S in mod or ".." in mod.split("/"):
                return False
    return True


def r_env_inject(an, c):
    out = []
    for k, v in c.assigns.items():
        if k in ("LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "DYLD_FALLBACK_LIBRARY_PATH"):
            bad = not _libpath_ok(v)
        elif k in ("GIT_SSH_COMMAND", "GIT_EXTERNAL_DIFF"):
            bad = not _hook_value_ok(k, v)
        elif k == "NODE_OPTIONS":
            bad = not _node_options_ok(v)
        else:
            bad = (k in DANGER_ENV and (k != "ENV" or c.name in SHELLS)) or k.startswith("BASH_FUNC_") or (k == "PS4" and (S in v or U in v))
        if bad:
            out.append((f"sets {k}", True))
    if c.name == "git":
        for i, x in enumerate(c.args):
            kv = c.args[i + 1] if x == "-c" and i + 1 < len(c.args) else x[2:] if x.startswith("-c") and len(x) > 2 else None
            if kv and GIT_BAD_KEYS.match(kv.split("=", 1)[0]) and not _hook_value_ok(kv.split("=", 1)[0], kv.split("=", 1)[1] if "=" in kv else "true"):
                out.append((f"git -c {kv.split('=', 1)[0]} runs a command", True))
        sub, rest = _git_sub(c.args)
        if sub == "config":
            if any(x in ("--get", "--get-all", "--get-regexp", "--unset", "--unset-all", "-l", "--list", "--remove-section") for x in rest) or rest[:1] in (["get"], ["unset"], ["list"]):
                rest = []
            ops = _operands(rest, _sh_set("-f --file --blob --type --default --comment"))
            if ops[:1] == ["set"]:
                ops = ops[1:]
            if len(ops) >= 2 and GIT_BAD_KEYS.match(ops[0]) and not _hook_value_ok(ops[0], ops[1]):
                out.append((f"git config {ops[0]} installs a command hook", True))
    out += [(f"writes {_show(t)}", True) for t in _writes(c) if _npath(t).startswith("/etc/ld.so")]
    return out


def r_container(an, c):
    out = []
    if c.name not in DATA_CMDS and any("docker.sock" in x for x in c.args + [t for _, t in c.redirs] + [y for w in c.wrapped for y in w]):
        out.append(("touches the Docker socket", True))
    for argv in c.wrapped + [c.argv]:  # docker exec/run and kubectl exec are unwrapped to their payload
        if argv:
            out += _container_flags(_base(argv[0]), argv[1:])
    for w in [x for x in c.wrapped + [c.argv] if x]:
        if _base(w[0]) == "nsenter" and re.search(r"(^|\s)(-t\s*1|--target[= ]1)(\s|$)", " ".join(w[1:])):
            out.append(("nsenter into PID 1 namespaces", True))
    a = c.args
    if any("/proc/1/root" in x for x in a + [t for _, t in c.redirs]):
        out.append(("reaches the host filesystem via /proc/1/root", True))
    for t in _writes(c) + [x for x in a if "release_agent" in x]:
        n = _npath(t)
        if n.startswith(("/proc/sys/", "/sys/kernel/", "/sys/fs/cgroup")) or "release_agent" in n or "notify_on_release" in n:
            out.append((f"writes kernel/cgroup control file {_show(t)}", True))
            break
    return out


def _container_flags(nm, a):
    """Privileged / host-namespace / host-mount options of one docker/podman/kubectl invocation."""
    out = []
    if a[:1] == ["compose"]:
        a = a[1:]
    if nm in ("docker", "podman", "nerdctl") and a[:1] and a[0] in ("run", "create", "exec", "container"):
        j = " ".join(a)
        if re.search(r"--privileged|--(pid|userns|uts)[= ]host|--cap-add[= ](SYS_ADMIN|ALL|SYS_MODULE|DAC_READ_SEARCH|SYS_RAWIO|SYS_BOOT)|(apparmor|seccomp)[=:]unconfined|label[=:]disable|--device[= ]/dev/(sd|nvme|mem|kmsg)", j, re.I):
            out.append(("privileged/host-namespace container", True))
        for i, x in enumerate(a):
            v = a[i + 1] if x in ("-v", "--volume", "--mount") and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith(("--volume=", "--mount=", "-v=")) else None
            if v:
                src = re.sub(r"^.*(source|src)=([^,]*).*$", r"\2", v) if "=" in v else v.split(":", 1)[0]
                if _npath(src) in ("/", "/etc", "/root", "/proc", "/sys", "/dev", "/boot", "/var/run", "/run", "/home", "/var/lib/docker"):
                    out.append((f"mounts host path {src} into a container", True))
    if nm == "kubectl" and re.search(r"privileged\"?\s*:\s*true|hostPID|hostPath|--privileged", " ".join(a)):
        out.append(("kubectl privileged/host pod", True))
    return out


def r_mining(an, c):
    j = " ".join(c.argv).lower() + " " + (c.icode or "")
    if c.name.lower() in MINERS or re.search(r"stratum\d?\+(tcp|ssl|tls)://|--donate-level|-a\s+(cryptonight|randomx|rx/0)|minexmr|nanopool\.org|supportxmr|moneroocean|hashvault|2miners|f2pool|nicehash", j):
        return [("crypto miner", True)]
    return []


def r_filter_bypass(an, c):
    nm, a = c.name, c.args
    out = []
    if c.wrappers[-1:] == ["find"] and (nm in SHELLS or _iname(nm) in SHELLS) and c.code is None and \
            (_shell_args(a)[1] is None or set(_shorts(a)) & set("isp")):  # `-exec bash -n {}` checks/runs a found script
        out.append(("find -exec spawns a shell", True))
    if c.parent and (nm in SHELLS or _iname(nm) in SHELLS) and c.code is None and _shell_args(a)[1] is None:
        out.append((f"{c.parent} spawns an interactive shell (escape from a restricted program)", True))
    if nm == "sed":
        scripts = [a[i + 1] for i, x in enumerate(a[:-1]) if x in ("-e", "--expression")] or _operands(a, _sh_set("-f -l"))[:1]
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
        sub, rest = _git_sub(a)
        # -u is --upload-pack only for clone/ls-remote (push -u = --set-upstream); rebase --exec is analysed as code
        bad = ("--upload-pack", "--receive-pack") + (() if sub == "rebase" else ("--exec",)) + (("-u",) if sub in ("clone", "ls-remote") else ())
        if any(x.startswith(bad) and x != "--exec-path" or x.startswith("ext::") for x in a):
            out.append(("git option runs a command", True))
    if nm == "rsync":
        for i, x in enumerate(a):
            v = a[i + 1] if x in ("-e", "--rsh", "--rsync-path") and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith(("--rsh=", "--rsync-path=")) else None
            if v and _base(v.split()[0] if v.split() else "") not in ("ssh", "rsh", "rsync", "sudo") or v and re.search(r"[;|&`$]", v):
                out.append(("rsync -e/--rsync-path runs a non-ssh command", True))
    if nm in ("ssh", "scp", "sftp", "autossh") and re.search(r"(ProxyCommand|LocalCommand|PermitLocalCommand)\s*=?\s*", " ".join(a), re.I):
        vals = [(m.group(1), m.group(2)) for x in a for m in [re.match(r"^(?:-o)?\s*(ProxyCommand|LocalCommand|PermitLocalCommand)\s*(?:=\s*|\s+)(.*)$", x, re.I | re.S)] if m]
        # a jump through a bastion (`ProxyCommand=ssh -W %h:%p bastion`, `aws ssm start-session ..`) is routine
        if not vals or any(k.lower() != "proxycommand" or not _hook_value_ok("ProxyCommand", v) for k, v in vals):
            out.append(("ssh option runs a local command", True))
    if nm in ("man", "less", "more") and any(x.startswith(("-P", "--pager")) for x in a):
        out.append((f"{nm} custom pager command", True))
    if c.indirect:
        out.append(("indirect/prompt expansion (${!var} / ${var@P})", c.unknown or c.code is not None or "prompt" in an.flags))
    return out


def r_persistence(an, c):
    out = [(f"writes {_show(t)}", True) for t in _writes(c) if _persist(t)][:1]
    if c.name == "crontab" and not any(x in ("-l", "-u") and x == "-l" for x in c.args) and "-l" not in c.args:
        out.append(("crontab installs/changes scheduled jobs", True))
    if c.name in ("at", "batch") or (c.name in ("systemctl", "launchctl") and c.args[:1] in (["enable"], ["load"], ["link"])):
        out.append((f"{c.name} schedules/enables a service", False))
    return out


def r_process(an, c):
    nm, a = c.name, c.args
    if nm == "kill":
        ops, i = [], 0
        while i < len(a):
            if a[i] in ("-s", "-n", "--signal"):
                i += 2
                continue
            if a[i] != "--" and not (i == 0 and re.fullmatch(r"-(SIG)?[A-Za-z]+\d*|-\d{1,2}", a[i]) and a[i] != "-1"):
                ops.append(a[i])
            i += 1
        if any(x in ("1", "-1") for x in ops):
            return [("kill targets init or every process", True)]
    if nm == "killall5" or (nm in ("pkill", "killall", "slay") and (re.search(r"-u\s*(root|0)\b|--user[= ](root|0)", " ".join(a)) or set(_operands(a)) & {"init", "systemd", "sshd", "dockerd", "containerd"})):
        return [(f"{nm} kills system-wide processes", True)]
    return []


def r_power(an, c):
    nm, a = c.name, c.args
    if nm in POWER or (nm in ("init", "telinit") and a[:1] in (["0"], ["6"], ["1"], ["s"])) or \
            (nm in ("systemctl", "loginctl") and set(a) & _sh_set("poweroff reboot halt suspend hibernate hybrid-sleep kexec rescue emergency soft-reboot")):
        return [(f"{nm} {' '.join(a)[:30]} changes power state", True)]
    if any(_npath(t).startswith("/proc/sysrq-trigger") for t in _writes(c)):
        return [("writes /proc/sysrq-trigger", True)]
    return []


def r_disk(an, c):
    nm, a = c.name, c.args
    sh = _shorts(a)
    if (nm.startswith("mkfs") or nm in ("mke2fs", "mkswap", "mkdosfs", "mkntfs")) and _image_file_target(c):
        return []  # mkfs.ext4 -F rootfs.img / mkswap swapfile.img: formatting a regular file image
    if nm.startswith("mkfs") or nm in DISK_TOOLS or (nm == "cryptsetup" and set(a) & {"luksFormat", "erase"}) or (nm == "badblocks" and "w" in sh):
        return [(f"{nm} formats/erases a device", True)]
    if (nm in ("fdisk", "sfdisk") and not set(a) & {"-l", "--list", "-d", "--dump", "-V", "--verify", "-s", "--show-size"}) or \
            (nm == "parted" and not ("-l" in a or "--list" in a or "print" in a)) or (nm == "sgdisk" and not set(sh) & set("pv")):
        return [(f"{nm} rewrites a partition table", True)]
    if nm == "hdparm" and any(x.startswith(("--security-erase", "--trim-sector", "--write-sector", "--security-set-pass", "--fwdownload")) for x in a):
        return [("hdparm destructive operation", True)]
    for t in _writes(c):
        if _BLOCKDEV.match(_npath(t)):
            return [(f"writes block device {t}", True)]
    if nm in ("shred", "wipe", "dd") and any(_BLOCKDEV.match(x.split("=", 1)[-1]) for x in a if nm != "dd" or x.startswith("of=")):
        return [(f"{nm} overwrites a device", True)]
    return []


def _image_file_target(c) -> bool:
    """mkfs/mkswap aimed only at relative (or /tmp) regular files: never /dev, never an unresolved path."""
    ops = [c.path(x) for x in _operands(c.args, _sh_set("-t -L -b -C -i -I -J -m -M -n -N -o -O -r -E -T -U -e -g -G -d"))]
    ops = [x for x in ops if not re.fullmatch(r"\d+[kKmMgG]?", x)]  # trailing block count
    if not ops or any(m in x for x in ops for m in (U, S, P)):
        return False
    return all(not _npath(x).startswith("/") or _npath(x).startswith(("/tmp/", "/var/tmp/")) for x in ops) and \
        all(not _npath(x).startswith("~/.") for x in ops)


def r_recon(an, c):
    nm = c.name
    if nm in CRACKERS:
        return [(f"{nm} password cracking / payload tool", True)]
    if nm in SCANNERS:
        tg = [m.group(1) for m in map(_URL.match, c.args) if m] + [h for h in _operands(c.args, _sh_set("-p -oN -oX -oG -oA -iL --script -e -S -w -u -l -P -L")) if not re.fullmatch(r"[\d,-]+", h)]
        local = bool(tg) and all(_loopback(re.sub(r"/\d+$", "", h.split(":")[0])) for h in tg)
        return [(f"{nm} scan{' of loopback' if local else ''}", not local)]
    return []


def r_packages(an, c):
    verb = PKG.get(c.name)
    if verb and (verb in c.args or "install" in c.args or "add" in c.args or "i" in c.args[:1]):
        return [(f"{c.name} installs packages", False)]
    return []


def w_fork_bomb(an):
    out = []
    for name, body in an.funcs:
        for r in body:
            sizes = sum(1 for x in body if x.pipe == r.pipe)
            if r.words[:1] == [name] and (r.bg or sizes > 1):
                out.append((f"function {name} recursively spawns itself", True))
                break
    for cond, body in an.loops:
        if any(r.words[:1] in (["true"], [":"], ["1"]) or r.words == ["[", "1", "]"] for r in cond) and any(r.bg for r in body):
            out.append(("infinite loop spawning background processes", True))
    out += [(f"{c.name} fork loop", True) for c in an.cmds if c.icode and _RX["fork"].search(c.icode)][:1]
    return out


def w_mkfifo(an):
    names = {c.name for c in an.cmds}
    if names & {"mkfifo", "mknod"} and (names & NETCAT or any(c.name == "openssl" and "s_client" in c.args for c in an.cmds)):
        return [("named pipe wired to a network client", True)]
    return []


def w_download_exec(an):
    got, out = set(), []
    for c in an.cmds:
        nm, a = c.name, c.args
        if nm in DOWNLOADERS:
            urls = [x for x in a if _URL.match(x)]
            for i, x in enumerate(a):
                if x in ("-o", "--output", "-O", "--output-document") and i + 1 < len(a) and not (nm == "curl" and x == "-O"):
                    got.add(_base(a[i + 1]))
            if "-O" in a and nm == "curl" or "--remote-name" in a or (nm in ("wget", "aria2c") and not set(a) & {"-O", "--output-document", "-o"}):
                got.update(_base(u.split("?")[0].rstrip("/")) for u in urls)
            got.update(_base(t) for op, t in c.redirs if ">" in op)
            got.update(_base(t) for u in an.pipes.get(c.pipe, []) if u.name == "tee" for t in _operands(u.args))
            continue
        if _is_decoder(c) and nm not in ("echo", "printf", "tr", "rev"):  # base64 -d > a.sh && sh a.sh
            got.update(_base(t) for op, t in c.redirs if ">" in op)
        run = None
        if nm in SHELLS or _iname(nm) in SHELLS:
            run = _shell_args(a)[1] if c.code is None else None
        elif _iname(nm) in INTERP and not c.icode:
            run = next(iter(_operands(a, _sh_set("-W -X -m"))), None)
        elif nm in ("source", ".") and a:
            run = a[0]
        elif c.argv and "/" in c.argv[0]:
            run = c.argv[0]
        if run and got and _base(run) in got - {"-", ""}:
            out.append((f"downloaded file {run} is executed", True))
    return out


def w_flags(an):
    out = []
    if "prompt" in an.flags:
        out.append(("${var@P} prompt expansion can execute command substitutions", True))
    for f, why in (("control", "control characters in command"), ("ansi_c", "ANSI-C quoted escapes"), ("ifs", "$IFS used as separator"),
                   ("obfuscated_name", "quoted/escaped command name"), ("unbalanced", "unbalanced quoting")):
        if f in an.flags:
            out.append((why, False))
    return out


# ---------------------------------------------------------------- rules added after red-team review

def _inet_aton(h: str) -> int | None:
    """IPv4 the way inet_aton/curl parse it: 2852039166, 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518."""
    parts = h.split(".")
    if not 1 <= len(parts) <= 4 or not all(re.fullmatch(r"0[xX][0-9a-fA-F]+|\d+", p) for p in parts):
        return None
    vals = [int(p, 16) if p[:2].lower() == "0x" else int(p, 8) if len(p) > 1 and p[0] == "0" and p.isdigit() and set(p) <= set("01234567") else int(p) for p in parts]
    head, last = vals[:-1], vals[-1]
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    return sum(v << (24 - 8 * i) for i, v in enumerate(head)) + last


def _meta_host(h: str) -> bool:
    """True for a cloud instance-metadata host in any spelling (name, dotted, decimal, hex, octal, IPv6, rebinding names)."""
    h = h.strip("[]'\"").split("%")[0].lower().rstrip(".")
    if not h:
        return False
    if h in META_NAMES or any(x in h for x in ("169.254.169.254", "169-254-169-254", "a9fea9fe")):
        return True
    n = _inet_aton(h)
    if n is not None:
        return n in META_IPS
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        return False
    v4 = getattr(ip, "ipv4_mapped", None)
    return ip == ipaddress.ip_address("fd00:ec2::254") or (v4 is not None and int(v4) in META_IPS)


_URLHOST = re.compile(r"[a-zA-Z][\w+.-]*://(?:[^@/?#\s'\"]*@)?(\[[^\]\s]*\]|[^/:?#\s'\"]+)")


def r_metadata(an, c):
    """Requests to cloud metadata endpoints steal instance credentials (IAM role keys, service-account tokens)."""
    if not (c.name in NETCLIENTS or c.icode or (c.unknown and c.args)):
        return []
    texts = list(c.args) + ([c.icode] if c.icode else [])
    hosts = [m.group(1) for t in texts for m in _URLHOST.finditer(t)]
    for a in (c.args if c.name in NETCLIENTS else []):  # `curl 169.254.169.254/x`, `nc IP 80`, `--resolve h:80:IP`
        m = re.match(r"(?:[^@/\s]*@)?(\[[^\]]*\]|[^/:\s]+)", a)
        if m and not a.startswith("-") and (m.group(1) != "metadata" or a.startswith(("metadata/", "metadata:"))):
            hosts.append(m.group(1))
        hosts += [x for x in re.split(r"[:,=\s]", a) if x[:1].isdigit()]
    if c.icode:
        hosts += [m.group(2) for m in _RX["lit"].finditer(c.icode) if m.group(2).lower() != "metadata"]  # d["metadata"] is data
    low = " ".join(texts).lower()
    if any(h and _meta_host(h) for h in hosts) or any(x in low for x in META_LITERALS):
        return [("request to a cloud metadata endpoint (instance credential theft)", True)]
    return []


def _sensitive(p: str) -> bool:
    """Secrets plus files an attacker wants off the box even when world-readable (passwd, .env, keys, certificates)."""
    if not p or p.startswith("-"):
        return False
    if _secret(p):
        return True
    q = p.lstrip("@<")
    if "=@" in q or "=<" in q:
        q = re.split(r"=[@<]", q, 1)[1]
    h = _home_rel(q) or _npath(q)
    b = h.rstrip("/").rsplit("/", 1)[-1]
    return h.startswith(SENSITIVE_SYS) or bool(SENSITIVE_NAMES.match(b)) or (h.startswith("~/") and h[2:] in HIST_FILES)


def _remote_spec(a: str) -> str | None:
    """Host of an scp/rsync remote operand (`user@host:path`, `host:`, `rsync://host/x`), else None."""
    m = _URL.match(a)
    if m:
        return m.group(1).strip("[]")
    m = re.match(r"^(?:[^@/:\s]+@)?(\[[^\]]+\]|[A-Za-z0-9_.-]+):", a)
    return m.group(1).strip("[]") if m and not a.startswith(("/", "./", "~")) else None


def r_exfil_copy(an, c):
    """Sensitive local files copied to a remote host (scp/rsync/sftp put/cloud CLIs) or piped into a network client."""
    nm, a = c.name, c.args
    if nm in ("scp", "rsync", "rclone"):
        ops = _operands(a, _sh_set("-i -P -p -o -F -c -l -S -J -e --rsh --exclude --include --filter -f --rsync-path --port --password-file --config"))
        if nm == "rclone":
            ops = ops[1:]
        dest = _remote_spec(ops[-1]) if len(ops) >= 2 else None
        if dest is not None and not _loopback(dest):
            src = next((x for x in ops[:-1] if _sensitive(x) and _remote_spec(x) is None), None)
            if src:
                return [(f"{nm} copies sensitive file {_show(src)} to remote host {dest}", True)]
    if nm in ("sftp", "ftp", "lftp", "smbclient", "tftp"):
        body = " ".join([t for op, t in c.redirs if op in ("<<", "<<<")] + [_literal_text(u) or "" for u in an.pipes.get(c.pipe, []) if u.stage < c.stage] + a)
        for m in re.finditer(r"\b(m?put|reput|send|append)\s+(\S+)", body):
            if _sensitive(m.group(2).strip("'\"")):
                return [(f"{nm} uploads sensitive file {_show(m.group(2))}", True)]
    if nm in UPLOADERS:  # aws s3 cp SRC.. DEST, gsutil cp, az storage blob upload -f F, gh gist create F..
        ops = [x for x in a if not x.startswith("-")]
        k = next((i for i, x in enumerate(ops) if x in UPLOAD_VERBS), None)
        srcs = [] if k is None else ops[k + 1:] if nm == "gh" else ops[k + 1:-1]
        x = next((x for x in srcs if "://" not in x and _sensitive(x)), None)
        if x:
            return [(f"{nm} uploads sensitive file {_show(x)}", True)]
    if nm in NETCLIENTS and _remote(c):
        ups = [u for u in an.pipes.get(c.pipe, []) if u.stage < c.stage]
        srcs = [t for op, t in c.redirs if op == "<"] + [x for u in ups if u.name in READERS or u.unknown for x in u.args] + [t for u in ups for op, t in u.redirs if op == "<"]
        x = next((x for x in srcs if _sensitive(x)), None)
        if x:
            return [(f"sensitive file {_show(x)} sent to {nm}", True)]
    return []


def r_raw_memory(an, c):
    """Reading physical/kernel/process memory (/dev/mem, /proc/kcore, /proc/PID/mem) harvests keys and passwords."""
    srcs = [t for op, t in c.redirs if op == "<"]
    if c.name in READERS or c.unknown or c.name in ("strings", "dd", "hexdump", "xxd", "od", "grep", "volatility", "gcore"):
        srcs += [x[3:] if x.startswith("if=") else x for x in c.args]
    if c.icode:
        srcs += [m.group(2) for m in _RX["lit"].finditer(c.icode)]
    x = next((x for x in srcs if RAW_MEM.match(_npath(x))), None)
    return [(f"reads raw memory {x}", True)] if x else []


def _hist_value_off(k: str, v: str) -> bool:
    v = v.strip("'\"")
    if k == "HISTFILE":
        return True
    if k == "HISTIGNORE":
        return v in ("*", "*:*", "'*'")
    return v in ("", "0") or v.startswith("-")


def r_anti_forensics(an, c):
    """Clearing or disabling shell history and tampering with auth/audit logs hides what was done."""
    nm, a = c.name, c.args
    out = []
    if nm == "history" and set(_shorts(a)) & set("cdw"):
        out.append((f"history {' '.join(a)[:20]} erases/rewrites shell history", True))
    if nm == "unset" and set(a) & HIST_VARS:
        out.append(("unset disables shell history", True))
    if nm == "set" and "+o" in a and "history" in a:
        out.append(("set +o history disables shell history", True))
    for k, v in c.assigns.items():
        if k in HIST_VARS and _hist_value_off(k, v):
            out.append((f"sets {k}={_show(v)} to disable history", True))
    for t in _writes(c) + ([a[-1]] if nm == "ln" and a else []):
        h, n = _home_rel(t), _npath(t)
        if (h and h[2:] in HIST_FILES) or n in SEC_LOGS or n.startswith(tuple(x + "/" for x in SEC_LOGS)) or re.match(r"/var/log/(wtmp|btmp|auth\.log|secure|syslog|messages)[.*\d-]", n):
            out.append((f"tampers with {_show(t)}", True))
            break
    if nm.lower().removesuffix(".exe") == "wevtutil" and set(x.lower() for x in a) & {"cl", "clear-log", "sl"}:
        out.append(("wevtutil clears Windows event logs", True))
    if c.icode and re.search(r"Clear-EventLog|Remove-EventLog|Clear-History", c.icode, re.I):
        out.append(("PowerShell clears event logs/history", True))
    return out


def r_security_disable(an, c):
    """Firewall flushes, SELinux/AppArmor off, stopping audit/EDR agents and weakening kernel hardening."""
    nm, a = c.name, c.args
    low = [x.lower() for x in a]
    if re.fullmatch(r"(ip6?|eb|arp)tables(-legacy|-nft)?", nm):
        shorts = "".join(x[1:] for x in a if x.startswith("-") and not x.startswith("--"))
        pol = next((a[i + 2] for i, x in enumerate(a[:-2]) if x in ("-P", "--policy")), "")
        open_all = set(a) & {"-I", "-A", "--insert", "--append"} and "ACCEPT" in a and not set(a) & {"-s", "--source", "-p", "--protocol", "-i", "-m", "--dport", "-d"}
        if set(shorts) & set("FX") or set(a) & {"--flush", "--delete-chain"} or pol.upper() == "ACCEPT" or open_all:
            return [(f"{nm} {' '.join(a)[:30]} removes firewall rules", True)]
    if nm == "nft" and ("flush" in low or ("delete" in low and set(low) & {"table", "chain", "ruleset"})):
        return [("nft flushes/deletes the firewall ruleset", True)]
    ops = [x.lower() for x in _operands(a)]
    if nm == "ufw" and (ops[:1] in (["disable"], ["reset"]) or ops[:2] in (["default", "allow"],)):
        return [(f"ufw {ops[0]} turns off the firewall", True)]
    if nm == "firewall-cmd" and any(x.startswith(("--set-default-zone=trusted", "--panic-off")) for x in low) or nm == "netsh" and "off" in low and "advfirewall" in low:
        return [(f"{nm} opens the firewall", True)]
    if nm == "setenforce" and ops[:1] in (["0"], ["permissive"]):
        return [("setenforce disables SELinux enforcement", True)]
    if nm in ("aa-disable", "aa-complain", "aa-teardown") or (nm == "apparmor_parser" and set(a) & {"-R", "--remove"}):
        return [(f"{nm} disables AppArmor profiles", True)]
    if nm == "auditctl" and ("-D" in a or re.search(r"-e\s*0\b", " ".join(a))):
        return [("auditctl deletes audit rules / disables auditing", True)]
    units = []
    if nm == "systemctl" and set(low) & {"stop", "disable", "mask", "kill"}:
        units = ops[1:]
    elif nm in ("service", "rc-service") and len(ops) >= 2 and ops[1] == "stop":
        units = ops[:1]
    elif nm in ("update-rc.d", "chkconfig") and set(low) & {"disable", "remove", "off"}:
        units = ops[:1]
    elif nm in ("pkill", "killall", "kill"):
        units = ops + [x for s in c.subs if s.name in ("pgrep", "pidof") for x in _operands(s.args)]
    bad = next((u for u in units if SEC_SERVICES.match(u.rsplit("/", 1)[-1])), None)
    if bad:
        return [(f"{nm} stops security service {bad}", True)]
    if nm == "sysctl":
        kv = [x.split("=", 1)[0] for x in a if "=" in x and not x.startswith("-")]
        if (x := next((k for k in kv if KERNEL_SYSCTL.match(k)), None)):
            return [(f"sysctl weakens kernel hardening ({x})", True)]
    if c.icode and re.search(r"Set-MpPreference\s+-Disable|Add-MpPreference\s+-ExclusionPath|Stop-Service\s+\S*(WinDefend|Sense)", c.icode, re.I):
        return [("PowerShell disables Windows Defender", True)]
    return []


def _ssh_flag(arg: str, flag: str) -> bool:
    """True when a short-option cluster (`-fNR`, `-R8080:..`) contains `flag` before any value-taking letter."""
    if not arg.startswith("-") or arg.startswith("--"):
        return False
    for ch in arg[1:]:
        if ch == flag:
            return True
        if ch in "bcDEeFIiJLlmOopQRSWwB":
            return False
    return False


def r_tunnel(an, c):
    """Reverse tunnels and public exposure of ssh/rdp/docker ports give outsiders a way in."""
    nm, a = c.name, c.args
    if nm in ("ssh", "autossh") and (any(_ssh_flag(x, "R") for x in a) or re.search(r"RemoteForward", " ".join(a), re.I)):
        return [(f"{nm} -R remote port forward exposes a local port remotely", True)]
    if nm in TUNNEL_TOOLS and a and not set(a) <= {"--help", "-h", "version", "--version", "-v"}:
        return [(f"{nm} tunnels traffic in/out of this host", True)]
    if nm in TUNNEL_SHARE:
        ports = {p for x in a for p in re.findall(r"(?:^|:)(\d{2,5})$", x)}
        if "tcp" in a or ports & REMOTE_ADMIN_PORTS:
            return [(f"{nm} exposes a raw TCP / admin port publicly", True)]
        if set(a) & {"http", "https", "tunnel", "local", "share", "--url", "--port", "funnel"} or ports:
            return [(f"{nm} exposes a local service publicly", False)]
    return []


# group -> (per-command rules, whole-command rules). Data, not code paths: add a function to extend.
RULES: dict[str, tuple[tuple, tuple]] = {
    "destructive_ops": ((r_rm, r_destructive_misc), ()),
    "data_exfiltration": ((r_secret_read, r_upload, r_dns_exfil, r_metadata, r_exfil_copy, r_raw_memory, r_tool_abuse_ex), ()),
    "reverse_shell": ((r_revshell,), (w_mkfifo,)),
    "code_injection": ((r_code_exec, r_tool_abuse_ci), (w_download_exec,)),
    "privilege_escalation": ((r_priv,), ()),
    "dangerous_paths": ((r_system_writes,), ()),
    "env_injection": ((r_env_inject,), ()),
    "container_escape": ((r_container,), ()),
    "crypto_mining": ((r_mining,), ()),
    "filter_bypass": ((r_filter_bypass,), (w_flags,)),
    "network_recon": ((r_recon,), ()),
    "persistence": ((r_persistence,), ()),
    "process_control": ((r_process,), ()),
    "env_dump": ((r_env_dump,), ()),
    "fork_bomb": ((), (w_fork_bomb,)),
    "system_power": ((r_power,), ()),
    "disk_write": ((r_disk,), ()),
    "package_install": ((r_packages,), ()),
    "anti_forensics": ((r_anti_forensics,), ()),
    "security_disable": ((r_security_disable,), ()),
    "network_tunnel": ((r_tunnel,), ()),
}


# ---------------------------------------------------------------- public API

def _normalize(command: str) -> tuple:
    s = unicodedata.normalize("NFKC", command).translate(_ZW)
    flags = set()
    out = []
    for ch in s:
        cat = unicodedata.category(ch)
        if ch in "\t\n":
            out.append(ch)
        elif cat in ("Cc", "Cf", "Co", "Cs"):
            flags.add("control")
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out), flags


def _analyse(command: str) -> _An:
    s, flags = _normalize(command)
    an = _An()
    an.flags |= flags
    an.text(s, 0)
    an.pipes = {}
    for c in an.cmds:
        an.pipes.setdefault(c.pipe, []).append(c)
    return an


def _evaluate(an: _An, disabled: frozenset) -> list:
    hits = [h for h in an.hits if h[0] not in disabled]
    for group, (cmd_rules, whole_rules) in RULES.items():
        if group in disabled:
            continue
        for c in an.cmds:
            for rule in cmd_rules:
                hits += [(group, r, d) for r, d in rule(an, c)]
        for rule in whole_rules:
            hits += [(group, r, d) for r, d in rule(an)]
    return hits


def _verdict(hits: list) -> CommandVerdict:
    seen, reasons, groups = set(), [], []
    deny = any(d for _, _, d in hits)
    for g, r, d in sorted(hits, key=lambda h: not h[2]):
        line = f"{g}: {r}"
        if line not in seen:
            seen.add(line)
            reasons.append(line)
            if g not in groups:
                groups.append(g)
    return CommandVerdict("deny" if deny else "allow", any(not d for _, _, d in hits), reasons, tuple(groups))


def check_command(command: str, disabled_groups: frozenset[str] | set[str] = frozenset()) -> CommandVerdict:
    """Decide allow/deny for a shell command. Never raises. The verdict depends only on its inputs, so it is
    memoized: the pipeline's security hook and exec's own defence-in-depth check pay for one analysis."""
    if not isinstance(command, str):
        return _check(command, frozenset(disabled_groups or ()))
    return _check_cached(command, frozenset(disabled_groups or ()))


@functools.lru_cache(maxsize=2048)
def _check_cached(command: str, disabled: frozenset[str]) -> CommandVerdict:
    return _check(command, disabled)


def _check(command: str, disabled_groups: frozenset[str]) -> CommandVerdict:
    try:
        if not isinstance(command, str) or not command.strip():
            return CommandVerdict("deny", True, ["code_injection: empty command"], ("code_injection",))
        if "\x00" in command:
            return CommandVerdict("deny", True, ["code_injection: NUL byte in command"], ("code_injection",))
        disabled = frozenset(disabled_groups or ())
        an = _analyse(command)
        hits = _evaluate(an, disabled)
        if "unbalanced" in an.flags and not any(d for _, _, d in hits):
            flat = re.sub(r"[\"'`\\]", " ", _normalize(command)[0])
            extra = [h for h in _evaluate(_analyse(flat), disabled) if h[2]]
            if extra:
                hits.append((extra[0][0], "unparseable command with dangerous content: " + extra[0][1], True))
        return _verdict(hits)
    except Exception as exc:  # fail closed only when the text looks dangerous
        danger = re.search(r"\b(rm|mkfs|dd|curl|wget|nc|bash|sh|eval|base64|sudo|chmod|python\d?|perl)\b|/dev/|>", str(command))
        return CommandVerdict("deny" if danger else "allow", True, [f"code_injection: internal error ({type(exc).__name__})"], ("code_injection",))


def extract_simple_commands(command: str) -> list[list[str]]:
    """Every simple command that would run, after unquoting/expansion, with wrappers and sh -c/eval unwrapped."""
    try:
        if not isinstance(command, str) or "\x00" in command:
            return []
        an = _analyse(command)
        tr = str.maketrans({U: "${?}", S: "$(?)", P: "/dev/fd/63"})
        return [[a.translate(tr) for a in c.argv] for c in an.cmds if c.argv and c.code is None and c.name != "eval"]
    except Exception:
        return []



# ---------------------------------------------------------------- read-only views for approval rules
# tools_app.services.approvals judges "allow always" rules and the exec allowlist on the analysed command (argv after
# unquoting and unwrapping), never on its text. These helpers only read the analysis above.

_RULE_SYNTAX = frozenset(";&|()<>$`*?[{}\n")


def unquoted_shell_syntax(text: str) -> frozenset[str]:
    """The shell syntax `text` uses outside quotes: operators and redirections (`; & | ( ) < >`), expansions (`$`,
    backquotes, also inside double quotes), globs (`* ? [`), braces, newlines, a comment (`#`), a tilde at the start
    of a word (`~`), a trailing backslash (`\\`) or an open quote (`unterminated`). Empty for a command made only of
    literal words, quotes and escapes."""
    found: set[str] = set()
    i, n, word_start = 0, len(text), True
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                found.add("\\")
            i, word_start = i + 2, False
            continue
        if c == "'":
            k = text.find("'", i + 1)
            if k < 0:
                found.add("unterminated")
                break
            i, word_start = k + 1, False
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 2
                    continue
                if text[j] in "$`":
                    found.add(text[j])
                j += 1
            if j >= n:
                found.add("unterminated")
                break
            i, word_start = j + 1, False
            continue
        if c in " \t":
            i, word_start = i + 1, True
            continue
        if c in _RULE_SYNTAX:
            found.add(c)
        elif c == "#" and word_start:
            found.add("#")
        elif c == "~" and (word_start or text[i - 1] in "=:"):
            found.add("~")
        i, word_start = i + 1, False
    return frozenset(found)


@dataclass(frozen=True)
class RuleCommandView:
    """One command the shell would run, as approval rules see it: its argv after unquoting and unwrapping, the
    wrappers peeled off around it (outermost first: `timeout 5`, `env`, `sh -c <code>`), the variables set for it,
    the redirections of it and its wrappers, whether it carries an inline program (`python -c`, an awk program: the
    caller decides whether it can judge that program), and why its words are not plain literals (empty when they are)."""

    argv: tuple[str, ...]
    layers: tuple[tuple[str, ...], ...]
    assigns: tuple[str, ...]
    redirects: tuple[tuple[str, str], ...]
    inline_code: bool
    problems: tuple[str, ...]


@dataclass(frozen=True)
class RuleAnalysis:
    """Every command a shell string would run (RuleCommandView), the syntax it uses outside quotes, and problems of
    the text as a whole (look-alike characters, obfuscation, commands that are neither of those views)."""

    commands: tuple[RuleCommandView, ...]
    syntax: frozenset[str]
    problems: tuple[str, ...]


def _peeled_layers(c) -> list:
    """The wrapper words removed at each unwrapping step (`timeout 5` of `timeout 5 git status`)."""
    out = []
    for k, whole in enumerate(c.wrapped):
        inner = c.wrapped[k + 1] if k + 1 < len(c.wrapped) else c.argv
        cut = len(whole) - len(inner)
        out.append(tuple(whole[:cut]) if cut > 0 and list(whole[cut:]) == list(inner) else tuple(whole))
    return out


def analyse_for_rules(command: str) -> RuleAnalysis:
    """Read-only view of the analysis for approval rules and the exec allowlist (never raises)."""
    if not isinstance(command, str) or not command.strip() or "\x00" in command:
        return RuleAnalysis((), frozenset(), ("an empty command or a NUL byte",))
    problems = []
    normalized, control = _normalize(command)
    if normalized != command or control:
        problems.append("Unicode look-alike or control characters")
    syntax = unquoted_shell_syntax(command)
    try:
        an = _analyse(command)
    except Exception:
        return RuleAnalysis((), syntax, tuple(problems + ["the command could not be analysed"]))
    if an.hits:
        problems.append("nesting that is too deep")
    odd = an.flags & {"unbalanced", "obfuscated_name", "ifs", "indirect", "ansi_c", "prompt", "control"}
    if odd:
        problems.append("obfuscated shell syntax (" + ", ".join(sorted(odd)) + ")")
    if an.funcs or an.loops:
        problems.append("functions or loops")
    parent: dict = {}
    for c in an.cmds:
        for inner in c.code or ():
            parent.setdefault(id(inner), c)
    used, views = set(), []
    for leaf in (c for c in an.cmds if c.argv and c.code is None):
        chain = [leaf]
        while id(chain[-1]) in parent:
            chain.append(parent[id(chain[-1])])
        chain.reverse()
        used.update(id(c) for c in chain)
        layers, assigns, redirects, issues, inline = [], [], [], [], False
        for c in chain:
            layers.extend(_peeled_layers(c))
            if c is not leaf:
                layers.append(tuple(c.argv))
            assigns.extend(c.assigns)
            redirects.extend(c.redirs)
            if c.subs or c.procs:
                issues.append("command or process substitution")
            if c.stdin_exec:
                issues.append("a program that runs its input")
            inline = inline or bool(c.icode)
            if c.unknown or c.globbed or c.indirect:
                issues.append("a program name computed at run time")
            if c.parent or len(c.wrappers) != len(c.wrapped):
                issues.append(f"started by another program ({c.parent or c.wrappers[-1]})")
        if any(m in a for layer in layers for a in layer for m in (U, S, P)) or any(m in a for a in leaf.argv for m in (U, S, P)):
            issues.append("a value computed at run time")
        views.append(RuleCommandView(tuple(leaf.argv), tuple(layers), tuple(assigns), tuple(redirects), inline,
                                     tuple(dict.fromkeys(issues))))
    if not views:
        problems.append("no command")
    if any(id(c) not in used for c in an.cmds):
        problems.append("assignments or redirections without a command")
    return RuleAnalysis(tuple(views), syntax, tuple(problems))
