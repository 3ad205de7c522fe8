"""django-q2 entry points owned by the platform."""
from goclaw.services import heartbeat_record


def heartbeat() -> str:
    """Scheduled every 30 s (and once at start-up): proves a worker is taking tasks."""
    return heartbeat_record().beat_at.isoformat()


def audit_checkpoint() -> str:
    """Scheduled every 10 s: records the head of every audit chain that grew (docs/audit-integrity.md)."""
    from goclaw.audit_trail import audit_checkpoint_write

    checkpoint = audit_checkpoint_write()
    return f"checkpoint {checkpoint.chain_seq}" if checkpoint else "no chain grew"
