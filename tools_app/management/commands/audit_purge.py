"""Delete audit rows (and their stored outputs) older than GOCLAW_AUDIT_RETENTION_DAYS now, instead of waiting for
the hourly schedule; `--dry-run` only says what would go. See docs/audit-search.md."""
from django.core.management.base import CommandError

from goclaw.management.base import OperationalCommand
from tools_app.services.audit import PURGE_BATCH, audit_purge_expired


class Command(OperationalCommand):
    help = "Purge audit rows older than the retention (docs/audit-search.md)."

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count what would be removed; remove nothing")
        parser.add_argument("--days", type=int, default=None,
                            help="retention for this run, in days (default: GOCLAW_AUDIT_RETENTION_DAYS; 0 keeps all)")
        parser.add_argument("--batch-size", type=int, default=PURGE_BATCH, help="rows per transaction")

    def handle(self, *args, dry_run, days, batch_size, **options):
        if days is not None and days < 0:
            raise CommandError("--days must be 0 or more")
        if batch_size < 1:
            raise CommandError("--batch-size must be 1 or more")
        report = audit_purge_expired(retention_days=days, dry_run=dry_run, batch_size=batch_size)
        if report["cutoff"] is None:
            self.stdout.write("retention is 0 days (keep forever): nothing removed")
            return
        verb = "would remove" if dry_run else "removed"
        oldest = report["oldest_kept"].isoformat() if report["oldest_kept"] else "none"
        self.stdout.write(f"{verb} {report['removed']} audit rows and {report['outputs_removed']} stored outputs "
                          f"older than {report['cutoff'].isoformat()} (retention {report['retention_days']} days); "
                          f"oldest kept: {oldest}")
