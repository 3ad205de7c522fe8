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
