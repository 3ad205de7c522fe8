"""Rule group `data_exfiltration`: Reading secret files, uploading local files or command output to non-loopback hosts,
DNS exfil.
"""
from __future__ import annotations

import ipaddress
import re

from ..command import (
    home_relative,
    is_loopback,
    is_secret_path,
    literal_text,
    network_hosts,
    normalize_path,
    operands,
    short_flags,
    talks_to_remote,
)
from ..vocabulary import (
    DOWNLOADERS,
    HIST_FILES,
    INLINE_PATTERNS,
    LOW_INFO_CMDS,
    META_IPS,
    META_LITERALS,
    META_NAMES,
    NETCAT,
    NETCLIENTS,
    RAW_MEM,
    READERS,
    SENSITIVE_NAMES,
    SENSITIVE_SYS,
    TEXT_FILTERS,
    UNKNOWN_OUTPUT,
    UPLOAD_VERBS,
    UPLOADERS,
    URL,
    shown,
    word_set,
)
from ..wrappers import git_subcommand
from .base import Rule, RuleGroup
from .common import data_store_abuse

GROUP = RuleGroup(
    "data_exfiltration",
    "Reading secret files, uploading local files or command output to non-loopback hosts, DNS exfil.",
)


def reads_secret_files(analysis, c):
    if c.icode and INLINE_PATTERNS["secret"].search(c.icode):
        return [("inline program reads secret files", True)]
    srcs = [t for op, t in c.redirs if op == "<"]
    if c.name in READERS or c.unknown:
        srcs += [x for i, x in enumerate(c.args) if not (i and c.args[i - 1] in ("-i", "-F", "-o", "--identity-file"))]
    return [(f"reads secret {shown(s)}", True) for s in srcs if is_secret_path(s)][:1]


def uploads_local_data(analysis, c):
    nm, a = c.name, c.args
    data = []
    if nm in ("curl", "curlie", "http", "https", "xh"):
        for i, x in enumerate(a):
            v = a[i + 1] if i + 1 < len(a) else ""
            if x in ("-d", "--data", "--data-binary", "--data-raw", "--data-urlencode", "--data-ascii", "--json") or x.startswith(("--data=", "--data-binary=")):
                v = v if not x.startswith("--data") or "=" not in x else x.split("=", 1)[1]
                if (v.startswith("@") or UNKNOWN_OUTPUT in v or "=@" in v) and not _request_body_file(v):
                    data.append(v)
            elif x in ("-F", "--form") and ("@" in v or "=<" in v):
                data.append(v)
            elif x in ("-T", "--upload-file") or x.startswith("-T") and len(x) > 2:
                data.append(v or x[2:])
            elif "@" in x and re.match(r"^[\w.-]+=@", x):
                data.append(x)
    elif nm in ("wget", "wget2"):
        data = [x for x in a if x.startswith(("--post-file", "--body-file")) or (x.startswith("--post-data") and UNKNOWN_OUTPUT in x)]
    if data and talks_to_remote(c):
        return [(f"{nm} uploads {shown(data[0])} to a non-loopback host", True)]
    ups = [u for u in analysis.pipes.get(c.pipe, []) if u.stage < c.stage]
    if nm in NETCAT and talks_to_remote(c) and not set(short_flags(a)) & set("zl") and (any(u.name not in ("echo", "printf") for u in ups) or any(op == "<" for op, _ in c.redirs)):
        return [(f"{nm} sends local data to a remote host", True)]
    return []


_BODY_FILE = re.compile(r"^@(?!.*(secret|credential|passw|token|private|key|auth|kube|adminsdk|service.?account|vault|config|\.env|dump|backup|\.db|sqlite))[\w][\w./-]*\.(json|xml|graphql|gql|ya?ml)$", re.I)


