from django.db import models


class Backend(models.TextChoices):
    AUTO = "auto", "auto (bubblewrap, else docker; refused when neither works)"
    BUBBLEWRAP = "bubblewrap", "bubblewrap"
    DOCKER = "docker", "docker"
    HOST = "host", "host (no isolation: only with the sandbox off)"


class SandboxMode(models.TextChoices):
    ALL = "all", "all: every process is sandboxed"
    NON_MAIN = "non-main", "non-main: only subagents and non-main sessions"
    OFF = "off", "off: processes run on the host"


class Network(models.TextChoices):
    OFF = "off", "off: no network at all"
    ON = "on", "on"
