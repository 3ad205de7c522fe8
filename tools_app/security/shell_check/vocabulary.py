"""Vocabulary of the shell check: names of programs, paths, environment variables and patterns that the
parser, the unwrapper and the rule groups share. Data only (plus tiny helpers on command names), so a rule reads
as a sentence: `nm in DOWNLOADERS`, `normalize_path(t).startswith(PERSIST_PREFIX)`.
"""
from __future__ import annotations

import ipaddress
import re

UNKNOWN_VALUE, UNKNOWN_OUTPUT, PROCESS_PATH = "\ue000", "\ue001", "\ue002"  # unresolved $var, unresolved $(cmd) output, <(..) path
MAX_DEPTH = 8
ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")
URL = re.compile(r"^[a-zA-Z][\w+.-]*://(?:[^@/?#]*@)?(\[[^\]]*\]|[^/:?#]*)")
BLOCK_DEVICE = re.compile(r"^/dev/(sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|rdisk\d|md\d|dm-\d|mapper/|loop\d|sr\d|mem$|kmem$|port$|fd\d)")


def word_set(s: str) -> frozenset:
    return frozenset(s.split())


SHELLS = word_set("sh bash zsh dash ksh mksh pdksh ash fish csh tcsh yash rbash")
INTERPRETERS = {  # interpreter -> flags whose next argument is inline program text
    "python": ("-c",), "pypy": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p", "--print"),
    "nodejs": ("-e", "--eval", "-p", "--print"), "bun": ("-e", "--eval"), "deno": ("eval",), "php": ("-r",), "lua": ("-e",),
    "luajit": ("-e",), "rscript": ("-e",), "osascript": ("-e",), "tclsh": (), "wish": (), "irb": (), "iex": ("-e",),
    "elixir": ("-e",), "julia": ("-e",), "pwsh": ("-c", "-command", "-encodedcommand", "-enc", "-e", "-ec"),
    "powershell": ("-c", "-command", "-encodedcommand", "-enc", "-e", "-ec"),
}
AWKS = word_set("awk gawk mawk nawk busybox-awk")
DOWNLOADERS = word_set("curl wget wget2 fetch aria2c axel lwp-download lwp-request GET POST http https xh curlie lynx w3m tftp ftp iwr invoke-webrequest certutil dig nslookup")
NETCAT = word_set("nc ncat netcat telnet socat cryptcat pwncat")
READERS = word_set("cat tac less more head tail nl base64 base32 xxd od hexdump strings cp scp rsync sftp tar zip 7z gzip bzip2 xz zstd openssl gpg sed awk grep egrep fgrep rg sort uniq cut jq yq vi vim nano view bat curl nc ncat dd mail sendmail xclip pbcopy paste")
DATA_CMDS = word_set("echo printf grep egrep fgrep rg ag ack ls stat test [ [[ file git man which type whatis apropos")
PRIVILEGE_TOOLS = word_set("sudo su doas pkexec run0 runuser nsenter unshare chroot setcap capsh insmod modprobe rmmod useradd usermod userdel adduser deluser groupadd groupmod groupdel passwd chpasswd chage visudo gpasswd newgrp sg sudoedit")
POWER = word_set("shutdown reboot poweroff halt kexec")
MINERS = word_set("xmrig minerd cpuminer cgminer bfgminer ethminer nbminer t-rex phoenixminer lolminer xmr-stak ccminer nanominer gminer srbminer teamredminer xmrig-notls cpuminer-multi")
SCANNERS = word_set("nmap masscan zmap nikto sqlmap hydra medusa gobuster dirb dirbuster ffuf wfuzz nuclei wpscan arp-scan netdiscover unicornscan enum4linux smbmap crackmapexec responder amass rustscan")
CRACKERS = word_set("john hashcat msfvenom msfconsole ophcrack aircrack-ng")
DISK_TOOLS = word_set("blkdiscard mke2fs mkswap mkdosfs mkntfs newfs cfdisk nwipe sfill sswap sg_format sg_sanitize flash_erase flash_eraseall flashcp nandwrite afulnx afulnx_64 afuefi")
# Volume-manager commands that destroy volumes or their metadata (their `-t/--test` mode changes nothing).
LVM_DESTROY = word_set("pvremove pvcreate vgremove vgreduce lvremove lvreduce")
# Subcommands that destroy data or metadata, or write firmware: tool -> subcommands.
DESTRUCTIVE_SUBCOMMANDS = {
    "zpool": word_set("create destroy labelclear add attach replace split"),
    "zfs": word_set("destroy rollback"),
    "nvme": word_set("format sanitize fw-download fw-commit fw-activate delete-ns detach-ns write-zeroes write-uncor"),
    "fwupdmgr": word_set("install update upgrade downgrade reinstall install-blob switch-branch activate"),
    "fwupdtool": word_set("install update reinstall install-blob switch-branch activate firmware-dump firmware-convert"),
    "cryptsetup": word_set("luksFormat erase luksErase luksKillSlot"),
}
WIRELESS_ATTACK = word_set("aireplay-ng airbase-ng airgeddon bully mdk3 mdk4 reaver pixiewps wifite wifite2 fluxion wifiphisher hcxdumptool eaphammer wifipumpkin3 besside-ng wesside-ng easside-ng airodump-ng")
MITM_TOOLS = word_set("bettercap ettercap arpspoof dsniff mitm6 mitmf sslstrip macof dnsspoof")
PACKAGE_INSTALL_VERBS = {"pip": "install", "pip3": "install", "uv": "add", "poetry": "add", "npm": "install", "yarn": "add", "pnpm": "add",
       "gem": "install", "cargo": "install", "go": "install", "brew": "install", "conda": "install", "apt": "install",
       "apt-get": "install", "composer": "require", "bundle": "add", "dnf": "install", "yum": "install", "apk": "add"}


