"""Builds the docker sandbox image locally from Debian's busybox-static and bash-static — no registry,
no Dockerfile.

The root file system is assembled in memory: the static busybox binary and its applet links (/bin/sh,
ls, cat, sed, awk, grep, find, tar, nc, ...), /bin/bash, an /etc/passwd and /etc/group holding only root, nobody and
the sandbox user, empty mount points (/workspace, /tmp, /proc, ...). It is imported into the local engine
with the SDK (`import_image_from_data`), so the build works on machines that reach no registry.
"""
from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_app.backends.docker import DEFAULT_IMAGE, LABEL, engine_client
from sandbox_app.services import SandboxError

BUSYBOX_PACKAGE = "busybox-static"
BASH_PACKAGE = "bash-static"  # /bin/bash: many agent scripts are bash, busybox sh is not
# libc-bin's C.UTF-8 locale (the sandbox's LANG/LC_ALL): without it static bash warns on every start.
C_UTF8_LOCALE = Path("/usr/lib/locale/C.utf8")
_TOOL_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
_TOOL_TIMEOUT = 120
_MTIME = 0  # fixed timestamps: the same inputs give the same layer

_DIRS = {  # path -> mode
    "bin": 0o755, "sbin": 0o755, "usr": 0o755, "usr/bin": 0o755, "usr/sbin": 0o755, "etc": 0o755,
    "dev": 0o755, "proc": 0o555, "sys": 0o555, "run": 0o755, "home": 0o755, "root": 0o700,
    "tmp": 0o1777, "var": 0o755, "var/tmp": 0o1777, "workspace": 0o755,
}


@dataclass(frozen=True)
class SandboxImageBuild:
    """What `sandbox_image_build` did: the tag and id, where busybox came from, who the users are."""

    tag: str
    image_id: str
    busybox_version: str
    busybox_source: str
    bash_source: str
    applets: int
    uid: int
    gid: int
    size_bytes: int
    replaced_image_id: str = ""


def sandbox_image_build(*, client: Any = None, tag: str = DEFAULT_IMAGE, busybox: Path | None = None,
                        uid: int | None = None, gid: int | None = None) -> SandboxImageBuild:
    """Build `tag` in the local engine from busybox-static and bash-static (each the installed package, else
    `apt-get download`). `uid`/`gid` default to the sandbox identity (goclaw-sandbox when the server runs
    as root). Raises SandboxError when no engine answers or a package can be neither found nor downloaded."""
    if uid is None or gid is None:
        from sandbox_app.identity import sandbox_identity

        identity = sandbox_identity()
        name, uid, gid = identity.name, identity.uid, identity.gid
    else:
        name = "goclaw-sandbox"
    client = client if client is not None else engine_client()
    with tempfile.TemporaryDirectory(prefix="goclaw-image-") as scratch:
        binary, version, source = _busybox(busybox, Path(scratch))
        bash, _, bash_source = _static_binary(BASH_PACKAGE, "bin/bash-static", Path(scratch))
        applets = _applets(binary)
        layer = _root_filesystem(binary, bash, applets, version, name=name, uid=uid, gid=gid)
    return _import(client, tag, layer, version=version, source=source, bash_source=bash_source,
                   applets=len(applets), uid=uid, gid=gid)


# --- static binaries from Debian packages -------------------------------------------------------------

def _busybox(explicit: Path | None, scratch: Path) -> tuple[Path, str, str]:
    """(path of a static busybox, its version, a sentence saying where it came from)."""
    if explicit is not None:
        path = Path(explicit)
        _check_static(path)
        return path, _busybox_banner_version(path), f"{path} (given)"
    return _static_binary(BUSYBOX_PACKAGE, "bin/busybox", scratch)


def _static_binary(package: str, member: str, scratch: Path) -> tuple[Path, str, str]:
    """`member` (e.g. bin/busybox) of Debian package `package`: the installed file when the package is
    installed, else the file from `apt-get download` + `dpkg-deb -x`. Always checked to be static."""
    installed = _installed_version(package)
    path = Path("/") / member
    if installed and path.is_file():
        _check_static(path)
        return path, installed, f"installed package {package} {installed} ({path})"
    return _download(package, member, scratch)


