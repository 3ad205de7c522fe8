from django.apps import AppConfig


class TeamsAppConfig(AppConfig):
    name = "teams_app"