SYS_DIRS = word_set("etc usr bin sbin lib lib32 lib64 libx32 boot var opt root home sys proc dev srv mnt snap")
SYSTEM_SUBDIRS = word_set("usr/bin usr/sbin usr/lib usr/lib64 usr/local usr/share usr/include usr/libexec var/lib var/log var/spool var/cache var/www var/mail var/backups var/run")
SAFE_DEV = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/", "/dev/shm/", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/full")
HOME_RC = word_set(".bashrc .bash_profile .bash_login .bash_logout .profile .zshrc .zprofile .zshenv .zlogin .kshrc .cshrc .tcshrc .inputrc .xinitrc .xprofile .xsession .ssh/authorized_keys .ssh/authorized_keys2 .ssh/rc .ssh/environment .config/fish/config.fish .pam_environment")
PERSIST_PREFIX = ("/etc/cron", "/etc/crontab", "/etc/anacrontab", "/etc/profile", "/etc/bash.bashrc", "/etc/bashrc", "/etc/zsh", "/etc/rc.local",
                  "/etc/rc.d", "/etc/init.d", "/etc/init/", "/etc/systemd/", "/etc/xdg/autostart", "/etc/update-motd.d", "/etc/environment",
                  "/lib/systemd/", "/usr/lib/systemd/", "/var/spool/cron", "~/.config/systemd", "~/.local/share/systemd", "~/.config/autostart",
                  "~/Library/LaunchAgents", "/Library/LaunchAgents", "/Library/LaunchDaemons")


SECRET_HOME = ("~/.aws", "~/.gnupg", "~/.netrc", "~/.git-credentials", "~/.docker/config.json", "~/.kube/config", "~/.pgpass",
               "~/.config/gcloud", "~/.azure", "~/.npmrc", "~/.pypirc", "~/.vault-token", "~/.password-store",
               "~/.config/gh/hosts.yml", "~/.config/hub", "~/.cargo/credentials", "~/.gem/credentials", "~/.terraform.d/credentials.tfrc.json",
               "~/.s3cfg", "~/.config/rclone/rclone.conf", "~/.local/share/keyrings")


DANGER_ENV = word_set("LD_PRELOAD LD_LIBRARY_PATH LD_AUDIT DYLD_INSERT_LIBRARIES DYLD_LIBRARY_PATH BASH_ENV ENV PROMPT_COMMAND GIT_SSH_COMMAND GIT_SSH GIT_EXTERNAL_DIFF GIT_PROXY_COMMAND GIT_ASKPASS SSH_ASKPASS LESSOPEN LESSCLOSE PERL5OPT PYTHONSTARTUP SHELLOPTS BASHOPTS")
CMD_ENV = word_set("PAGER MANPAGER GIT_PAGER EDITOR VISUAL GIT_EDITOR GIT_SEQUENCE_EDITOR SYSTEMD_PAGER BROWSER")


