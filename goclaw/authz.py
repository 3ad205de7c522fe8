"""What a person may do: the one place that decides it, for the API (goclaw.api's IsStaff / IsAgentOrStaff), the
admin (custom pages, actions, launcher and binary writes), the console and team pages, and the WebSocket's staff
groups (goclaw.consumers). See docs/permissions.md.

It is built on Django's permissions ("app_label.codename" strings; goclaw imports no app): a person may do something
when the account is active staff and holds every permission it needs. Superusers hold every permission (Django's
`has_perm`). An entrypoint declares what each HTTP method needs as a *spec*, a mapping from method to permissions:

    {"GET": ("tools_app.view_toolinvocation",), "POST": ("tools_app.execute_as_agent",)}

HEAD needs what GET needs; OPTIONS (which only describes the other methods) what any declared method needs; `"*"`
covers every method not named. A method the spec does not name is refused: nothing declared, nothing allowed.
Agents (tokens) are not people: goclaw.api keeps their rules.
"""
from __future__ import annotations

from functools import wraps
from typing import Any, Callable, Mapping, Sequence

from django.core.exceptions import ImproperlyConfigured, PermissionDenied

Spec = Mapping[str, Sequence[str]]
EVERY_METHOD = "*"


def is_person(user) -> bool:
    """An authenticated, active staff account (the precondition of every permission here)."""
    return bool(user is not None and getattr(user, "is_authenticated", False) and user.is_active and user.is_staff)


def person_may(user, *permissions: str) -> bool:
    """True when `user` is active staff holding every one of `permissions` (superusers hold all). Nothing named is
    nothing allowed."""
    return bool(permissions) and is_person(user) and user.has_perms(permissions)


def permissions_missing(user, permissions: Sequence[str]) -> list[str]:
    """The permissions of `permissions` that `user` lacks (all of them for someone who is not active staff)."""
    if not is_person(user):
        return list(permissions)
    return [p for p in permissions if not user.has_perm(p)]


def spec_check(spec: Any, where: str = "a permission declaration") -> dict[str, tuple[str, ...]]:
    """The spec normalised (upper-case methods, tuples); a malformed one is a configuration error, raised when the
    entrypoint is defined rather than when a person first calls it."""
    if not isinstance(spec, Mapping) or not spec:
        raise ImproperlyConfigured(f"{where}: a non-empty mapping of HTTP method to permissions")
    checked: dict[str, tuple[str, ...]] = {}
    for method, permissions in spec.items():
        if isinstance(permissions, str) or not permissions or not all(
                isinstance(p, str) and p.count(".") == 1 and all(p.split(".")) for p in permissions):
            raise ImproperlyConfigured(f"{where}: {method} needs a non-empty tuple of 'app_label.codename' strings, "
                                       f"not {permissions!r}")
        checked[str(method).upper()] = tuple(permissions)
    return checked


def spec_required(spec: Spec | None, method: str) -> list[tuple[str, ...]]:
    """What `method` needs under `spec`: alternatives, each a tuple of permissions that together suffice; empty
    when the spec does not allow the method at all."""
    if not spec:
        return []
    method = method.upper()
    for key in (method, "GET" if method == "HEAD" else None, EVERY_METHOD):
        if key is not None and spec.get(key):
            return [tuple(spec[key])]
    if method == "OPTIONS":  # describes the methods: whoever may use one of them may read the description
        return [tuple(p) for p in spec.values() if p]
    return []


def person_permitted(user, spec: Spec | None, method: str) -> tuple[bool, list[str]]:
    """(may `user` use `method` under `spec`, the permissions to name when refused)."""
    alternatives = spec_required(spec, method)
    for permissions in alternatives:
        if person_may(user, *permissions):
            return True, []
    if not alternatives:
        return False, []
    return False, permissions_missing(user, alternatives[0])


def denial_message(missing: Sequence[str]) -> str:
    if not missing:
        return "no permission allows this method here"
    return "your account lacks the permission" + ("s " if len(missing) > 1 else " ") + ", ".join(missing)


def person_required(*permissions: str, **per_method: Sequence[str]) -> Callable:
    """A view decorator for pages people use (admin custom views, console, team boards, config): someone not logged
    in as active staff is sent to the admin login; staff lacking a permission get 403. `person_required("a.b")` covers
    every method; `person_required(GET=("a.view_x",), POST=("a.change_x",))` one method each (others: 403)."""
    if permissions and per_method:
        raise ImproperlyConfigured("person_required: either permissions for every method or per-method ones")
    spec = spec_check({EVERY_METHOD: permissions} if permissions else per_method, "person_required")

    def decorator(view: Callable) -> Callable:
        @wraps(view)
        def guarded(request, *args, **kwargs):
            user = getattr(request, "user", None)
            if not is_person(user):
                from django.contrib.auth.views import redirect_to_login
                from django.urls import reverse

                return redirect_to_login(request.get_full_path(), reverse("admin:login"))
            allowed, missing = person_permitted(user, spec, request.method)
            if not allowed:
                raise PermissionDenied(denial_message(missing))
            return view(request, *args, **kwargs)

        guarded.person_permissions = spec  # read by the permission matrix test and docs/permissions.md
        return guarded

    return decorator


def admin_permission(*permissions: str) -> Callable:
    """A ModelAdmin `has_<name>_permission` method for an action declared `permissions=["<name>"]` (Django offers
    the action, and runs it, only when this answers True): `has_decide_permission = admin_permission("a.decide_x")`."""
    spec_check({EVERY_METHOD: permissions}, "admin_permission")

    def has_permission(model_admin, request, obj=None) -> bool:
        return person_may(request.user, *permissions)

    has_permission.person_permissions = permissions
    return has_permission
