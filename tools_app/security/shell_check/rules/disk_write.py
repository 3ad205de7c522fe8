"""Rule group `disk_write`: Writes to block devices, mkfs/wipefs/partitioning, blkdiscard, hdparm erase.
"""
from __future__ import annotations

import re

from ..command import normalize_path, operands, short_flags, written_paths
from ..vocabulary import (
    BLOCK_DEVICE,
    DESTRUCTIVE_SUBCOMMANDS,
    DISK_TOOLS,
    LVM_DESTROY,
    PROCESS_PATH,
    UNKNOWN_OUTPUT,
    UNKNOWN_VALUE,
    word_set,
)
from ..windows import windows_statements
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "disk_write",
    "Writes to block devices, mkfs/wipefs/partitioning, disk wipers, blkdiscard, hdparm erase, volume managers and "
    "RAID metadata, firmware flashing.",
)


def formats_or_overwrites_disk(analysis, c):
    nm, a = c.name, c.args
    sh = short_flags(a)
    if (nm.startswith("mkfs") or nm in ("mke2fs", "mkswap", "mkdosfs", "mkntfs")) and _image_file_target(c):
        return []  # mkfs.ext4 -F rootfs.img / mkswap swapfile.img: formatting a regular file image
    if nm.startswith("mkfs") or nm in DISK_TOOLS or (nm == "badblocks" and "w" in sh):
        return [(f"{nm} formats/erases a device", True)]
    if (nm in ("fdisk", "sfdisk") and not set(a) & {"-l", "--list", "-d", "--dump", "-V", "--verify", "-s", "--show-size"}) or \
            (nm == "parted" and not ("-l" in a or "--list" in a or "print" in a)) or (nm == "sgdisk" and not _sgdisk_read_only(a)) or \
            (nm == "gdisk" and "-l" not in a):
        return [(f"{nm} rewrites a partition table", True)]
    if nm == "hdparm" and any(x.startswith(("--security-erase", "--trim-sector", "--write-sector", "--security-set-pass", "--fwdownload")) for x in a):
        return [("hdparm destructive operation", True)]
    for t in written_paths(c):
        if BLOCK_DEVICE.match(normalize_path(t)):
            return [(f"writes block device {t}", True)]
    if nm in ("shred", "wipe", "dd", "scrub", "dcfldd", "dc3dd") and \
            any(BLOCK_DEVICE.match(x.split("=", 1)[-1]) for x in a if nm not in ("dd", "dcfldd", "dc3dd") or x.startswith(("of=", "wipe=", "hof="))):
        return [(f"{nm} overwrites a device", True)]
    return []


# sgdisk options that only read: print, verify, info, list types, version, back up the table to a file, pretend.
_SGDISK_READ_LONG = ("--print", "--verify", "--info", "--print-mbr", "--list-types", "--version", "--backup", "--pretend")


def _sgdisk_read_only(a: list) -> bool:
    """`sgdisk -p /dev/sda` prints, `sgdisk -P -Z ..` only pretends; any other option (`-Z`, `-o`, `-n`, `-d` ...) writes."""
    if "-P" in a or "--pretend" in a:
        return True
    flags = [x for x in a if x.startswith("-") and x != "-"]
    return bool(flags) and all(x.startswith(_SGDISK_READ_LONG) if x.startswith("--") else set(x[1:]) <= set("pviOLVbP") for x in flags)


def _has_option(a: list, longs: tuple, letters: str) -> bool:
    """True when `a` holds one of the long options (also as `--opt=value`) or a short-option cluster with one of the
    letters (`-fa` holds `a`)."""
    return any(x.startswith(longs) if x.startswith("--") else x.startswith("-") and bool(set(x[1:]) & set(letters)) for x in a)


_VOLUME_AND_FIRMWARE_TOOLS = frozenset({"wipefs", "mdadm", "flashrom", "efibootmgr"}) | LVM_DESTROY | frozenset(DESTRUCTIVE_SUBCOMMANDS)


