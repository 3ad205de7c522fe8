"""Who may export and apply configuration documents, asked through the one authorization layer (goclaw.authz;
docs/permissions.md): exporting, and seeing a dry run's plan, needs config_app.export_configuration; applying also
config_app.apply_configuration. The document holds no secret values, but it is the whole governance configuration."""
from __future__ import annotations

from goclaw.authz import person_may

EXPORT_PERMISSION = "config_app.export_configuration"
APPLY_PERMISSION = "config_app.apply_configuration"


def may_export(user) -> bool:
    return person_may(user, EXPORT_PERMISSION)


def may_apply(user) -> bool:
    return person_may(user, EXPORT_PERMISSION, APPLY_PERMISSION)
