"""The one public entry point for running a process: `sandbox_exec`.

Callers describe *what* to run (a shell command or an argv), *where* (cwd), with which environment and
limits, and *which backend* isolates it. Backends live in `sandbox_app.backends`; an unknown or
unavailable backend fails closed with `SandboxError` — we never fall back to the host silently.

Nothing here reads `django.conf.settings`: configuration always comes from the arguments.
"""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Iterable

from sandbox_app import backends
# The vocabulary of a run lives in a leaf module that the backends and the runner import too (no cycle);
# callers keep importing it from here, the public service.
from sandbox_app.runs import CANCELLED_NOTE, WORKSPACE_MOUNT, ExecLimits, ExecResult, SandboxError, SandboxSpec

SHELL = "/bin/sh"


# --- environment ----------------------------------------------------------------------------------

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# Never handed to a child unless the caller passes them explicitly in `extra`.
SECRET_ENV_NAMES = frozenset({
    "GH_TOKEN", "GITHUB_TOKEN", "GITLAB_TOKEN", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY",
    "GOOGLE_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "OPENROUTER_API_KEY", "NPM_TOKEN",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS",
    "HF_TOKEN", "HUGGINGFACE_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID", "CLOUDFLARE_API_TOKEN", "DOCKER_PASSWORD", "DOCKER_AUTH_CONFIG", "SECRET_KEY",
    "DJANGO_SECRET_KEY", "GOCLAW_ENCRYPTION_KEY", "DATABASE_URL", "REDIS_URL", "GOCLAW_ADMIN_PASSWORD",
    "PGPASSWORD", "PGPASSFILE", "MYSQL_PWD", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "KUBECONFIG",
    "VAULT_TOKEN", "SLACK_BOT_TOKEN", "TELEGRAM_BOT_TOKEN", "DISCORD_TOKEN", "SENTRY_DSN",
})
_SECRET_NAME_RE = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|CREDENTIAL|_DSN$|^GOCLAW_|_AUTH$|COOKIE|SESSION_KEY",
    re.IGNORECASE,
)
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_secret_env_name(name: str) -> bool:
    """True for names on the static deny list or matching the secret-looking name pattern."""
    return name.upper() in SECRET_ENV_NAMES or bool(_SECRET_NAME_RE.search(name))


def _default_path() -> str:
    """System directories first, then the parent's absolute, existing PATH entries (deduplicated).

    Relative or empty entries ("", ".") are dropped so a workspace can't shadow system binaries."""
    entries: list[str] = DEFAULT_PATH.split(":")
    for entry in os.environ.get("PATH", "").split(":"):
        if entry and os.path.isabs(entry) and entry not in entries and os.path.isdir(entry):
            entries.append(entry)
    return ":".join(entries)


def safe_child_env(extra: dict[str, str] | None = None, *, strip: Iterable[str] = (),
                   inherit: Iterable[str] = ()) -> dict[str, str]:
    """A minimal environment for a child process — never a copy of the parent's environment.

    Base: PATH (see `_default_path`), HOME=/nonexistent (callers set it, the exec tool uses the
    workspace), LANG/LC_ALL=C.UTF-8, TERM=dumb, TZ if the parent has it. `inherit` names further
    parent variables to copy (secret-looking names are still dropped). `extra` is applied last and is
    trusted: an explicit secret there is kept. Finally every name in `strip` is removed.
    """
    env: dict[str, str] = {
        "PATH": _default_path(),
        "HOME": "/nonexistent",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
    }
    if os.environ.get("TZ"):
        env["TZ"] = os.environ["TZ"]
    for name in inherit:
        if name in os.environ:
            env[name] = os.environ[name]
    env = {k: v for k, v in env.items() if not is_secret_env_name(k)}
    for key, value in (extra or {}).items():
        if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
            raise SandboxError(f"invalid environment variable name {key!r}")
        value = str(value)
        if "\x00" in value:
            raise SandboxError(f"environment variable {key} contains a NUL byte")
        env[key] = value
    for name in strip:
        env.pop(name, None)
    return env


# --- the service ----------------------------------------------------------------------------------

def _validate_dir(path: Path | str, what: str) -> Path:
    p = Path(path)
    if not p.is_absolute():
        raise SandboxError(f"{what} must be an absolute path: {path}")
    if not p.exists():
        raise SandboxError(f"{what} does not exist: {path}")
    if not p.is_dir():
        raise SandboxError(f"{what} is not a directory: {path}")
    return p


