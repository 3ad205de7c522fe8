"""Credentialed CLI binaries (docs/credentialed-exec.md): writes (create, update, delete, presets), the path check
every call repeats, and the deny-argument check. Every write checks the whole definition, seals the env bound to
its row, and bumps the tool-set generation in its transaction, so every process serves the change within a second."""
from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from goclaw import crypto
from goclaw.errors import Conflict, NotFound, ValidationError
from tools_app.models import Agent, SecureCLIBinary
from tools_app.models.cli_binaries import CLI_BINARY_MAX_TIMEOUT, CLI_BINARY_NAME_RE
from tools_app.security.program_risk import program_risk
from goclaw.generations import generation_cache
from tools_app.services.custom_tools import env_merged, env_problems
from tools_app.services.policy import actor_name
from tools_app.toolsets import TOOLSETS_CACHE, tools_changed

logger = logging.getLogger("goclaw.credentialed_exec")

TOOL_NAME = "credentialed_exec"
EDITABLE = ("name", "path", "deny_args", "deny_verbose", "timeout_seconds", "tips", "enabled", "agent",
            "risk_acknowledged")
MAX_TIPS_CHARS = 4000
MAX_PATTERNS = 100
# Taken by every write: two saves cannot both pass the name check for the same binary.
_WRITE_LOCK = 0x636C6962696E  # "clibin"

# Presets: deny args as data (regexes searched in the arguments joined by single spaces). They refuse what prints or
# changes a credential; an operator adds more per binary. Paths are where distribution packages install them. The
# words are matched anywhere, not only at the start: these CLIs accept global flags before the subcommand
# (`kubectl -n x config view --raw`), so a harmless argument that merely contains such a word is refused too.
W = r"(?:^|\s)"  # a word starts here
PRESETS: dict[str, dict[str, Any]] = {
    "gh": {"path": "/usr/bin/gh", "deny_verbose": ["--verbose", "--debug"],
           "deny_args": [W + r"auth\b", W + r"(secret|ssh-key|gpg-key)\s", W + r"config\s+(get|list|set)\b",
                         W + r"extension\b", W + r"alias\s+(set|import)\b",
                         # `gh codespace ssh -- -o ProxyCommand=…` runs a local command with the token
                         W + r"(codespace|cs)\b"],
           "tips": "GitHub CLI: e.g. `pr list --repo owner/name`, `issue view 12`. Authentication is configured; "
                   "`auth`, `secret`, `extension` and `codespace` subcommands are refused."},
    "gcloud": {"path": "/usr/bin/gcloud", "deny_verbose": ["--verbosity", "--log-http"],
               "deny_args": [W + r"auth\b", r"print-(access|identity|refresh)-token\b", W + r"config\s+(set|unset)\b",
                             W + r"config-helper\b", r"--impersonate-service-account\b", W + r"keys\s+create\b",
                             # `compute ssh --ssh-flag=-oProxyCommand=…` runs a local command with the credentials
                             r"--(ssh|scp)-flag\b", W + r"(ssh|scp)\b"],
               "tips": "Google Cloud CLI: e.g. `compute instances list --format=json`. Credential commands are refused."},
    "aws": {"path": "/usr/bin/aws", "deny_verbose": ["--debug"],
            "deny_args": [W + r"configure\b", W + r"sts\s+(get-session-token|assume-role)", W + r"sso\b",
                          W + r"create-access-key\b", W + r"get-login(-password)?\b", r"export-credentials\b"],
            "tips": "AWS CLI: e.g. `s3 ls`, `ec2 describe-instances --output json`. `configure` is refused."},
    "kubectl": {"path": "/usr/bin/kubectl", "deny_verbose": ["-v", "--v"],
                "deny_args": [W + r"config\s+view\b.*--raw\b", W + r"config\s+(set|set-credentials|use-context)\b",
                              r"--(token|kubeconfig|username|password)\b", W + r"secrets?\b",
                              W + r"create\s+token\b", W + r"exec\b", W + r"proxy\b", W + r"cp\b"],
                "tips": "Kubernetes CLI: e.g. `get pods -n web`. Secrets, exec and config edits are refused."},
    "terraform": {"path": "/usr/bin/terraform", "deny_verbose": [],
                  "deny_args": [W + r"login\b", W + r"logout\b", W + r"state\s+pull\b", W + r"output\b",
                                W + r"console\b", W + r"destroy\b", r"-auto-approve\b"],
                  "tips": "Terraform: e.g. `plan -no-color`. state pull, output, console and destroy are refused."},
}


