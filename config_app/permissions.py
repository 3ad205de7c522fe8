"""Who may apply a configuration document: superusers, or staff holding config_app.apply_configuration. Any staff
member may export and see a dry run (the document holds no secret values)."""
from __future__ import annotations

APPLY_PERMISSION = "config_app.apply_configuration"


def may_apply(user) -> bool:
    return bool(user is not None and user.is_active and user.is_staff and user.has_perm(APPLY_PERMISSION))
