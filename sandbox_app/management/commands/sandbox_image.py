"""`manage.py sandbox_image`: build the local docker sandbox image (goclaw-sandbox:latest) from busybox-static
and bash-static."""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sandbox_app.backends.docker import DEFAULT_IMAGE
from sandbox_app.docker_image import sandbox_image_build
from sandbox_app.services import SandboxError


class Command(BaseCommand):
    help = ("Build the local docker sandbox image from Debian's busybox-static and bash-static (installed, else "
            "apt-get download) "
            "and import it into the engine at DOCKER_HOST. Nothing is pulled from a registry.")
    requires_system_checks = []  # builds an image; needs neither the URL conf nor the database

    def add_arguments(self, parser):
        parser.add_argument("--tag", default=DEFAULT_IMAGE, help=f"image tag (default: {DEFAULT_IMAGE})")
        parser.add_argument("--busybox", type=Path, help="path of a static busybox binary to use instead")

    def handle(self, *args, tag: str, busybox: Path | None = None, **options):
        try:
            build = sandbox_image_build(tag=tag, busybox=busybox)
        except SandboxError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"busybox: {build.busybox_source}, {build.applets} applets")
        self.stdout.write(f"bash: {build.bash_source}")
        self.stdout.write(f"users: root, nobody (65534), sandbox user {build.uid}:{build.gid}")
        if build.replaced_image_id:
            self.stdout.write(f"removed the previous image {build.replaced_image_id[:19]}")
        self.stdout.write(self.style.SUCCESS(
            f"built {build.tag} ({build.image_id[:19]}, {build.size_bytes / 1e6:.1f} MB)"))
