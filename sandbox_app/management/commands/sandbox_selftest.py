"""`manage.py sandbox_selftest [PROFILE]`: run the sandbox probe suite and print what held."""
from __future__ import annotations

from django.core.management.base import CommandError

from goclaw.management.base import OperationalCommand
from sandbox_app.admin import platform_paths
from sandbox_app.models import SandboxProfile
from sandbox_app.selectors import sandbox_profile_get
from sandbox_app.selftest import sandbox_selftest_run


class Command(OperationalCommand):
    help = ("Run the sandbox self-test in a profile (default: the default profile) and print, probe by probe, "
            "what held. Exits with status 1 when a probe did not hold.")

    def add_arguments(self, parser):
        parser.add_argument("profile", nargs="?", help="profile name (default: the default profile)")

    def handle(self, *args, profile=None, **options):
        if profile:
            row = SandboxProfile.objects.filter(name=profile).first()
            if row is None:
                names = ", ".join(SandboxProfile.objects.values_list("name", flat=True)) or "none"
                raise CommandError(f"no sandbox profile named {profile!r} (profiles: {names})")
        else:
            row = sandbox_profile_get(None)
        report = sandbox_selftest_run(profile=row, hostile_paths=platform_paths())
        self.stdout.write(f"profile {row.name}: backend {report['backend']}, mode {report['mode']}")
        for probe in report["probes"]:
            mark = self.style.SUCCESS("held  ") if probe["held"] else self.style.ERROR("FAILED")
            self.stdout.write(f"  {mark} {probe['name']}: {probe['detail']}")
        caps = report.get("capabilities") or {}
        if caps:
            self.stdout.write("capabilities: " + ", ".join(f"{k}={v}" for k, v in sorted(caps.items())))
        if not row.selftest_ok:
            raise CommandError(f"the sandbox of profile {row.name} did not hold every probe")
        self.stdout.write(self.style.SUCCESS(f"all {len(report['probes'])} probes held"))