class CLIBinaryCollision(Conflict):
    code = "cli_binary_name_collision"


class CLIBinaryPathError(ValidationError):
    code = "cli_binary_bad_path"


class CLIBinaryRiskError(ValidationError):
    """The binary can start other programs or print its environment, and the operator has not accepted that."""

    code = "cli_binary_risk_not_acknowledged"


def env_seal_context(pk: Any) -> str:
    """The associated data a binary's env is sealed with: it binds the ciphertext to this row and field."""
    return f"tools_app.SecureCLIBinary:{pk}:env"


# --- the path ------------------------------------------------------------------------------------------------------
def _inside(path: str, root: Path) -> bool:
    try:
        real_root = os.path.realpath(root)
    except OSError:
        return False
    return path == real_root or path.startswith(real_root.rstrip("/") + "/")


def cli_binary_path_problem(path: Any, *, workspaces: Iterable[Path] = (), all_agents: bool = True) -> str | None:
    """Why `path` may not be run as a credentialed binary now, or None. Repeated at every call: the file must be the
    one an operator registered, not something an agent can plant or swap. So: absolute and already canonical (no
    symlink anywhere in it, so `realpath(path) == path`), a regular executable file owned by root and writable by
    no one else, in directories owned by root that others cannot write to (a sticky one such as /tmp is allowed:
    others cannot replace root's entries there), and outside the workspaces directory, `workspaces` and (with
    `all_agents`, at save time) every agent's workspace. A call passes its own workspace instead of reading every
    agent's: tools run without database access."""
    if not isinstance(path, str) or not path or "\x00" in path:
        return "the path must be a non-empty string"
    if not os.path.isabs(path):
        return f"{path} is not an absolute path"
    if os.path.normpath(path) != path:
        return f"{path} is not a normalised path (no //, . or ..)"
    try:
        real = os.path.realpath(path, strict=True)
        st = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be checked: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode) or real != path:
        return f"{path} is or goes through a symbolic link (to {real}); register the real file"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if not st.st_mode & stat.S_IXUSR:
        return f"{path} is not executable"
    if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} must be owned by root and writable by no one else"
    parent = os.path.dirname(path)
    while True:
        dst = os.stat(parent)
        if dst.st_uid != 0 or (dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not dst.st_mode & stat.S_ISVTX):
            return f"{parent} (a directory above {path}) must be owned by root and not writable by others"
        if parent == "/":
            break
        parent = os.path.dirname(parent)
    roots = [Path(settings.WORKSPACES_DIR), *workspaces]
    if all_agents:
        roots += [agent.workspace_path for agent in Agent.objects.exclude(workspace="")]
    if any(_inside(path, root) for root in roots):
        return f"{path} is inside an agent workspace"
    return None