def sandbox_exec(*, command: str | None = None, argv: list[str] | None = None, workspace: Path | None = None,
                 cwd: Path | None = None, env: dict[str, str] | None = None, limits: ExecLimits = ExecLimits(),
                 spec: SandboxSpec | None = None, backend: str | None = None,
                 stdin: bytes | None = None, cancel: threading.Event | None = None) -> ExecResult:
    """Run `command` (via `/bin/sh -c`) or `argv` (directly, no shell) under the spec's backend.

    `workspace` is the directory the process sees as `/workspace` (bubblewrap/docker; default: `cwd`);
    `cwd` must lie inside it (default: the workspace). `backend="x"` is shorthand for
    `SandboxSpec(backend="x")`; neither means `SandboxSpec()` (backend "auto": bubblewrap, else docker,
    else `SandboxError` — never the host). `env=None` means `safe_child_env()`; a missing HOME (or
    safe_child_env's "/nonexistent" placeholder) becomes the workspace as the process sees it
    (`/workspace` under bubblewrap/docker, the real path on the host). Raises `SandboxError` when the process cannot be started; a
    non-zero exit, a signal or a timeout is reported in the result.

    `cancel`: once the event is set (a timed-out or abandoned call), the run's processes are killed within about
    0.1 s, the way a timeout kills them (process group and cgroup, or the container), and the result has
    `cancelled=True`; an event already set starts nothing.
    """
    if (command is None) == (argv is None):
        raise SandboxError("pass exactly one of command or argv")
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise SandboxError("command must be a non-empty string")
        if "\x00" in command:
            raise SandboxError("command contains a NUL byte")
        run_argv = [SHELL, "-c", command]
    else:
        if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
            raise SandboxError("argv must be a non-empty list of strings")
        if any("\x00" in a for a in argv):
            raise SandboxError("argv contains a NUL byte")
        run_argv = list(argv)
    if stdin is not None and not isinstance(stdin, (bytes, bytearray)):
        raise SandboxError("stdin must be bytes")
    if not isinstance(limits, ExecLimits):
        raise SandboxError("limits must be an ExecLimits")
    if cancel is not None and not isinstance(cancel, threading.Event):
        raise SandboxError("cancel must be a threading.Event")
    if spec is not None and backend is not None and backend != spec.backend:
        raise SandboxError("pass either spec or backend, not two different backends")
    if spec is None:
        spec = SandboxSpec(backend=backend) if backend is not None else SandboxSpec()
    if not isinstance(spec, SandboxSpec):
        raise SandboxError("spec must be a SandboxSpec")

    impl = backends.resolve_backend(spec.backend)  # raises SandboxError (fail closed), never picks host for "auto"

    if workspace is None and cwd is None:
        raise SandboxError("pass a workspace (or a cwd)")
    ws_path = _validate_dir(workspace if workspace is not None else cwd, "workspace" if workspace is not None
                            else "working directory")
    cwd_path = _validate_dir(cwd, "working directory") if cwd is not None else ws_path
    ws_real, cwd_real = Path(os.path.realpath(ws_path)), Path(os.path.realpath(cwd_path))
    if cwd_real != ws_real and ws_real not in cwd_real.parents:
        raise SandboxError(f"working directory {cwd} is not inside the workspace")

    child_env = safe_child_env() if env is None else dict(env)
    for key, value in child_env.items():
        if "\x00" in key or "=" in key or not key or "\x00" in str(value):
            raise SandboxError(f"invalid environment entry {key!r}")
    isolated = impl.name in ("bubblewrap", "docker")
    # No HOME, or safe_child_env's "/nonexistent" placeholder: the workspace, as the process sees it.
    if child_env.get("HOME", "/nonexistent") == "/nonexistent":
        child_env["HOME"] = WORKSPACE_MOUNT if isolated else str(ws_real)
    # safe_child_env's default PATH adds the server's own PATH entries: meaningless inside an isolated backend,
    # and they would name the server's directories to the process.
    if isolated and child_env.get("PATH") == _default_path():
        child_env["PATH"] = DEFAULT_PATH
    if cancel is not None and cancel.is_set():
        return ExecResult(exit_code=None, stdout="", stderr=CANCELLED_NOTE.lstrip("\n"), stdout_truncated=False,
                          stderr_truncated=False, timed_out=False, duration_ms=0.0, backend=impl.name,
                          profile=spec.profile, cancelled=True)
    result = impl.run(argv=run_argv, workspace=ws_real, cwd=cwd_real, env=child_env, limits=limits, spec=spec,
                      stdin=bytes(stdin) if stdin is not None else None, cancel=cancel)
    if result.cancelled:
        result.stderr += CANCELLED_NOTE
    return result


def resolve_backend(spec: SandboxSpec | str | None = None) -> str:
    """The name of the backend a run with `spec` (or a backend name) would use, "auto" resolved.

    Raises `SandboxError` when it is unknown or unavailable — the same answer `sandbox_exec` would give."""
    name = spec.backend if isinstance(spec, SandboxSpec) else (spec or "auto")
    return backends.resolve_backend(name).name


def sandbox_capabilities() -> dict:
    """What this machine offers the sandbox: bwrap path/version/usability, cgroup version and usable
    controllers, root or not and the sandbox user, the helper tools and each backend's availability.
    For health checks and the admin self-test; never raises."""
    from sandbox_app.system import capabilities

    return capabilities()
