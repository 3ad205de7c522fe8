"""Looking at the host's processes from a test: which are still alive after a sandboxed run."""
from __future__ import annotations

import os


def live_pids_with_cmdline(*parts: str) -> list[int]:
    """Live (not zombie) host processes whose command line holds `parts` as consecutive arguments."""
    wanted = "\0".join(parts).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if wanted not in fh.read():
                    continue
            with open(f"/proc/{entry}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    found.append(int(entry))
        except (OSError, IndexError):
            pass
    return found
