from django.apps import AppConfig


class GoclawConfig(AppConfig):
    name = "goclaw"
    verbose_name = "goclaw platform"

    def ready(self) -> None:
        from django.core.signals import request_started
        from django.db.models.signals import post_migrate

        from goclaw.db import close_connections_the_server_ended
        from goclaw.services import schedules_ensure

        request_started.connect(close_connections_the_server_ended, dispatch_uid="goclaw.db.ended_connections")

        post_migrate.connect(lambda sender, **kw: schedules_ensure() if sender.name == "goclaw" else None, weak=False)
