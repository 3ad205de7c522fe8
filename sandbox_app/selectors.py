"""Reads: which sandbox profile a caller gets."""
from __future__ import annotations

from sandbox_app.models import SandboxProfile

BUILTIN_DEFAULT_NAME = "built-in-default"


def sandbox_profile_builtin() -> SandboxProfile:
    """The model's defaults (bubblewrap, no network, 300 s, 1 GiB, 256 processes), unsaved: what applies when
    the database holds no default profile, so a deleted profile never means "no sandbox"."""
    return SandboxProfile(name=BUILTIN_DEFAULT_NAME, description="built-in defaults")


def sandbox_profile_get(profile_id: int | None) -> SandboxProfile:
    """The profile with this id, else the default profile, else the built-in defaults."""
    profile = None
    if profile_id is not None:
        profile = SandboxProfile.objects.filter(pk=profile_id).first()
    if profile is None:
        profile = SandboxProfile.objects.filter(is_default=True).first()
    return profile if profile is not None else sandbox_profile_builtin()
