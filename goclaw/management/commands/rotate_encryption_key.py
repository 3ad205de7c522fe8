"""`manage.py rotate_encryption_key`: re-seal every registered secret with GOCLAW_ENCRYPTION_KEY (old keys from
GOCLAW_ENCRYPTION_OLD_KEYS open them). Safe to interrupt and re-run; exits non-zero until nothing is left to do."""
from __future__ import annotations

from django.core.management.base import CommandError

from goclaw.management.base import OperationalCommand
from goclaw.secrets import encryption_key_rotate


class Command(OperationalCommand):
    help = ("Re-encrypt every sealed value that is not sealed with the current GOCLAW_ENCRYPTION_KEY, in short "
            "row-locked batches (safe beside live traffic, safe to interrupt and re-run). See docs/secrets.md.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="open and count, write nothing")
        parser.add_argument("--batch-size", type=int, default=200, help="rows per transaction (default 200)")
        parser.add_argument("--max-batches", type=int, default=None,
                            help="stop after this many batches (re-run to continue)")

    def handle(self, *args, dry_run: bool, batch_size: int, max_batches: int | None, **options):
        if batch_size < 1 or (max_batches is not None and max_batches < 1):
            raise CommandError("--batch-size and --max-batches must be at least 1")
        report = encryption_key_rotate(batch_size=batch_size, max_batches=max_batches, dry_run=dry_run)
        verb = "would rotate" if dry_run else "rotated"
        self.stdout.write(f"current key id: {report.key_id}{' (dry run: nothing written)' if dry_run else ''}")
        for one in report.fields:
            self.stdout.write(f"{one.label}: {verb} {one.rotated}, already current {one.already_current}, "
                              f"failed to open {len(one.failed)}, left {one.left}")
        for row in report.failed:
            self.stdout.write(f"failed to open: {row}")
        if report.failed:
            raise CommandError(f"{len(report.failed)} value(s) open with no configured key (listed above) and were "
                               "left untouched: keep the old keys until they are dealt with")
        if report.left:
            raise CommandError(f"{report.left} value(s) are still sealed with an old key (stopped early, or their rows "
                               "were busy): run the command again")
        self.stdout.write(self.style.SUCCESS("nothing left under an old key" if not dry_run
                                             else "dry run: every value opens"))
