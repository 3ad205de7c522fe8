from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"

    def ready(self) -> None:
        from tools_app.builtin import register_builtin_tools
        from tools_app.registry import registry

        register_builtin_tools(registry)

        from tools_app import approvals

        approvals.install()  # the real approval gate and the submit_plan tool

        from tools_app import signals

        signals.connect()
        _scrub_platform_secrets()


def _scrub_platform_secrets() -> None:
    """goclaw's own secrets must never come back in a tool output, whatever the tool printed."""
    from django.conf import settings

    from tools_app.security.scrub import default_scrubber

    values = [settings.SECRET_KEY, settings.GOCLAW_ENCRYPTION_KEY, settings.ADMIN_PASSWORD,
              *(db.get("PASSWORD", "") for db in settings.DATABASES.values())]
    default_scrubber.add_values(v for v in values if v)
