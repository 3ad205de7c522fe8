"""Who may export and apply configuration documents, asked through the one authorization layer (goclaw.authz;
docs/permissions.md): exporting, and seeing a dry run's plan, needs config_app.export_configuration; applying also
config_app.apply_configuration. The document holds no secret values, but it is the whole governance configuration."""
from __future__ import annotations

from goclaw.authz import person_may

EXPORT_PERMISSION = "config_app.export_configuration"
APPLY_PERMISSION = "config_app.apply_configuration"
# Writes that need a named permission on top of the model's, wherever they are made (API, admin, an applied document).
WRITE_PERMISSIONS = {"mcp_app.mcplauncher": "mcp_app.manage_mcplauncher",
                     "tools_app.secureclibinary": "tools_app.manage_credentialed_binaries"}


def may_export(user) -> bool:
    return person_may(user, EXPORT_PERMISSION)


def may_apply(user) -> bool:
    return person_may(user, EXPORT_PERMISSION, APPLY_PERMISSION)


def write_permissions(model, action: str) -> tuple[str, ...]:
    """What writing (`action`: add / change / delete) a row of `model` needs: the model permission, and for launchers
    and credentialed binaries their manage permission as well."""
    opts = model._meta
    extra = WRITE_PERMISSIONS.get(f"{opts.app_label}.{opts.model_name}")
    return (f"{opts.app_label}.{action}_{opts.model_name}",) + ((extra,) if extra else ())
