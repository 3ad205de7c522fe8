from django.apps import AppConfig


class ConfigAppConfig(AppConfig):
    """Configuration as code: sits on top of every other app (none of them imports it)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "config_app"
    verbose_name = "Configuration as code"

    def ready(self) -> None:
        from goclaw.realtime import websocket_staff_group_register

        # config.imported reaches staff sockets subscribed to it
        websocket_staff_group_register(r"config", permission="config_app.export_configuration")
