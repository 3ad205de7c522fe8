"""The people groups get the permissions of the models added after 0002 (which only knew the permissions of its
time): MCP tasks (a call waiting for a person, mcp_app 0006) and the OAuth authorization server's clients, grants,
codes and refresh tokens (tools_app 0021; only hashes of secrets are stored). Administrators hold every permission,
Auditors every view permission, Operators see the tasks behind the approvals they decide. Adds only, like 0002."""
from importlib import import_module

from django.db import migrations

NEW = {"mcp_app": ("mcptask",), "tools_app": ("oauthclient", "oauthgrant", "oauthauthorizationcode", "oauthrefreshtoken")}
OPERATOR_PERMISSIONS = (("mcp_app", "view_mcptask"),)

_groups = import_module("console_app.migrations.0002_people_groups")


def groups_extended(apps, schema_editor=None) -> None:
    Permission = apps.get_model("auth", "Permission")
    _groups._permissions_created(apps)  # as post_migrate would create them (on the historical models)
    new = [p for p in Permission.objects.select_related("content_type")
           if p.content_type.model in NEW.get(p.content_type.app_label, ())]
    if len(new) != 4 * sum(len(models) for models in NEW.values()):
        raise RuntimeError(f"permissions not found for {NEW}: found {sorted(p.codename for p in new)}")
    _groups.groups_granted(apps, {
        "Administrators": new,
        "Auditors": [p for p in new if p.codename.startswith("view_")],
        "Operators": [p for p in new if (p.content_type.app_label, p.codename) in OPERATOR_PERMISSIONS]})


class Migration(migrations.Migration):
    dependencies = [
        ("console_app", "0002_people_groups"),
        ("tools_app", "0021_oauth"),
        ("mcp_app", "0006_mcp_tasks"),
    ]

    operations = [migrations.RunPython(groups_extended, migrations.RunPython.noop)]