def _request_body_file(v: str) -> bool:
    """`curl -d @payload.json`: a JSON/XML/GraphQL/YAML request body kept in the project (relative path, ordinary
    name). Data files, dumps, archives, anything secret-looking, home or absolute paths remain uploads."""
    return bool(_BODY_FILE.match(v)) and ".." not in v.split("/") and not is_sensitive_path(v[1:])


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
    if nm == "git" and git_subcommand(a)[0] in ("rev-parse", "describe", "rev-list") or nm == "git" and a[:2] == ["branch", "--show-current"]:
        return True
    if nm == "go" and a[:1] == ["env"] and all(x.startswith("GO") for x in a[1:]):
        return True
    if nm in ("curl", "wget") and url_host and network_hosts(s) and all(h.lower() == url_host.lower() for h in network_hosts(s)) and \
            not any(x.startswith(("-d", "--data", "-F", "--form", "-T", "--upload", "--json", "--post", "--body")) for x in a):
        return True
    # `$(uname -s | tr A-Z a-z)`: a filter fed by the pipe, with no file operands of its own
    nfiles = len(operands(a, word_set("-d -f -F -n -c -e -v"))) - {"tr": 2, "sed": 1, "awk": 1, "grep": 1}.get(nm, 0)
    return nm in TEXT_FILTERS and s.stage > 0 and nfiles <= 0


def command_output_in_hostname_or_url(analysis, c):
    if c.name in DOWNLOADERS | NETCAT | word_set("host dig nslookup ping drill traceroute whois getent ping6"):
        urls = [m for m in map(URL.match, c.args) if m]
        plain = [x for x in c.args if not URL.match(x)] if c.name not in DOWNLOADERS or not urls else []
        for h in [m.group(1) for m in urls] + network_hosts(c) + plain:
            if UNKNOWN_OUTPUT in h and re.search(UNKNOWN_OUTPUT + r"[^/\s]*\.[a-zA-Z]|[a-zA-Z0-9-]\." + UNKNOWN_OUTPUT, h) or (UNKNOWN_OUTPUT in h and URL.match(h) and UNKNOWN_OUTPUT in (URL.match(h).group(1))):
                return [(f"command output embedded in hostname {shown(h)}", True)]
        if any(UNKNOWN_OUTPUT in m.group(0) or UNKNOWN_OUTPUT in m.string for m in urls) and talks_to_remote(c):
            host = urls[0].group(1)
            if not c.subs or not all(_low_info_sub(s, host) for s in c.subs) or any(UNKNOWN_OUTPUT in m.group(1) for m in urls):
                return [("command output embedded in a remote URL", True)]
    return []


def credential_store_read(analysis, c):
    return [(r, d) for g, r, d in data_store_abuse(analysis, c) if g == "data_exfiltration"]


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


def cloud_metadata_request(analysis, c):
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
        hosts += [m.group(2) for m in INLINE_PATTERNS["lit"].finditer(c.icode) if m.group(2).lower() != "metadata"]  # d["metadata"] is data
    low = " ".join(texts).lower()
    if any(h and _meta_host(h) for h in hosts) or any(x in low for x in META_LITERALS):
        return [("request to a cloud metadata endpoint (instance credential theft)", True)]
    return []


def is_sensitive_path(p: str) -> bool:
    """Secrets plus files an attacker wants off the box even when world-readable (passwd, .env, keys, certificates)."""
    if not p or p.startswith("-"):
        return False
    if is_secret_path(p):
        return True
    q = p.lstrip("@<")
    if "=@" in q or "=<" in q:
        q = re.split(r"=[@<]", q, 1)[1]
    h = home_relative(q) or normalize_path(q)
    b = h.rstrip("/").rsplit("/", 1)[-1]
    return h.startswith(SENSITIVE_SYS) or bool(SENSITIVE_NAMES.match(b)) or (h.startswith("~/") and h[2:] in HIST_FILES)


def _remote_spec(a: str) -> str | None:
    """Host of an scp/rsync remote operand (`user@host:path`, `host:`, `rsync://host/x`), else None."""
    m = URL.match(a)
    if m:
        return m.group(1).strip("[]")
    m = re.match(r"^(?:[^@/:\s]+@)?(\[[^\]]+\]|[A-Za-z0-9_.-]+):", a)
    return m.group(1).strip("[]") if m and not a.startswith(("/", "./", "~")) else None


