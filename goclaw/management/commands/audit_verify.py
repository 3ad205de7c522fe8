"""`manage.py audit_verify`: walk every audit chain and checkpoint (docs/audit-integrity.md). Exit 0 when intact, 1
when any row was modified, deleted or inserted out of band, printing the first broken row's id and why first."""

from goclaw.audit_trail import audit_verify
from goclaw.management.base import OperationalCommand


class Command(OperationalCommand):
    help = "Verify the audit trail's hash chains and checkpoints; exit 1 if any row was changed, removed or added."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=50, help="report at most this many problems (default 50)")
        parser.add_argument("--checkpoint", action="store_true",
                            help="first record a checkpoint of every chain's head (as the scheduled job does)")

    def handle(self, *args, limit, checkpoint, **options):
        if checkpoint:
            from goclaw.audit_trail import audit_checkpoint_write

            audit_checkpoint_write()
        report = audit_verify(limit=max(limit, 1))
        for problem in report.problems:
            self.stderr.write(f"BROKEN {problem}")
        for table, counts in report.tables.items():
            self.stdout.write(f"{table}: {counts['rows']} rows in {counts['chains']} chains")
        latest = report.latest_checkpoint
        self.stdout.write(f"checkpoints: {report.checkpoints}" + (
            f"; latest #{latest['seq']} at {latest['created_at']}, hash {latest['hash']} (keep a copy outside the database)"
            if latest else "; none yet"))
        if report.intact:
            self.stdout.write("audit trail intact")
            return
        self.stdout.write(f"audit trail BROKEN: {len(report.problems)} problem(s); first: {report.problems[0]}")
        raise SystemExit(1)
