"""One `Workspace` per call: where the file tools and `exec` work, and what they may not touch.

The pipeline builds it once from the call (the agent's directory, or the user's own directory for open agents; the
denied prefixes merged once; the registered routers) and hands it to the tools in `ToolContext.workspace`. Its
methods are `tools_app.paths` with the root and the denied prefixes bound, so no tool passes them around.

A *router* sends some workspace paths elsewhere before the disk (context files and memory to PostgreSQL). Routing
judges a path by its text: malformed, absolute-outside and `..`-escaping paths are refused exactly as on disk, and
a denied path is refused before any router sees it. Everything no router claims goes to the disk as before.

A low-level module: no pipeline, services or model imports (apps register their routers from `ready()`).
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from tools_app import paths
from tools_app.base import ToolError
from tools_app.choices import AgentType
from tools_app.security.scrub import Scrubber

if TYPE_CHECKING:
    from tools_app.models import Agent

logger = logging.getLogger("goclaw.workspace")


class WorkspaceRouter:
    """Stores some workspace paths somewhere other than the disk. Subclass it and register an instance with
    `workspace_router_register`. `rel` is always a clean workspace-relative POSIX path ("SOUL.md", "memory/a.md")
    that is inside the workspace and not denied; a router never sees anything else."""

    name: str = "router"

    def claims(self, ws: Workspace, rel: str) -> bool:
        """Whether this router stores `rel` (cheap: it is asked for every file path a tool names)."""
        return False

    def read(self, ws: Workspace, rel: str) -> str:
        """The text stored at `rel`; FileNotFoundError if there is none."""
        raise FileNotFoundError(rel)

    def write(self, ws: Workspace, rel: str, content: str) -> bool:
        """Store `content` at `rel` (replacing what was there); True if this created the entry."""
        raise NotImplementedError(f"{self.name} cannot write {rel}")

    def entries(self, ws: Workspace, rel_dir: str) -> list[str]:
        """The workspace-relative paths of the files this router stores below `rel_dir` ("" = the root), at any
        depth: list_files, glob and search show them."""
        return []


@dataclass(frozen=True)
class Workspace:
    """The directory a call's file tools and processes work in, its denied prefixes and its routers, in order."""

    root: Path
    denied: tuple[str, ...] = paths.normalize_denied(paths.DEFAULT_DENIED)
    routers: tuple[WorkspaceRouter, ...] = ()
    agent_key: str = ""
    user_id: str = ""

    def __post_init__(self) -> None:
        # An empty root would silently mean the server's current directory.
        if self.root is None or str(self.root) == "":
            raise ValueError("a workspace needs a root directory")
        object.__setattr__(self, "root", Path(self.root))
        object.__setattr__(self, "denied", paths.normalize_denied(self.denied))
        object.__setattr__(self, "routers", tuple(self.routers))

    # --- the disk, confined (tools_app.paths with root and denied bound) --------------------------------------
    def resolve(self, path: str, for_write: bool = False) -> Path:
        return paths.resolve_in_workspace(self.root, path, for_write=for_write, denied=self.denied)

    def open_for_read(self, path: str) -> int:
        return paths.open_for_read(self.root, path, denied=self.denied)

    def open_for_write(self, path: str, *, append: bool = False, create_parents: bool = True) -> int:
        return paths.open_for_write(self.root, path, denied=self.denied, append=append, create_parents=create_parents)

    def atomic_write(self, path: str, data: bytes, *, create_parents: bool = True,
                     expect: os.stat_result | None = None) -> bool:
        return paths.atomic_write(self.root, path, data, denied=self.denied, create_parents=create_parents,
                                  expect=expect)

    def open_dir(self, path: str = ".", *, create: bool = False) -> int:
        return paths.open_dir(self.root, path, denied=self.denied, create=create)

    def relative(self, real: Path | str) -> str:
        """The workspace-relative form of a resolved path ("." for the root), for messages and listings."""
        return paths.relative_display(self.root, real)

    def rel_of(self, path: str, for_write: bool = False) -> str:
        """The workspace-relative form of the real path `path` resolves to (refused like `resolve`)."""
        return self.relative(self.resolve(path, for_write=for_write))

    def real_root(self) -> str:
        """The workspace's real absolute path (the root itself may be a symlink)."""
        return paths.workspace_root(self.root)

    def ensure(self) -> str:
        """Create the workspace (0o700) if missing; return its real path."""
        return paths.ensure_workspace(self.root)

    # --- routing -----------------------------------------------------------------------------------------------
    def router_for(self, path: str) -> tuple[WorkspaceRouter, str] | None:
        """(router, rel) for the first router, in order, that claims `path`; None sends it to the disk.

        The path is judged by its text: it is validated like a disk path (PathError), a path that leaves the
        workspace on the way is never routed (the disk refuses it or resolves it as before), a denied path is
        refused here before any router is asked, and a path ending in "/" names a directory, never a routed file."""
        if not self.routers:
            return None
        rel = paths.lexical_relative(self.root, path)
        if rel is None or rel == ".":
            return None
        paths.refuse_denied(rel, path, self.denied)
        if path.endswith("/"):
            return None
        router = self._claimer(rel)
        return (router, rel) if router is not None else None

    def routed_files(self, rel_dir: str = ".") -> dict[str, WorkspaceRouter]:
        """The routed files at any depth below `rel_dir` ("." or "" = the root) → the router that serves each.

        What a router lists is checked like a path an agent typed: clean, relative, not denied, below `rel_dir`, and
        served by this router (the first claimer) - anything else is ignored. Sorted by path."""
        base = "" if rel_dir in ("", ".") else rel_dir.strip("/")
        found: dict[str, WorkspaceRouter] = {}
        for router in self.routers:
            for rel in router.entries(self, base):
                if not isinstance(rel, str) or rel in found or not _is_clean_rel(rel):
                    continue
                if base and not rel.startswith(base + "/"):
                    continue
                if paths.is_denied(rel, self.denied) or self._claimer(rel) is not router:
                    continue
                found[rel] = router
        return dict(sorted(found.items(), key=lambda item: item[0].split("/")))

    def _claimer(self, rel: str) -> WorkspaceRouter | None:
        for router in self.routers:
            if router.claims(self, rel):
                return router
        return None


