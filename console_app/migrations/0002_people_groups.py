"""Three groups people can start from (docs/permissions.md): Operators decide approvals and held changes, review
MCP access requests and read the audit rows (payloads masked) and the boards; Auditors read everything, audit payloads
and exports included, and change nothing; Administrators hold every permission.

Permissions are normally created after the migrations (post_migrate): the ones these groups need are created here
first. Idempotent: re-running adds what is missing and never removes a permission someone gave a group. A later
release's new permissions reach these groups only through a later migration of its own (this one lists what exists
now)."""
from django.db import migrations

OPERATORS = "Operators"
AUDITORS = "Auditors"
ADMINISTRATORS = "Administrators"

OPERATOR_PERMISSIONS = (
    # decide
    "tools_app.decide_approvalrequest", "tools_app.view_approvalrequest", "tools_app.view_approvalrule",
    "tools_app.decide_pendingchange", "tools_app.view_pendingchange",
    "mcp_app.review_mcpaccessrequest", "mcp_app.view_mcpaccessrequest", "mcp_app.view_mcpserver", "mcp_app.view_mcptool",
    # read the audit rows (payloads masked: no tools_app.view_payload) and who the agents are
    "tools_app.view_toolinvocation", "tools_app.view_storedtooloutput", "tools_app.view_auditevent", "tools_app.view_agent",
    # the boards
    "teams_app.view_team", "teams_app.view_teammember", "teams_app.view_teamtask", "teams_app.view_teamevent",
    "teams_app.view_teammessage", "teams_app.view_delegation", "teams_app.view_handoffroute",
)
AUDITOR_EXTRA_PERMISSIONS = ("tools_app.view_payload", "tools_app.export_audit", "config_app.export_configuration")


def _permissions_created(apps) -> None:
    """Every model permission of every app, as post_migrate would create them (on the historical models)."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        had = getattr(app_config, "models_module", None)
        app_config.models_module = True  # create_permissions skips an app without a models module (stubs have none)
        try:
            create_permissions(app_config, apps=apps, verbosity=0)
        finally:
            app_config.models_module = had


def people_groups_ensure(apps, schema_editor=None) -> None:
    """Create (or complete) the three groups. Also called by tests after a flush, with the current apps."""
    Permission = apps.get_model("auth", "Permission")
    _permissions_created(apps)
    every = Permission.objects.select_related("content_type")

    def named(names):
        wanted = {tuple(name.split(".", 1)) for name in names}
        found = [p for p in every if (p.content_type.app_label, p.codename) in wanted]
        missing = wanted - {(p.content_type.app_label, p.codename) for p in found}
        if missing:
            raise RuntimeError(f"permissions not found: {sorted('.'.join(m) for m in missing)}")
        return found

    groups = {
        OPERATORS: named(OPERATOR_PERMISSIONS),
        AUDITORS: [p for p in every if p.codename.startswith("view_")] + named(AUDITOR_EXTRA_PERMISSIONS),
        ADMINISTRATORS: list(every),
    }
    groups_granted(apps, groups)


def groups_granted(apps, groups: dict) -> None:
    """Give each named group (created if missing) these permissions; adds only: permissions given by hand stay."""
    Group = apps.get_model("auth", "Group")
    for name, permissions in groups.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*permissions)


class Migration(migrations.Migration):

    # On top of every app (console_app sits there): the groups need every app's permissions.
    dependencies = [
        ("console_app", "0001_initial"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("sessions", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
        ("channels_postgres", "0004_notify_ensure_payload_not_too_big"),
        ("goclaw", "0003_audit_chain_checkpoints_purges"),
        ("sandbox_app", "0001_sandbox_profiles"),
        ("tools_app", "0020_chained_audit_rows"),
        ("mcp_app", "0005_people_permissions"),
        ("teams_app", "0001_teams_board_mailbox_handoff_links"),
        ("config_app", "0002_export_permission"),
    ]

    operations = [migrations.RunPython(people_groups_ensure, migrations.RunPython.noop)]