def copies_sensitive_file_to_remote(analysis, c):
    """Sensitive local files copied to a remote host (scp/rsync/sftp put/cloud CLIs) or piped into a network client."""
    nm, a = c.name, c.args
    if nm in ("scp", "rsync", "rclone"):
        ops = operands(a, word_set("-i -P -p -o -F -c -l -S -J -e --rsh --exclude --include --filter -f --rsync-path --port --password-file --config"))
        if nm == "rclone":
            ops = ops[1:]
        dest = _remote_spec(ops[-1]) if len(ops) >= 2 else None
        if dest is not None and not is_loopback(dest):
            src = next((x for x in ops[:-1] if is_sensitive_path(x) and _remote_spec(x) is None), None)
            if src:
                return [(f"{nm} copies sensitive file {shown(src)} to remote host {dest}", True)]
    if nm in ("sftp", "ftp", "lftp", "smbclient", "tftp"):
        body = " ".join([t for op, t in c.redirs if op in ("<<", "<<<")] + [literal_text(u) or "" for u in analysis.pipes.get(c.pipe, []) if u.stage < c.stage] + a)
        for m in re.finditer(r"\b(m?put|reput|send|append)\s+(\S+)", body):
            if is_sensitive_path(m.group(2).strip("'\"")):
                return [(f"{nm} uploads sensitive file {shown(m.group(2))}", True)]
    if nm in UPLOADERS:  # aws s3 cp SRC.. DEST, gsutil cp, az storage blob upload -f F, gh gist create F..
        ops = [x for x in a if not x.startswith("-")]
        k = next((i for i, x in enumerate(ops) if x in UPLOAD_VERBS), None)
        srcs = [] if k is None else ops[k + 1:] if nm == "gh" else ops[k + 1:-1]
        x = next((x for x in srcs if "://" not in x and is_sensitive_path(x)), None)
        if x:
            return [(f"{nm} uploads sensitive file {shown(x)}", True)]
    if nm in NETCLIENTS and talks_to_remote(c):
        ups = [u for u in analysis.pipes.get(c.pipe, []) if u.stage < c.stage]
        srcs = [t for op, t in c.redirs if op == "<"] + [x for u in ups if u.name in READERS or u.unknown for x in u.args] + [t for u in ups for op, t in u.redirs if op == "<"]
        x = next((x for x in srcs if is_sensitive_path(x)), None)
        if x:
            return [(f"sensitive file {shown(x)} sent to {nm}", True)]
    return []


def reads_raw_memory(analysis, c):
    """Reading physical/kernel/process memory (/dev/mem, /proc/kcore, /proc/PID/mem) harvests keys and passwords."""
    srcs = [t for op, t in c.redirs if op == "<"]
    if c.name in READERS or c.unknown or c.name in ("strings", "dd", "hexdump", "xxd", "od", "grep", "volatility", "gcore"):
        srcs += [x[3:] if x.startswith("if=") else x for x in c.args]
    if c.icode:
        srcs += [m.group(2) for m in INLINE_PATTERNS["lit"].finditer(c.icode)]
    x = next((x for x in srcs if RAW_MEM.match(normalize_path(x))), None)
    return [(f"reads raw memory {x}", True)] if x else []


RULES = (
    Rule(
        "reads_secret_files",
        GROUP.name,
        "Reading SSH keys, cloud credentials, shadow files or a process environment (also from inline programs).",
        reads_secret_files,
    ),
    Rule(
        "uploads_local_data",
        GROUP.name,
        "curl/wget/httpie uploading local files or command output, netcat sending local data, to a non-loopback host.",
        uploads_local_data,
    ),
    Rule(
        "command_output_in_hostname_or_url",
        GROUP.name,
        "Command output embedded in a hostname (DNS exfiltration) or in a remote URL.",
        command_output_in_hostname_or_url,
    ),
    Rule(
        "cloud_metadata_request",
        GROUP.name,
        "Requests to cloud instance-metadata endpoints in any spelling (instance credential theft).",
        cloud_metadata_request,
    ),
    Rule(
        "copies_sensitive_file_to_remote",
        GROUP.name,
        "scp/rsync/sftp/cloud CLIs or a network client carrying a sensitive file off the host.",
        copies_sensitive_file_to_remote,
    ),
    Rule(
        "reads_raw_memory",
        GROUP.name,
        "Reading /dev/mem, /proc/kcore or /proc/PID/mem.",
        reads_raw_memory,
    ),
    Rule(
        "credential_store_read",
        GROUP.name,
        "git credential fill and macOS keychain reads that print stored secrets.",
        credential_store_read,
    ),
)
