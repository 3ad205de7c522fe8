from django.apps import AppConfig


class GoclawConfig(AppConfig):
    name = "goclaw"
    verbose_name = "goclaw platform"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from goclaw.services import schedules_ensure

        post_migrate.connect(lambda sender, **kw: schedules_ensure() if sender.name == "goclaw" else None, weak=False)
