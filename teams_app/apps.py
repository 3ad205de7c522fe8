from django.apps import AppConfig


class TeamsAppConfig(AppConfig):
    name = "teams_app"

    def ready(self) -> None:
        from goclaw.realtime import websocket_staff_group_register

        websocket_staff_group_register(r"team\.[0-9a-zA-Z_-]{1,64}")  # staff may watch one team's board live
