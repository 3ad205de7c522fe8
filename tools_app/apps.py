from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"

    def ready(self) -> None:
        from tools_app.builtin import register_builtin_tools
        from tools_app.registry import registry

        register_builtin_tools(registry)

        from tools_app import signals

        signals.connect()
        _scrub_platform_secrets()
        _contribute_to_platform()
        _register_encrypted_fields()
        _add_custom_tools()
        _add_credentialed_binaries()
        _add_context_memory_and_skills()

        from goclaw.services import health_check_register
        from tools_app.pipeline import tool_workers_status

        health_check_register("tool_workers", tool_workers_status)  # pool size and timed-out runs still going


def _scrub_platform_secrets() -> None:
    """goclaw's own secrets must never come back in a tool output, whatever the tool printed."""
    from django.conf import settings

    from tools_app.security.scrub import default_scrubber

    values = [settings.SECRET_KEY, settings.GOCLAW_ENCRYPTION_KEY, *settings.GOCLAW_ENCRYPTION_OLD_KEYS, settings.ADMIN_PASSWORD,
              settings.GOCLAW_AUDIT_KEY, *settings.GOCLAW_AUDIT_OLD_KEYS,
              settings.MEMORY_EMBEDDINGS_API_KEY,
              *(db.get("PASSWORD", "") for db in settings.DATABASES.values())]
    default_scrubber.add_values(v for v in values if v)


def _contribute_to_platform() -> None:
    """What goclaw/ runs on this app's behalf without importing it: the recurring jobs, agent tokens on
    /ws/events/, and the event groups staff may subscribe to (approvals, invocations, one agent's events)."""
    from goclaw.realtime import websocket_authenticator_register, websocket_staff_group_register
    from goclaw.services import schedule_register
    from goclaw.warm import warmer_register
    from tools_app.security.scrub.scrubber import default_engine
    from tools_app.security.shell_check import check_command
    from tools_app.services.agents import token_active, token_authenticate

    # built on first use, so a server builds them before its first call: the scrubber's detector table (~0.2 s to
    # compile) and the shell check's parser (bashlex, imported on the first command checked)
    warmer_register(default_engine)
    warmer_register(lambda: check_command("true"))

    schedule_register("tools rate-limit cleanup", "tools_app.tasks.cleanup_rate_limits", "*/10 * * * *")
    schedule_register("tools approvals expiry sweep", "tools_app.tasks.sweep_expired_approvals", "* * * * * */30")
    schedule_register("tools audit retention purge", "tools_app.tasks.purge_expired_audit", "17 * * * *")
    schedule_register("tools approval notifications", "tools_app.tasks.send_approval_notifications", "* * * * * */15")
    websocket_authenticator_register(authenticate=token_authenticate, active=token_active)
    # approval and held-change events; every call's summary (no payloads); everything about one agent (its calls,
    # approvals, context files, memory, skills, MCP requests, team tasks and messages)
    websocket_staff_group_register(r"approvals", permission="tools_app.view_approvalrequest")
    websocket_staff_group_register(r"invocations", permission="tools_app.view_toolinvocation")
    websocket_staff_group_register(r"agent\.[a-z0-9_-]{1,64}", permission=(
        "tools_app.view_agent", "tools_app.view_toolinvocation", "tools_app.view_approvalrequest"))


def _register_encrypted_fields() -> None:
    """Where this app keeps values sealed with goclaw.crypto, so `rotate_encryption_key` re-seals them all: a held
    change's exact arguments, the real caller ids of held calls (approval requests and pending changes), and the
    signing secrets of notification channels."""
    from goclaw.secrets import encrypted_field_register
    from tools_app.models import ApprovalRequest, NotificationChannel, PendingChange
    from tools_app.services.approvals.changes import pending_change_seal_context
    from tools_app.services.approvals.identity import identity_seal_context
    from tools_app.services.notifications import secret_seal_context

    encrypted_field_register(PendingChange, "sealed_arguments",
                             associated_data=lambda row: pending_change_seal_context(row.pk))
    for model in (ApprovalRequest, PendingChange):
        encrypted_field_register(model, "call_context", json_key="sealed_identity",
                                 associated_data=lambda row: identity_seal_context(row.pk))
    encrypted_field_register(NotificationChannel, "secret_sealed", associated_data=lambda row: secret_seal_context(row.pk))


def _add_custom_tools() -> None:
    """Custom tools (docs/custom-tools.md): their tool source, so every agent's tool set includes its custom tools, and
    their sealed env, so `rotate_encryption_key` re-seals it."""
    from goclaw.secrets import encrypted_field_register
    from tools_app.builtin.custom import CustomToolSource
    from tools_app.custom_tools import env_seal_context
    from tools_app.models import CustomTool
    from tools_app.toolsets import tool_source_register

    tool_source_register(CustomToolSource())
    encrypted_field_register(CustomTool, "env_sealed", associated_data=lambda row: env_seal_context(row.pk))


def _add_credentialed_binaries() -> None:
    """Credentialed exec (docs/credentialed-exec.md): the source that gives an agent `credentialed_exec` when it has
    binaries, and their sealed env, so `rotate_encryption_key` re-seals it."""
    from goclaw.secrets import encrypted_field_register
    from tools_app.builtin.credentialed import CredentialedBinarySource
    from tools_app.models import SecureCLIBinary
    from tools_app.services.cli_binaries import env_seal_context
    from tools_app.toolsets import tool_source_register

    tool_source_register(CredentialedBinarySource())
    encrypted_field_register(SecureCLIBinary, "env_sealed", associated_data=lambda row: env_seal_context(row.pk))


def _add_context_memory_and_skills() -> None:
    """Context files and memory (workspace routers to PostgreSQL, in this order) and skills (docs/context-files.md,
    docs/memory.md, docs/skills.md)."""
    from tools_app import context_files, memory, skills

    context_files.register()
    memory.register()
    skills.register()