# Command-valued settings that are normal with a known program: key pattern -> programs the value may run.
# Anything else in these keys (`sh -c id`, `touch /tmp/pwn`, `curl ..|sh`) stays denied; see rules.common.hook_value_ok.
PAGERS = word_set("cat less more most bat delta diff-so-fancy diff-highlight tig")
EDITORS = word_set("true : false vim vi nvim nano emacs emacsclient code code-insiders codium cursor subl mate micro hx helix kak kate gedit notepad ed cat sed")
HOOK_PROGRAMS = (
    (re.compile(r"^(core\.sshcommand|GIT_SSH_COMMAND)$", re.I), word_set("ssh")),
    (re.compile(r"^(core\.pager|pager\.[\w.-]+|GIT_PAGER)$", re.I), PAGERS),
    (re.compile(r"^(core\.editor|sequence\.editor)$", re.I), EDITORS),
    (re.compile(r"^(diff\.external|GIT_EXTERNAL_DIFF)$", re.I), word_set("difft difftastic delta icdiff ydiff diff-so-fancy")),
    (re.compile(r"^filter\.lfs\.(clean|smudge|process)$", re.I), word_set("git-lfs")),
    (re.compile(r"^ProxyCommand$", re.I), word_set("ssh nc ncat netcat connect connect-proxy corkscrew proxytunnel cloudflared aws gcloud")),
)
CRED_HELPERS = word_set("store cache osxkeychain manager manager-core libsecret wincred gnome-keyring")
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/dev/mqueue", "/var/crash")


# Command substitutions whose output carries no local secret (arch, date, commit id, version): fine inside a download URL.
LOW_INFO_CMDS = word_set("uname arch date lsb_release nproc getconf")
TEXT_FILTERS = word_set("tr sed cut head tail awk xargs grep sort uniq")
GIT_BAD_KEYS = re.compile(r"^(core\.(sshcommand|pager|editor|fsmonitor|hookspath|gitproxy|askpass)|protocol\.ext\.allow|uploadpack\.packobjectshook|diff\.external|.*\.(textconv|command)|filter\..*\.(clean|smudge|process)|sequence\.editor|credential\.helper)$", re.I)


# Cloud instance-metadata services (credential theft / SSRF targets); numeric forms are decoded by _inet_aton.
META_NAMES = word_set("metadata.google.internal metadata.goog metadata instance-data instance-data.ec2.internal metadata.tencentyun.com metadata.platformequinix.com")
META_IPS = frozenset(int(ipaddress.IPv4Address(x)) for x in ("169.254.169.254", "169.254.170.2", "169.254.170.23", "100.100.100.200"))
META_LITERALS = ("169.254.169.254", "169.254.170.2", "metadata.google.internal", "100.100.100.200", "fd00:ec2::254", "169-254-169-254", "a9fea9fe", "instance-data.ec2.internal")
NETCLIENTS = DOWNLOADERS | NETCAT | word_set("xh curlie httpie openssl ssh ws websocat grpcurl")


# Files worth stealing even when world-readable (used for copies/uploads to remote hosts, see copies_sensitive_file_to_remote).
SENSITIVE_NAMES = re.compile(r"^(\.env(\.(?!(example|sample|template|dist|defaults?)$)[\w.-]+)?|.*\.(pem|key|p12|pfx|jks|keystore|kdbx|ppk|ovpn|tfstate)|id_(rsa|dsa|ecdsa|ed25519)(_sk)?|credentials(\.json)?|\.?(bash|zsh|sh|mysql|psql|python)_history|\.npmrc|\.pypirc|\.pgpass|\.netrc|\.git-credentials|wp-config\.php|service[-_]account.*\.json)$")
SENSITIVE_SYS = ("/etc/passwd", "/etc/group", "/etc/master.passwd", "/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_", "/etc/kubernetes/admin.conf", "/etc/rancher/k3s/k3s.yaml", "/var/lib/kubelet/", "/run/secrets/", "/var/run/secrets/")
UPLOAD_VERBS = word_set("cp mv sync put upload upload-batch copy copyto create send")
UPLOADERS = word_set("aws gsutil gcloud az rclone s3cmd mc azcopy gh transfer smbclient b2 oci doctl")
RAW_MEM = re.compile(r"^(/dev/(k?mem|port)|/proc/kcore|/proc/[^/]+/mem)$")
HIST_VARS = word_set("HISTFILE HISTSIZE HISTFILESIZE SAVEHIST HISTIGNORE")
HIST_FILES = word_set(".bash_history .zsh_history .history .sh_history .ash_history .python_history .mysql_history .psql_history .node_repl_history .lesshst .viminfo .rediscli_history .sqlite_history .local/share/fish/fish_history")
SEC_LOGS = ("/var/log/auth.log", "/var/log/secure", "/var/log/wtmp", "/var/log/btmp", "/var/log/lastlog", "/var/log/faillog", "/var/log/syslog",
            "/var/log/messages", "/var/log/kern.log", "/var/log/audit", "/var/log/sudo.log", "/var/log/journal", "/var/log/system.log",
            "/var/run/utmp", "/run/utmp", "/var/log/*")


