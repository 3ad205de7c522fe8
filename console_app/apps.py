from django.apps import AppConfig


class ConsoleAppConfig(AppConfig):
    """The operator's console: dashboard (the admin home), tool playground and audit search. It sits on top of every
    other app (none of them imports it); its pages live under /admin/console/ with the admin's look and login."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "console_app"
    verbose_name = "Operator console"

    def ready(self) -> None:
        from goclaw.services import schedule_register

        schedule_register("console dashboard rollup", "console_app.tasks.dashboard_rollup", "* * * * *")  # every minute
