"""Rule group `dangerous_paths`: Writes, deletes or permission changes under system paths (/etc, /usr, /boot, /dev
...).
"""
from __future__ import annotations

from ..command import is_persistence_path, is_system_path, normalize_path, written_paths
from ..vocabulary import BLOCK_DEVICE, shown
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "dangerous_paths",
    "Writes, deletes or permission changes under system paths (/etc, /usr, /boot, /dev ...).",
)


PKG_CACHES = ("/var/lib/apt/lists/", "/var/cache/apt/", "/var/cache/apk/", "/var/cache/yum/", "/var/cache/dnf/", "/var/cache/pacman/pkg/")


def _app_path(n: str) -> bool:
    """Paths that are a user's or an application's files although they sit under a system prefix: root's home
    (/root/project/dist, when the agent runs as root its home is /root) and a site under /var/www/<site>/<...>.
    Home dotfiles, keys and whole directories stay covered by persistence/secrets/destructive_ops."""
    parts = [x for x in n.split("/") if x]
    return (parts[:1] == ["root"] and len(parts) >= 3 and not parts[1].startswith(".")) or (parts[:2] == ["var", "www"] and len(parts) >= 4)


def writes_system_path(analysis, c):
    out = []
    for t in written_paths(c):
        n = normalize_path(c.path(t))
        if _app_path(n) or (c.name == "rm" and n.startswith(PKG_CACHES) and len(n.split("/")) > 4):
            continue  # rm -rf /var/lib/apt/lists/* is the standard image-size cleanup
        if BLOCK_DEVICE.match(n) or is_persistence_path(t) or n.startswith(("/etc/sudoers", "/etc/shadow", "/etc/passwd", "/etc/group", "/etc/gshadow", "/etc/ld.so", "/proc/sys", "/sys/", "/proc/sysrq")):
            continue  # owned by disk_write / persistence / privilege_escalation / env_injection / container_escape
        if is_system_path(t):
            out.append((f"{c.name or 'redirect'} modifies system path {shown(t)}", True))
    return out


RULES = (
    Rule(
        "writes_system_path",
        GROUP.name,
        "Writes, deletes or permission changes under system paths (/etc, /usr, /boot, /dev ...).",
        writes_system_path,
    ),
)
