"""Sandbox profiles: how the processes an agent starts are isolated (backend, network, limits)."""
from __future__ import annotations

import os

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from sandbox_app.choices import Backend, Network, SandboxMode
from sandbox_app.services import ExecLimits, SandboxSpec

MIB = 1024 * 1024


class SandboxProfile(models.Model):
    """One way of isolating processes; agents point at one (none = the default profile)."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=300, blank=True)
    backend = models.CharField(max_length=12, choices=Backend.choices, default=Backend.BUBBLEWRAP)
    mode = models.CharField(max_length=10, choices=SandboxMode.choices, default=SandboxMode.ALL,
                            help_text="non-main trusts the caller's session key and depth: use it only for agents you trust")
    network = models.CharField(max_length=3, choices=Network.choices, default=Network.OFF)
    network_local = models.BooleanField(
        default=False, help_text="with network on: loopback and private address ranges are reachable (goclaw itself too)")
    timeout_seconds = models.PositiveIntegerField(default=300, validators=[MinValueValidator(1), MaxValueValidator(3600)],
                                                  help_text="default and maximum wall-clock time of one command")
    cpu_seconds = models.PositiveIntegerField(default=300, help_text="CPU time per command (0 = no limit)")
    memory_mb = models.PositiveIntegerField(default=1024, help_text="memory per command in MiB (0 = no limit)")
    max_processes = models.PositiveIntegerField(default=256, help_text="processes per command (0 = no limit)")
    max_open_files = models.PositiveIntegerField(default=1024, help_text="open files per process (0 = no limit)")
    max_file_mb = models.PositiveIntegerField(default=1024, help_text="largest file a command may write, MiB (0 = no limit)")
    image = models.CharField(max_length=300, blank=True, help_text="docker: image (empty: goclaw-sandbox:latest)")
    ro_binds = models.JSONField(default=list, blank=True,
                                help_text="extra host paths visible read-only at the same path, e.g. [\"/opt/tools\"]")
    is_default = models.BooleanField(default=False, help_text="used by agents that have no profile")
    selftest_at = models.DateTimeField(null=True, blank=True, editable=False)
    selftest_ok = models.BooleanField(null=True, editable=False)
    selftest_report = models.JSONField(default=dict, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["is_default"], condition=Q(is_default=True),
                                               name="sandbox_one_default_profile")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.backend == Backend.HOST and self.mode != SandboxMode.OFF:
            errors["backend"] = "the host backend does not isolate anything: it is only for profiles with mode off"
        if self.network == Network.OFF and self.network_local:
            errors["network_local"] = "local addresses can only be reachable with network on"
        binds = self.ro_binds
        if not isinstance(binds, list) or not all(isinstance(p, str) for p in binds):
            errors["ro_binds"] = "a JSON list of absolute paths"
        else:
            for path in binds:
                if not os.path.isabs(path) or "\x00" in path or ".." in path.split("/"):
                    errors["ro_binds"] = f"{path!r} is not an absolute path without '..'"
        if errors:
            raise ValidationError(errors)

    @property
    def sandboxed(self) -> bool:
        return self.mode != SandboxMode.OFF

    def applies_to(self, *, subagent_depth: int, session_key: str) -> bool:
        """Is a call with this depth and session isolated? (`non-main` spares the main session of a top agent.)"""
        if self.mode == SandboxMode.OFF:
            return False
        if self.mode == SandboxMode.NON_MAIN:
            main = session_key in ("", "main") or session_key.endswith(":main")
            return subagent_depth > 0 or not main
        return True

    def spec(self, *, sandboxed: bool = True) -> SandboxSpec:
        """The backend description for one run (`sandboxed=False`: the host, as the profile's mode allows)."""
        return SandboxSpec(
            backend=self.backend if sandboxed else Backend.HOST, profile=self.name,
            network=self.network == Network.ON, network_local=self.network_local, image=self.image,
            ro_binds=tuple(self.ro_binds or ()),
        )

    def limits(self, *, timeout_seconds: float, grace_seconds: float, max_output_bytes: int) -> ExecLimits:
        return ExecLimits(
            timeout_seconds=timeout_seconds, grace_seconds=grace_seconds, max_output_bytes=max_output_bytes,
            cpu_seconds=self.cpu_seconds, memory_bytes=self.memory_mb * MIB, max_processes=self.max_processes,
            max_open_files=self.max_open_files, max_file_bytes=self.max_file_mb * MIB,
        )