def _is_clean_rel(rel: str) -> bool:
    try:
        paths.validate_user_path(rel)
    except paths.PathError:
        return False
    return not rel.startswith("/") and all(part not in ("", ".", "..") for part in rel.split("/"))


def workspace_required(ctx: Any) -> Workspace:
    """The call's Workspace, or the tool error an agent without one gets."""
    ws = getattr(ctx, "workspace", None)
    if ws is None:
        raise ToolError("no workspace is configured for this agent")
    if not isinstance(ws, Workspace):  # a caller bug, not an agent's: fail loudly
        raise TypeError(f"ToolContext.workspace must be a Workspace, not {type(ws).__name__}")
    return ws


# --- routers registered by apps ----------------------------------------------------------------------------
_routers: tuple[WorkspaceRouter, ...] = ()
_routers_lock = threading.Lock()


def workspace_router_register(router: WorkspaceRouter) -> None:
    """Add a router to every workspace built from now on (apps call this from `ready()`); order = registration
    order, and registering the same router again changes nothing."""
    global _routers
    if not isinstance(router, WorkspaceRouter):
        raise TypeError(f"a workspace router must subclass WorkspaceRouter, not {type(router).__name__}")
    with _routers_lock:
        if router not in _routers:
            _routers = (*_routers, router)


def workspace_router_unregister(router: WorkspaceRouter) -> None:
    """Remove a registered router (tests, and apps that switch a router off)."""
    global _routers
    with _routers_lock:
        _routers = tuple(r for r in _routers if r is not router)


def workspace_routers() -> tuple[WorkspaceRouter, ...]:
    return _routers