SEC_SERVICES = re.compile(r"^(auditd|audit|apparmor|firewalld|ufw|iptables|ip6tables|nftables|netfilter-persistent|fail2ban|selinux\S*|falcon\S*|crowdstrike\S*|cbagentd|cbdaemon|sentinel\S*|s1-agent|mdatp|wdavdaemon|osqueryd?|wazuh-agent|wazuh-agentd|ossec\S*|clamav-daemon|clamav-freshclam|clamd|sysmon\S*|auditbeat|elastic-agent|elastic-endpoint|aide|tripwire|suricata|snort|rsyslog|rsyslogd|syslog|syslog-ng|systemd-journald|journald|amazon-guardduty-agent|qualys-cloud-agent|rapid7\S*|ir_agent|tanium\S*|xagt|cylancesvc|bdsec|sophos\S*|esets|kesl|apparmor\.service)(\.service)?$", re.I)
KERNEL_SYSCTL = re.compile(r"^(kernel\.|fs\.suid_dumpable|fs\.protected_|net\.ipv[46]\.(ip_forward|conf\.[^.]+\.forwarding|conf\.[^.]+\.accept_source_route)|user\.max_user_namespaces|dev\.tty\.ldisc_autoload|vm\.mmap_min_addr|vm\.unprivileged_userfaultfd)")
TUNNEL_TOOLS = word_set("chisel frpc frps iodine iodined dns2tcpc dns2tcpd ptunnel ptunnel-ng ligolo ligolo-ng revsocks rpivot gost tmate sish")
TUNNEL_SHARE = word_set("ngrok cloudflared bore lt localtunnel pagekite pagekite.py zrok tailscale loophole expose serveo")
REMOTE_ADMIN_PORTS = word_set("22 23 2222 3389 5900 5901 2375 2376 445 139")


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
COMPILERS = word_set("gcc cc clang g++ c++ tcc clang++ musl-gcc")
INLINE_PATTERNS = {  # patterns applied to inline interpreter programs (python -c, perl -e, awk '...')
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


def shown(s: str) -> str:
    return s.replace(UNKNOWN_VALUE, "$?").replace(UNKNOWN_OUTPUT, "$(..)").replace(PROCESS_PATH, "<(..)")[:80]


def basename(a: str) -> str:
    return a.rsplit("/", 1)[-1] if "/" in a and not any(m in a for m in (UNKNOWN_VALUE, UNKNOWN_OUTPUT)) else a


def is_glob_name(a: str) -> bool:
    """A command word with glob characters (`/???/r?`, `/bin/[r]m`, `/*/bash`) is resolved by the filesystem, not by us."""
    return a not in ("[", "[[", "]]") and bool(re.search(r"[*?]|\[[^\]]+\]", a))


def mark_unknown_name(cmd) -> None:
    """Mark the command word unresolved when it is built from expansions or contains glob characters."""
    a0 = cmd.argv[0] if cmd.argv else ""
    cmd.globbed = bool(a0) and UNKNOWN_VALUE not in a0 and UNKNOWN_OUTPUT not in a0 and is_glob_name(a0)
    cmd.unknown = bool(a0) and (UNKNOWN_VALUE in a0 or UNKNOWN_OUTPUT in a0 or cmd.globbed)


def interpreter_name(nm: str) -> str:
    """python3.11 -> python, lua5.4 -> lua; used for interpreter lookups only."""
    return re.sub(r"[\d.]+$", "", nm).lower() or nm

# Processes and services whose loss takes the host, remote access or every container down.
CORE_PROCESSES = word_set(
    "init systemd sshd dbus-daemon dbus-broker udevd systemd-udevd systemd-journald journald systemd-logind "
    "systemd-networkd systemd-resolved networkmanager wpa_supplicant dhclient dhcpcd cron crond dockerd containerd "
    "kubelet kube-apiserver etcd agetty polkitd launchd windowserver loginwindow xorg gdm gdm3 sddm lightdm")
# Service (unit) names whose stop cuts remote access or stops the host working, as systemctl/service spell them.
# Docker is not one: `systemctl stop docker` is everyday work on a dev box (killing dockerd by PID stays denied).
CORE_SERVICES = (CORE_PROCESSES - word_set("dockerd containerd")) | word_set("ssh dbus networking network network-manager getty polkit")
# Signals that do not end a process: existence check, reload, job control, window size.
HARMLESS_SIGNALS = word_set("0 HUP SIGHUP 1 USR1 SIGUSR1 10 USR2 SIGUSR2 12 WINCH SIGWINCH 28 CONT SIGCONT 18 CHLD SIGCHLD URG SIGURG")
