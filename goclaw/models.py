from django.db import models


class WorkerHeartbeat(models.Model):
    """Last time a django-q2 worker ran the heartbeat task: /healthz reads it to know the worker is alive."""

    name = models.CharField(max_length=100, primary_key=True)
    beat_at = models.DateTimeField()
    pid = models.IntegerField(default=0)
    host = models.CharField(max_length=255, blank=True)

    def __str__(self) -> str:
        return f"{self.name} @ {self.beat_at:%Y-%m-%d %H:%M:%S}"
