"""Small factories over the real services (no mocks)."""
from __future__ import annotations

import itertools
import tempfile

from tools_app.services.agents import agent_create

_seq = itertools.count(1)


def make_agent(**overrides):
    n = next(_seq)
    fields = {"key": f"agent-{n}", "display_name": f"Agent {n}", "provider": "openai", "model": "gpt-test",
              "workspace": tempfile.mkdtemp(prefix="goclaw-ws-")}
    fields.update(overrides)
    return agent_create(**fields)


# --- people (docs/permissions.md) -------------------------------------------------------------------------------
_people = itertools.count(1)


def permission_objects(names):
    """Permission rows for "app_label.codename" names (every one must exist: a typo fails the test)."""
    from django.contrib.auth.models import Permission

    wanted = [tuple(name.split(".", 1)) for name in names]
    rows = {(p.content_type.app_label, p.codename): p for p in Permission.objects.select_related("content_type").filter(
        codename__in=[codename for _, codename in wanted])}
    missing = [".".join(key) for key in wanted if key not in rows]
    assert not missing, f"no such permission: {missing}"
    return [rows[key] for key in wanted]


def people_group(name: str):
    """One of the groups console_app's migration creates (made again after a transactional test's flush)."""
    from importlib import import_module

    from django.apps import apps
    from django.contrib.auth.models import Group

    group = Group.objects.filter(name=name).first()
    if group is None:
        import_module("console_app.migrations.0002_people_groups").people_groups_ensure(apps)
        # and what later migrations added to them
        import_module("runtime_app.migrations.0002_people_groups").runtime_people_groups_ensure(apps)
        import_module("console_app.migrations.0003_people_groups_tasks_oauth").groups_extended(apps)
        group = Group.objects.get(name=name)
    return group


def make_person(*permissions: str, username: str | None = None, groups=(), password: str | None = None, **fields):
    """An active staff account holding exactly `permissions` (and the named groups' ones); no permission at all
    when none is named. Without `password` it cannot log in with one (tests use force_login; no slow hashing)."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username or f"person-{next(_people)}", password=password,
                                                is_staff=True, **fields)
    if permissions:
        user.user_permissions.add(*permission_objects(permissions))
    for name in groups:
        user.groups.add(people_group(name))
    return user


def make_administrator(**kwargs):
    """A staff account in the Administrators group (every permission), not a superuser: what old tests' plain staff
    accounts did before permissions were checked, now through the permission layer."""
    return make_person(groups=("Administrators",), **kwargs)