def destroys_volumes_or_firmware(analysis, c):
    """Judged by the mode, not the name: `wipefs /dev/sdb` only lists signatures but `wipefs -a` erases them; `mdadm
    -E` examines but `mdadm --zero-superblock` erases; `zpool status` reads but `zpool destroy` destroys. Dry-run modes
    (`wipefs -n`, LVM `-t`, `zpool create -n`, `zfs destroy -n`) change nothing."""
    nm, a = c.name, c.args
    if nm == "wipefs" and _has_option(a, ("--all", "--offset"), "ao") and not _has_option(a, ("--no-act",), "n"):
        return [(f"{nm} formats/erases a device", True)]
    if nm in LVM_DESTROY and not _has_option(a, ("--test",), "t"):
        return [(f"{nm} destroys LVM volumes or their metadata", True)]
    if nm == "mdadm" and _has_option(a, ("--zero-superblock", "--create", "--stop", "--remove", "--fail", "--build", "--kill-subarray"), "CSBr"):
        return [("mdadm erases RAID metadata or breaks an array", True)]
    if nm == "flashrom" and _has_option(a, ("--write", "--erase"), "wE"):
        return [("flashrom writes or erases firmware flash", True)]
    if nm == "efibootmgr" and _has_option(a, ("--delete-bootnum",), "B"):
        return [("efibootmgr deletes boot entries", True)]
    subs = DESTRUCTIVE_SUBCOMMANDS.get(nm)
    if subs:
        sub = next((x for x in a if not x.startswith("-")), "")
        dry = nm in ("zpool", "zfs") and "-n" in a
        if sub in subs and not dry:
            return [(f"{nm} {sub} destroys data or writes firmware", True)]
    return []


def _image_file_target(c) -> bool:
    """mkfs/mkswap aimed only at relative (or /tmp) regular files: never /dev, never an unresolved path."""
    ops = [c.path(x) for x in operands(c.args, word_set("-t -L -b -C -i -I -J -m -M -n -N -o -O -r -E -T -U -e -g -G -d"))]
    ops = [x for x in ops if not re.fullmatch(r"\d+[kKmMgG]?", x)]  # trailing block count
    if not ops or any(m in x for x in ops for m in (UNKNOWN_VALUE, UNKNOWN_OUTPUT, PROCESS_PATH)):
        return False
    return all(not normalize_path(x).startswith("/") or normalize_path(x).startswith(("/tmp/", "/var/tmp/")) for x in ops) and \
        all(not normalize_path(x).startswith("~/.") for x in ops)


def windows_disk_format(analysis, c):
    """Windows disk destruction: `format X:`, diskpart, `cipher /w`, Format-Volume, Clear-Disk, Initialize-Disk,
    Remove-Partition, bare or via cmd /c, pwsh -c, -EncodedCommand."""
    for st in windows_statements(c):
        nm, low = st[0], [a.lower() for a in st[1:]]
        if (nm == "format" and any(re.fullmatch(r"[a-z]:[\\/]?", a) for a in low)) or (nm == "diskpart" and "/?" not in low) or \
                (nm == "cipher" and any(a.startswith("/w") for a in low)) or \
                nm in ("format-volume", "clear-disk", "initialize-disk", "remove-partition"):
            return [(f"{nm} formats or wipes a disk", True)]
    return []


RULES = (
    Rule(
        "formats_or_overwrites_disk",
        GROUP.name,
        "mkfs/wipefs/partitioning/blkdiscard/hdparm erase and writes to block devices.",
        formats_or_overwrites_disk,
    ),
    Rule(
        "destroys_volumes_or_firmware",
        GROUP.name,
        "Destructive modes of wipefs, LVM, mdadm, zpool/zfs, nvme, cryptsetup, efibootmgr and firmware flashers "
        "(flashrom, fwupdmgr, fwupdtool); their list, status and dry-run modes stay allowed.",
        destroys_volumes_or_firmware,
        commands=_VOLUME_AND_FIRMWARE_TOOLS,
    ),
    Rule(
        "windows_disk_format",
        GROUP.name,
        "format X:, diskpart, cipher /w, Format-Volume, Clear-Disk, Initialize-Disk, Remove-Partition, bare or via "
        "cmd /c, pwsh -c, -EncodedCommand.",
        windows_disk_format,
    ),
)
