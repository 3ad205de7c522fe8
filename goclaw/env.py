"""Typed environment readers for settings: bad values raise ImproperlyConfigured with the variable's name."""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    """The variable's value; unset or empty means the default (so a copied .env.example changes nothing)."""
    return os.environ.get(name) or default


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be <= {maximum}, got {value}")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default or [])
    return [part.strip() for part in raw.split(",") if part.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = (os.environ.get(name) or default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def env_path(name: str, default: Path) -> Path:
    raw = os.environ.get(name)
    return Path(raw).expanduser().resolve() if raw else default.resolve()


def private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) mode 0700, or tighten an existing one: group read/write and all
    access for others go; a group search bit stays (the embedded PostgreSQL's user needs it when run as root)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    wanted = 0o700 | (st.st_mode & 0o010)
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != wanted:
        path.chmod(wanted)
    return path


def read_or_create_secret_file(path: Path, generate) -> str:
    """The secret stored in `path`, else a generated one written there; either way the file ends up ours, 0600."""
    if path.exists():
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode):
            raise ImproperlyConfigured(f"{path} must be a regular file (it holds a secret)")
        if os.geteuid() == 0 and st.st_uid != 0:
            os.chown(path, 0, 0)  # e.g. made by an older version as another user: no one else may read it
        if stat.S_IMODE(st.st_mode) != 0o600:
            path.chmod(0o600)
        return path.read_text().strip()
    private_dir(path.parent)
    value = generate()
    # Written whole under a private name, then linked into place: processes starting together (several workers)
    # never read a half-written file, and the first link wins; the others read the winner's secret.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(value + "\n")
        os.link(tmp, path)
    except FileExistsError:
        return read_or_create_secret_file(path, generate)
    finally:
        tmp.unlink(missing_ok=True)
    return value


def read_or_create_secret(name: str, path: Path, *, production: bool, generate) -> str:
    """Return env var `name`, else the value stored in `path`, else generate one into `path` (mode 0600).

    In production a missing value is a start-up error: secrets must be provisioned explicitly there."""
    value = os.environ.get(name, "").strip()
    if value:
        return value
    if production:
        raise ImproperlyConfigured(f"{name} is required when GOCLAW_ENV=production")
    return read_or_create_secret_file(path, generate)
