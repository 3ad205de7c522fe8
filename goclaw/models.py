from django.db import models


class WorkerHeartbeat(models.Model):
    """Last time a django-q2 worker ran the heartbeat task: /healthz reads it to know the worker is alive."""

    name = models.CharField(max_length=100, primary_key=True)
    beat_at = models.DateTimeField()
    pid = models.IntegerField(default=0)
    host = models.CharField(max_length=255, blank=True)

    def __str__(self) -> str:
        return f"{self.name} @ {self.beat_at:%Y-%m-%d %H:%M:%S}"


class CacheGeneration(models.Model):
    """A counter per named cache (`policy`, `toolsets`, …), bumped in the transaction of every change to the data
    behind it; each process compares the counters at most every 0.5 s and drops a cache whose counter moved."""

    name = models.CharField(max_length=64, primary_key=True)
    value = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} generation {self.value}"
