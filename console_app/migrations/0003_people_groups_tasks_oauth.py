"""The people groups get the permissions of the models added after 0002 (which only knew the permissions of its
time): MCP tasks (a call waiting for a person, mcp_app 0006) and the OAuth authorization server's clients, grants,
codes and refresh tokens (tools_app 0021; only hashes of secrets are stored). Administrators hold every permission,
Auditors every view permission, Operators see the tasks behind the approvals they decide. Adds only, like 0002."""
from django.db import migrations

NEW = {"mcp_app": ("mcptask",), "tools_app": ("oauthclient", "oauthgrant", "oauthauthorizationcode", "oauthrefreshtoken")}
OPERATOR_PERMISSIONS = (("mcp_app", "view_mcptask"),)


def groups_extended(apps, schema_editor=None) -> None:
    from django.contrib.auth.management import create_permissions

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for label in NEW:  # as post_migrate would create them (on the historical models)
        app_config = apps.get_app_config(label)
        had = getattr(app_config, "models_module", None)
        app_config.models_module = True  # create_permissions skips an app without a models module (stubs have none)
        try:
            create_permissions(app_config, apps=apps, verbosity=0)
        finally:
            app_config.models_module = had
    new = [p for p in Permission.objects.select_related("content_type")
           if p.content_type.model in NEW.get(p.content_type.app_label, ())]
    if len(new) != 4 * sum(len(models) for models in NEW.values()):
        raise RuntimeError(f"permissions not found for {NEW}: found {sorted(p.codename for p in new)}")
    grants = {"Administrators": new,
              "Auditors": [p for p in new if p.codename.startswith("view_")],
              "Operators": [p for p in new if (p.content_type.app_label, p.codename) in OPERATOR_PERMISSIONS]}
    for name, permissions in grants.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*permissions)  # adds only: permissions given by hand stay


class Migration(migrations.Migration):
    dependencies = [
        ("console_app", "0002_people_groups"),
        ("tools_app", "0021_oauth"),
        ("mcp_app", "0006_mcp_tasks"),
    ]

    operations = [migrations.RunPython(groups_extended, migrations.RunPython.noop)]