def _installed_version(package: str) -> str:
    dpkg_query = shutil.which("dpkg-query", path=_TOOL_ENV["PATH"])
    if dpkg_query is None:
        return ""
    proc = subprocess.run([dpkg_query, "-W", "-f", "${Status}\t${Version}", package], env=_TOOL_ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=_TOOL_TIMEOUT)
    status, _, version = proc.stdout.decode(errors="replace").partition("\t")
    return version.strip() if proc.returncode == 0 and status.endswith(" installed") else ""


def _download(package: str, member: str, scratch: Path) -> tuple[Path, str, str]:
    apt_get = shutil.which("apt-get", path=_TOOL_ENV["PATH"])
    dpkg_deb = shutil.which("dpkg-deb", path=_TOOL_ENV["PATH"])
    if apt_get is None or dpkg_deb is None:
        raise SandboxError(f"{package} is not installed and apt-get/dpkg-deb are missing: install {package}")
    download = scratch / f"deb-{package}"
    download.mkdir()
    os.chmod(download, 0o777)  # apt's download sandbox user (_apt) writes here
    proc = subprocess.run([apt_get, "download", "-q", package], cwd=download, env=_TOOL_ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=_TOOL_TIMEOUT)
    debs = sorted(download.glob("*.deb"))
    if proc.returncode != 0 or not debs:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no package file"]
        raise SandboxError(f"{package} is not installed and could not be downloaded ({detail[0][:200]}): "
                           f"run `apt-get update && apt-get install {package}`")
    deb = debs[0]
    version = subprocess.run([dpkg_deb, "-f", str(deb), "Version"], env=_TOOL_ENV, capture_output=True,
                             timeout=_TOOL_TIMEOUT).stdout.decode(errors="replace").strip()
    tree = scratch / f"tree-{package}"
    extracted = subprocess.run([dpkg_deb, "-x", str(deb), str(tree)], env=_TOOL_ENV, capture_output=True,
                               timeout=_TOOL_TIMEOUT)
    binary = tree / member
    if extracted.returncode != 0 or not binary.is_file():
        raise SandboxError(f"could not unpack {member} from {deb.name}: "
                           f"{extracted.stderr.decode(errors='replace')[:200]}")
    _check_static(binary)
    return binary, version, f"downloaded package {package} {version} (apt-get download)"


