"""Rule group `container_escape`: docker.sock, privileged/host-mount containers, /proc/sys and cgroup release_agent
writes, nsenter -t 1.
"""
from __future__ import annotations

import re

from ..command import normalize_path, written_paths
from ..vocabulary import DATA_CMDS, basename, shown
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "container_escape",
    "docker.sock, privileged/host-mount containers, /proc/sys and cgroup release_agent writes, nsenter -t 1.",
)


def escapes_container(analysis, c):
    out = []
    if c.name not in DATA_CMDS and any("docker.sock" in x for x in c.args + [t for _, t in c.redirs] + [y for w in c.wrapped for y in w]):
        out.append(("touches the Docker socket", True))
    for argv in c.wrapped + [c.argv]:  # docker exec/run and kubectl exec are unwrapped to their payload
        if argv:
            out += _container_flags(basename(argv[0]), argv[1:])
    for w in [x for x in c.wrapped + [c.argv] if x]:
        if basename(w[0]) == "nsenter" and re.search(r"(^|\s)(-t\s*1|--target[= ]1)(\s|$)", " ".join(w[1:])):
            out.append(("nsenter into PID 1 namespaces", True))
    a = c.args
    if any("/proc/1/root" in x for x in a + [t for _, t in c.redirs]):
        out.append(("reaches the host filesystem via /proc/1/root", True))
    for t in written_paths(c) + [x for x in a if "release_agent" in x]:
        n = normalize_path(t)
        if n.startswith(("/proc/sys/", "/sys/kernel/", "/sys/fs/cgroup")) or "release_agent" in n or "notify_on_release" in n:
            out.append((f"writes kernel/cgroup control file {shown(t)}", True))
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
                if normalize_path(src) in ("/", "/etc", "/root", "/proc", "/sys", "/dev", "/boot", "/var/run", "/run", "/home", "/var/lib/docker"):
                    out.append((f"mounts host path {src} into a container", True))
    if nm == "kubectl" and re.search(r"privileged\"?\s*:\s*true|hostPID|hostPath|--privileged", " ".join(a)):
        out.append(("kubectl privileged/host pod", True))
    return out


RULES = (
    Rule(
        "escapes_container",
        GROUP.name,
        "docker.sock, privileged or host-mount containers, nsenter into PID 1, /proc/1/root, cgroup release_agent.",
        escapes_container,
    ),
)