def cli_binary_denied(row: SecureCLIBinary, argv: list[str]) -> str | None:
    """Why these arguments are refused for this binary (a deny-verbose flag, or a deny-args regex that matches the
    arguments joined by single spaces), or None."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        denied = row.deny_verbose or []
        if flag in denied or ("-v" in denied and re.fullmatch(r"-v+", flag)):
            return f"the flag {flag} is refused for {row.name} (it can print credentials)"
    joined = " ".join(argv)
    for pattern in row.deny_args or []:
        if re.search(pattern, joined):
            return f"these arguments are refused for {row.name} (rule {pattern!r})"
    return None


# --- validation ----------------------------------------------------------------------------------------------------
def _pattern_list_problem(value: Any, *, regex: bool) -> str | None:
    if not isinstance(value, list) or len(value) > MAX_PATTERNS or not all(isinstance(v, str) and v for v in value):
        return f"must be a list of at most {MAX_PATTERNS} non-empty strings"
    if regex:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                return f"{pattern!r} is not a valid regular expression: {exc}"
    return None


def cli_binary_problems(fields: dict[str, Any]) -> dict[str, str]:
    """field → what is wrong with it, for a complete definition (name collisions aside)."""
    problems: dict[str, str] = {}
    name = fields.get("name")
    if not isinstance(name, str) or not re.match(CLI_BINARY_NAME_RE, name):
        problems["name"] = "must be a program name: letters, digits, . _ + -, at most 64 characters"
    path_problem = cli_binary_path_problem(fields.get("path"))
    if path_problem:
        problems["path"] = path_problem
    elif isinstance(name, str) and os.path.basename(fields["path"]) != name:
        problems["name"] = f"must be the file name of the path ({os.path.basename(fields['path'])})"
    for field, regex in (("deny_args", True), ("deny_verbose", False)):
        if problem := _pattern_list_problem(fields.get(field), regex=regex):
            problems[field] = problem
    timeout = fields.get("timeout_seconds")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= CLI_BINARY_MAX_TIMEOUT:
        problems["timeout_seconds"] = f"must be a whole number of seconds from 1 to {CLI_BINARY_MAX_TIMEOUT}"
    tips = fields.get("tips")
    if not isinstance(tips, str) or len(tips) > MAX_TIPS_CHARS or "\x00" in tips:
        problems["tips"] = f"must be text of at most {MAX_TIPS_CHARS} characters"
    if not isinstance(fields.get("enabled"), bool):
        problems["enabled"] = "must be true or false"
    acknowledged = fields.get("risk_acknowledged", False)
    if not isinstance(acknowledged, bool):
        problems["risk_acknowledged"] = "must be true or false"
    elif not path_problem and (risk := cli_binary_risk_problem(fields["path"], acknowledged)):
        problems["risk_acknowledged"] = risk
    if fields.get("agent") is not None and not isinstance(fields.get("agent"), Agent):
        problems["agent"] = "must be an agent or empty"
    return problems


def cli_binary_risk_problem(path: str, acknowledged: bool) -> str | None:
    """Why `path` may not be registered or run without the operator's acknowledgement (it can start other programs or
    print its environment, tools_app/security/program_risk.py), or None. Checked at every save and again at every
    call, so a row saved before the check existed is refused until someone acknowledges the risk on it."""
    if acknowledged:
        return None
    risk = program_risk(path)
    if risk is None:
        return None
    return (f"{path} can reveal its credentials ({risk}): an agent could make it print them in forms the scrubber "
            "does not recognise. If you accept that risk for this binary, tick \"I accept that this binary can reveal "
            "its credentials\" (risk_acknowledged: true).")


def _check(fields: dict[str, Any], exclude_pk: Any) -> None:
    problems = cli_binary_problems(fields)
    if problems:
        field, message = next(iter(problems.items()))
        if field == "path":
            raise CLIBinaryPathError(f"path: {message}", details=problems)
        if field == "risk_acknowledged" and isinstance(fields.get("risk_acknowledged"), bool):
            raise CLIBinaryRiskError(message, details=problems)
        raise ValidationError(f"{field}: {message}", code="cli_binary_invalid", details=problems)
    clash = SecureCLIBinary.objects.filter(name=fields["name"]).exclude(pk=exclude_pk)
    agent = fields.get("agent")
    if agent is not None:
        clash = clash.filter(Q(agent__isnull=True) | Q(agent=agent))
    if clash.exists():
        raise CLIBinaryCollision(f"a credentialed binary named {fields['name']} is already registered for this "
                                 "scope; edit that one", details={"name": fields["name"]})


def _lock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_WRITE_LOCK])


def _seal_env(row: SecureCLIBinary, env: dict[str, str]) -> None:
    row.env_sealed = crypto.encrypt_json(env, associated_data=env_seal_context(row.pk)) if env else ""
    row.env_names = sorted(env)
    row.env_changed_at = timezone.now()


def cli_binary_env(row: SecureCLIBinary) -> dict[str, str]:
    """The decrypted env (only for a call about to run; raises crypto.DecryptionError if it cannot be opened)."""
    if not row.env_sealed:
        return {}
    return {str(k): str(v) for k, v in
            crypto.decrypt_json(row.env_sealed, associated_data=env_seal_context(row.pk)).items()}


# --- writes --------------------------------------------------------------------------------------------------------
def _defaults() -> dict[str, Any]:
    return {"deny_args": [], "deny_verbose": [], "timeout_seconds": 120, "tips": "", "enabled": True, "agent": None,
            "risk_acknowledged": False}


def _unknown(fields: dict[str, Any]) -> None:
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}", code="cli_binary_invalid")


@transaction.atomic
def cli_binary_create(*, actor, env: dict[str, str] | None = None, **fields: Any) -> SecureCLIBinary:
    """Register a binary (checked whole: its path as a call would check it, its patterns, its name's scope)."""
    _unknown(fields)
    if env is not None and (problem := env_problems(env, allow_unset=False)):
        raise ValidationError(f"env: {problem}", code="cli_binary_invalid", details={"env": problem})
    data = {**_defaults(), **fields}
    _lock()
    _check(data, None)
    row = SecureCLIBinary.objects.create(**data)
    if env:
        _seal_env(row, env)
        row.save(update_fields=["env_sealed", "env_names", "env_changed_at"])
    tools_changed()
    logger.info("credentialed binary %s (id %s) registered by %s", row.name, row.pk, actor_name(actor))
    return row


@transaction.atomic
def cli_binary_update(*, actor, binary: SecureCLIBinary, env: dict[str, str | None] | None = None,
                      **changes: Any) -> SecureCLIBinary:
    """Change some fields; `env` sets the given variables (null removes one) and keeps the others."""
    _unknown(changes)
    if env is not None and (problem := env_problems(env, allow_unset=True)):
        raise ValidationError(f"env: {problem}", code="cli_binary_invalid", details={"env": problem})
    _lock()
    row = SecureCLIBinary.objects.select_for_update().get(pk=binary.pk)
    data = {name: getattr(row, name) for name in EDITABLE}
    data.update(changes)
    _check(data, row.pk)
    for name, value in changes.items():
        setattr(row, name, value)
    if env:
        _seal_env(row, env_merged(cli_binary_env(row), env))
    row.save()
    tools_changed()
    logger.info("credentialed binary %s (id %s) updated by %s: %s%s", row.name, row.pk, actor_name(actor),
                ", ".join(sorted(changes)) or "-", f"; env names {sorted(env)}" if env else "")
    return row


@transaction.atomic
def cli_binary_delete(*, actor, binary: SecureCLIBinary) -> None:
    _lock()
    name, pk = binary.name, binary.pk
    SecureCLIBinary.objects.filter(pk=pk).delete()
    tools_changed()
    logger.info("credentialed binary %s (id %s) deleted by %s", name, pk, actor_name(actor))


def cli_binary_add_preset(*, actor, preset: str, path: str | None = None, agent: Agent | None = None,
                          env: dict[str, str] | None = None, risk_acknowledged: bool = False) -> SecureCLIBinary:
    """Register one of PRESETS (its deny args, flags and tips), at its usual path unless `path` is given
    (`risk_acknowledged` as for any binary: terraform, for one, runs programs its configuration names)."""
    if preset not in PRESETS:
        raise NotFound(f"no preset {preset!r}; presets: {', '.join(sorted(PRESETS))}", code="cli_binary_no_preset")
    data = dict(PRESETS[preset])
    return cli_binary_create(actor=actor, env=env, name=preset, path=path or data.pop("path"),
                             **{k: v for k, v in data.items() if k != "path"}, agent=agent,
                             risk_acknowledged=risk_acknowledged)


def cli_binaries_for_agent(agent: Any) -> list[SecureCLIBinary]:
    """The enabled binaries `agent` may run: its own first, then the global ones it has no own of that name."""
    rows = SecureCLIBinary.objects.filter(Q(agent__isnull=True) | Q(agent=agent), enabled=True)
    chosen: dict[str, SecureCLIBinary] = {}
    for row in sorted(rows, key=lambda r: (r.agent_id is None, r.name)):
        chosen.setdefault(row.name, row)
    return sorted(chosen.values(), key=lambda r: r.name)


def registered_binaries() -> tuple[set[str], set[str]]:
    """(names, paths) of every registered binary, enabled or not: only credentialed_exec may run them. Cached with
    the tool sets (every write here bumps their generation), so a shell command costs no query."""
    return generation_cache(TOOLSETS_CACHE).get(("registered_binaries",), _registered_binaries)


def _registered_binaries() -> tuple[set[str], set[str]]:
    names, paths = set(), set()
    for name, path in SecureCLIBinary.objects.values_list("name", "path"):
        names.add(name)
        paths.add(path)
    return names, paths


def program_is_registered(program: str, names: set[str], paths: set[str]) -> bool:
    """Whether a simple command's program word names a registered binary: by name, by path (as written or
    resolved, so /usr/bin/../bin/gh or a symlink to it counts), or by a name computed at run time (`$(which gh)`
    cannot be judged, so it is refused while any binary is registered)."""
    if not program:
        return False
    if "$" in program or "`" in program:
        return True
    if os.path.basename(program) in names:
        return True
    if "/" in program:
        candidates = {os.path.normpath(program)}
        try:
            candidates.add(os.path.realpath(program))
        except (OSError, ValueError):
            pass
        real_paths = set(paths)
        for path in paths:
            try:
                real_paths.add(os.path.realpath(path))
            except (OSError, ValueError):
                pass
        return bool(candidates & real_paths)
    return False
