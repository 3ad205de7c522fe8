from django.apps import AppConfig


class SandboxAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "sandbox_app"
    verbose_name = "Sandbox"

    def ready(self) -> None:
        from goclaw.services import health_check_register
        from sandbox_app.health import sandbox_health

        health_check_register("sandbox", sandbox_health)