def _check_static(path: Path) -> None:
    """The image has no C library: the binary must be a static 64-bit ELF (no program interpreter)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                raise SandboxError(f"{path} is not a 64-bit little-endian ELF binary")
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
    except OSError as exc:
        raise SandboxError(f"cannot read {path}: {exc.strerror}") from None
    for i in range(phnum):
        p_type, = struct.unpack_from("<I", table, i * phentsize)
        if p_type == 3:  # PT_INTERP: dynamically linked
            raise SandboxError(f"{path} is dynamically linked: the image needs {BUSYBOX_PACKAGE}, not busybox")


def _busybox_banner_version(path: Path) -> str:
    first = _run_busybox(path, []).splitlines()[:1]
    return first[0].split(" multi-call", 1)[0].removeprefix("BusyBox ").strip() if first else "unknown"


def _run_busybox(path: Path, args: list[str]) -> str:
    proc = subprocess.run([str(path), *args], env={"PATH": "/nonexistent"}, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=_TOOL_TIMEOUT)
    return proc.stdout.decode(errors="replace")


def _applets(binary: Path) -> list[str]:
    """Relative install paths of every applet (bin/sh, usr/bin/awk, ...), from the binary itself."""
    applets = []
    for line in _run_busybox(binary, ["--list-full"]).splitlines():
        rel = line.strip().lstrip("/")
        if rel and ".." not in rel.split("/") and rel.split("/")[0] in ("bin", "sbin", "usr") and rel != "bin/busybox":
            applets.append(rel)
    if "bin/sh" not in applets:
        raise SandboxError(f"{binary} has no sh applet")
    return sorted(set(applets))


# --- the layer --------------------------------------------------------------------------------------

def _root_filesystem(binary: Path, bash: Path, applets: list[str], version: str, *, name: str, uid: int,
                     gid: int) -> bytes:
    from sandbox_app.identity import SandboxIdentity, passwd_lines

    passwd, group = passwd_lines(SandboxIdentity(name=name, uid=uid, gid=gid, switch=False))
    files = {
        "etc/passwd": passwd, "etc/group": group, "etc/hosts": "", "etc/hostname": "", "etc/resolv.conf": "",
        "etc/os-release": f'NAME="goclaw sandbox"\nID=goclaw-sandbox\nVERSION="busybox {version}"\n',
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = set(_DIRS)
        for rel in applets:
            parent = os.path.dirname(rel)
            while parent:
                dirs.add(parent)
                parent = os.path.dirname(parent)
        for rel in sorted(dirs):
            tar.addfile(_entry(rel, tarfile.DIRTYPE, _DIRS.get(rel, 0o755)))
        for rel, source in (("bin/busybox", binary), ("bin/bash", bash)):
            info = _entry(rel, tarfile.REGTYPE, 0o755)
            info.size = source.stat().st_size
            with open(source, "rb") as fh:
                tar.addfile(info, fh)
        for rel in applets:
            if rel == "bin/bash":
                continue
            link = _entry(rel, tarfile.SYMTYPE, 0o777)
            link.linkname = "/bin/busybox"
            tar.addfile(link)
        if C_UTF8_LOCALE.is_dir():
            for parent in ("usr/lib", "usr/lib/locale", "usr/lib/locale/C.utf8"):
                tar.addfile(_entry(parent, tarfile.DIRTYPE, 0o755))
            for item in sorted(C_UTF8_LOCALE.rglob("*")):
                rel = f"usr/lib/locale/C.utf8/{item.relative_to(C_UTF8_LOCALE)}"
                if item.is_dir() and not item.is_symlink():
                    tar.addfile(_entry(rel, tarfile.DIRTYPE, 0o755))
                elif item.is_file() and not item.is_symlink():
                    info = _entry(rel, tarfile.REGTYPE, 0o644)
                    info.size = item.stat().st_size
                    with open(item, "rb") as fh:
                        tar.addfile(info, fh)
        for rel, text in sorted(files.items()):
            data = text.encode()
            info = _entry(rel, tarfile.REGTYPE, 0o644)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _entry(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = _MTIME
    return info


def _import(client: Any, tag: str, layer: bytes, **report: Any) -> SandboxImageBuild:
    from docker.errors import APIError, ImageNotFound
    from docker.utils import parse_repository_tag

    repository, tag_part = parse_repository_tag(tag)
    tag_part = tag_part or "latest"
    full_tag = f"{repository}:{tag_part}"
    try:
        previous = client.api.inspect_image(full_tag)["Id"]
    except ImageNotFound:
        previous = ""
    changes = ['WORKDIR /workspace', 'CMD ["/bin/sh"]', f'LABEL {LABEL}="1"',
               f'LABEL {LABEL}.busybox="{report["version"]}"']
    try:
        client.api.import_image_from_data(layer, repository=repository, tag=tag_part, changes=changes)
        image = client.api.inspect_image(full_tag)
    except (APIError, ImageNotFound) as exc:
        raise SandboxError(f"docker could not import the sandbox image: {getattr(exc, 'explanation', exc)}") from None
    replaced = ""
    if previous and previous != image["Id"]:
        try:  # the old image is now untagged; drop it unless a container still uses it
            client.api.remove_image(previous)
            replaced = previous
        except APIError:
            pass
    return SandboxImageBuild(tag=full_tag, image_id=image["Id"], busybox_version=report["version"],
                             busybox_source=report["source"], bash_source=report["bash_source"],
                             applets=report["applets"], uid=report["uid"],
                             gid=report["gid"], size_bytes=int(image.get("Size") or 0), replaced_image_id=replaced)
