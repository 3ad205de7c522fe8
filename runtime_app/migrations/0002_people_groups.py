"""Hosted agents' permissions for the three people groups (docs/permissions.md; the groups come from
console_app/migrations/0002_people_groups.py, which only knew the permissions of its time): Operators and Auditors
read providers, sessions and messages, Operators also run sessions; Administrators get every permission of this app.

Idempotent like the groups' migration: re-running adds what is missing, never removes what someone gave a group."""
from django.db import migrations

OPERATOR_PERMISSIONS = ("view_llmprovider", "view_session", "view_sessionmessage", "run_session")
AUDITOR_PERMISSIONS = ("view_llmprovider", "view_session", "view_sessionmessage")
GROUPS = {"Operators": OPERATOR_PERMISSIONS, "Auditors": AUDITOR_PERMISSIONS}
ADMINISTRATORS = "Administrators"


def _permissions_created(apps) -> None:
    """This app's model permissions, as post_migrate would create them (on the historical models)."""
    from django.contrib.auth.management import create_permissions

    app_config = apps.get_app_config("runtime_app")
    had = getattr(app_config, "models_module", None)
    app_config.models_module = True  # create_permissions skips an app without a models module (stubs have none)
    try:
        create_permissions(app_config, apps=apps, verbosity=0)
    finally:
        app_config.models_module = had


def runtime_people_groups_ensure(apps, schema_editor=None) -> None:
    """Add this app's permissions to the groups (creating a group that is missing). Also callable from tests."""
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    _permissions_created(apps)
    ours = {p.codename: p for p in Permission.objects.filter(content_type__app_label="runtime_app")}
    missing = sorted({c for codenames in GROUPS.values() for c in codenames} - set(ours))
    if missing:
        raise RuntimeError(f"permissions not found: {['runtime_app.' + c for c in missing]}")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*(ours[c] for c in codenames))  # adds only: permissions given by hand stay
    administrators, _ = Group.objects.get_or_create(name=ADMINISTRATORS)
    administrators.permissions.add(*ours.values())


class Migration(migrations.Migration):

    dependencies = [
        ("runtime_app", "0001_sessions_providers"),
        ("console_app", "0002_people_groups"),  # the groups exist, and this runs after the migration that made them
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(runtime_people_groups_ensure, migrations.RunPython.noop)]