# --- building a call's workspace ---------------------------------------------------------------------------
def denied_paths(config: dict[str, Any] | None) -> tuple[str, ...]:
    """The one merge of denied prefixes: the built-in ones, the server's (GOCLAW_DENIED_PATHS) and the agent's
    `denied_paths`, normalised and without repeats."""
    own = (config or {}).get("denied_paths") or ()
    if isinstance(own, str):
        own = (own,)
    merged = paths.normalize_denied([*paths.DEFAULT_DENIED, *settings.TOOL_DENIED_PATHS, *own])
    return tuple(dict.fromkeys(merged))


def workspace_build(agent: Agent, user_id: str, config: dict[str, Any] | None,
                    routers: tuple[WorkspaceRouter, ...] | list[WorkspaceRouter] | None = None) -> Workspace:
    """The Workspace of a call by `user_id` to `agent` with the agent's `config` (its other_config)."""
    return Workspace(root=workspace_for(agent, user_id), denied=denied_paths(config),
                     routers=tuple(routers) if routers is not None else workspace_routers(),
                     agent_key=agent.key, user_id=user_id)


# --- per-user workspaces --------------------------------------------------------------------------------
# Injective by construction, three disjoint ranges: "" -> EMPTY_USER_DIRNAME; a readable id -> itself (always
# starts with [a-z0-9]); any other id -> "_h-" + the full SHA-256 of its UTF-8. Names starting with "_" are
# reserved: the readable form never produces them. The readable form is lower-case ASCII only, so no two names
# differ only by case or Unicode normalisation (safe on case-insensitive and normalising file systems), and it
# is never something the scrubber recognises as a credential (a directory name is stored on disk).
EMPTY_USER_DIRNAME = "_anonymous"
HASHED_DIR_PREFIX = "_h-"
_READABLE_DIR_RE = re.compile(r"[a-z0-9][a-z0-9._@-]{0,99}")
# Formats only: a directory name must not depend on which dynamic secrets happen to be registered.
_format_scrubber = Scrubber()
_LEGACY_DIR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")


def user_workspace_dirname(user_id: str) -> str:
    """The directory of `user_id` inside an open agent's workspace; no two distinct ids ever share one."""
    if not user_id:
        return EMPTY_USER_DIRNAME
    if (_READABLE_DIR_RE.fullmatch(user_id) and ".." not in user_id and not user_id.endswith(".")
            and not _format_scrubber.scrub(user_id)[1]):
        return user_id
    return HASHED_DIR_PREFIX + hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()


def legacy_workspace_dirname(user_id: str) -> str | None:
    """The name the old, non-injective mapping gave `user_id` (None if it could not name it at all)."""
    uid = user_id or "_default"
    if _LEGACY_DIR_RE.match(uid) and ".." not in uid:
        return uid
    try:
        return "u-" + hashlib.sha256(uid.encode()).hexdigest()[:24]
    except UnicodeEncodeError:
        return None


def workspace_for(agent: Agent, user_id: str) -> Path:
    base = agent.workspace_path
    if agent.agent_type != AgentType.OPEN:
        return base
    path = base / user_workspace_dirname(user_id)
    if not os.path.lexists(path):
        _adopt_legacy_workspace(base, user_id, path)
    return path


def _adopt_legacy_workspace(base: Path, user_id: str, path: Path) -> None:
    """Rename the directory the old mapping gave `user_id` to its new name, when it is unambiguously this user's.
    "" and "_default" shared one old directory: it goes to "" (the common case). A mixed-case old name that the
    file system resolves to the same directory as its lower-case form is left alone (it was shared)."""
    if user_id == "_default":
        return
    legacy = legacy_workspace_dirname(user_id)
    if legacy is None or legacy == path.name:
        return
    old = base / legacy
    try:
        if not stat.S_ISDIR(os.lstat(old).st_mode):
            return
        if legacy != legacy.lower() and os.path.lexists(base / legacy.lower()) and os.path.samefile(old, base / legacy.lower()):
            logger.warning("workspace of a user in %s not migrated: its old directory is shared on a case-insensitive "
                           "file system", base)
            return
        os.rename(old, path)
    except (OSError, ValueError):  # gone already (another process moved it), or the new one appeared meanwhile
        return
    logger.info("moved a user workspace in %s to its injective name %s", base, path.name)
