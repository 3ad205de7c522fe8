"""django-q2 entry points owned by the platform."""
from goclaw.services import heartbeat_record


def heartbeat() -> str:
    """Scheduled every 30 s (and once at start-up): proves a worker is taking tasks."""
    return heartbeat_record().beat_at.isoformat()
