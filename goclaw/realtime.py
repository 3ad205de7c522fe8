"""What apps contribute to /ws/events/ from `AppConfig.ready()`: goclaw imports no app, so the socket learns here
how an agent token becomes a principal and which groups staff may join, with which permissions.

Until an app registers a token authenticator, no token is accepted (the socket fails closed); a group no
registered rule matches is refused, and a person joins a group only holding every permission of every rule that
matches it (goclaw.authz; docs/permissions.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class TokenAuthenticator:
    """`authenticate(raw)` -> the active token for a raw bearer secret, or None; `active(token_id)` -> the token
    while it still grants access, else None. A token has `pk`, `agent` (with `pk` and `key`) and `expires_at`."""

    authenticate: Callable[[str], Any]
    active: Callable[[Any], Any]


_authenticator: TokenAuthenticator | None = None
# (pattern, permissions) -> compiled pattern: several apps may open the same groups (each app's events reach
# `agent.<key>`), and a person then needs the permissions of every rule matching the group.
_staff_group_patterns: dict[tuple[str, tuple[str, ...]], re.Pattern] = {}


def websocket_authenticator_register(*, authenticate: Callable[[str], Any], active: Callable[[Any], Any]) -> None:
    """Make agent tokens valid on /ws/events/. One authenticator per process: a second, different one is a
    configuration error, never a silent replacement of who may connect."""
    global _authenticator
    candidate = TokenAuthenticator(authenticate=authenticate, active=active)
    if _authenticator is not None and _authenticator != candidate:
        raise ImproperlyConfigured("a WebSocket token authenticator is already registered")
    _authenticator = candidate


def websocket_token_authenticate(raw: str) -> Any:
    """The active token for `raw`, or None (also when no app registered an authenticator)."""
    return _authenticator.authenticate(raw) if _authenticator is not None else None


def websocket_token_active(token_id: Any) -> Any:
    """The token while it still grants access, else None (also when no app registered an authenticator)."""
    return _authenticator.active(token_id) if _authenticator is not None else None


def websocket_staff_group_register(pattern: str, *, permission: str | tuple[str, ...]) -> None:
    """Let people holding `permission` (one "app_label.codename" or a tuple of them, all needed) subscribe to the
    groups whose whole name matches `pattern` (a regular expression): the view permission of what this app sends
    there. Another app registering the same pattern adds its own permissions for the events it sends there."""
    permissions = (permission,) if isinstance(permission, str) else tuple(permission)
    if not permissions or not all(isinstance(p, str) and p.count(".") == 1 for p in permissions):
        raise ImproperlyConfigured(f"WebSocket group {pattern!r}: a permission ('app_label.codename') is required")
    _staff_group_patterns[(pattern, permissions)] = re.compile(pattern)


def websocket_staff_group_permissions(group: str) -> tuple[str, ...] | None:
    """Every permission a person needs to join `group` (of every rule matching it), or None when no rule opens it."""
    needed = [permissions for (_, permissions), pattern in _staff_group_patterns.items() if pattern.fullmatch(group)]
    if not needed:
        return None
    return tuple(dict.fromkeys(p for permissions in needed for p in permissions))


def websocket_staff_may_join(group: str, user) -> bool:
    """May this person (a user row read now: permissions are cached on the object) subscribe to `group`?"""
    from goclaw.authz import person_may

    permissions = websocket_staff_group_permissions(group)
    return permissions is not None and person_may(user, *permissions)
