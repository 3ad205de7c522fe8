"""Any change that can alter a catalog or a tool permission bumps the shared policy generation (see tools_app.policy)."""
from django.db.models.signals import post_delete, post_save

from tools_app.models import Agent, ToolPermission, ToolPolicy, ToolProfile


def _changed(sender, **kwargs):
    if kwargs.get("raw"):
        return
    from tools_app.policy import policy_changed

    policy_changed()


def connect() -> None:
    for model in (Agent, ToolPermission, ToolPolicy, ToolProfile):
        post_save.connect(_changed, sender=model, dispatch_uid=f"policy-gen-save-{model.__name__}")
        post_delete.connect(_changed, sender=model, dispatch_uid=f"policy-gen-delete-{model.__name__}")
