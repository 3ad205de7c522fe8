"""Admin for handoff routes (list, clear), agent links (edited through the link services) and delegations
(read-only, with a cancel action). Writes go through teams_app.services.handoff / delegation."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from goclaw.authz import admin_permission
from goclaw.errors import ApplicationError
from teams_app.actors import Actor
from teams_app.choices import DelegationStatus
from teams_app.models import AgentLink, Delegation, HandoffRoute
from teams_app.services import delegation as delegation_svc
from teams_app.services import handoff as handoff_svc
from tools_app.admin.base import ReadOnlyAdmin, ServiceAdmin

LINK_FIELDS = ["direction", "max_concurrent", "allow_user_ids", "deny_user_ids", "description", "enabled"]


@admin.register(HandoffRoute)
class HandoffRouteAdmin(admin.ModelAdmin):
    list_display = ["channel", "chat_id", "target", "source", "reason", "created_at", "expires_at", "created_by"]
    list_filter = ["channel", "target"]
    search_fields = ["channel", "chat_id", "target__key", "source__key"]
    list_select_related = ["target", "source"]
    actions = ["clear_selected"]

    def has_add_permission(self, request):
        return False  # agents hand off through the `handoff` tool

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # the clear action tells the agents; a bare delete would not

    has_clear_permission = admin_permission("teams_app.delete_handoffroute")  # clearing removes the route

    @admin.action(description="Clear selected handoffs (the conversations go back to their usual agent)",
                  permissions=["clear"])
    def clear_selected(self, request, queryset):
        actor = Actor.for_user(request.user)
        cleared = sum(handoff_svc.handoff_clear_route(actor=actor, route=route) for route in queryset)
        messages.success(request, f"{cleared} handoff{'s' if cleared != 1 else ''} cleared.")


class AgentLinkForm(forms.ModelForm):
    """Runs the link service's checks in clean(), so a bad user list is a form error rather than a failed save."""

    class Meta:
        model = AgentLink
        fields = ["source", "target", *LINK_FIELDS]

    def clean(self):
        cleaned = super().clean()
        try:
            delegation_svc.agent_link_fields_clean({name: cleaned[name] for name in LINK_FIELDS if name in cleaned})
        except ApplicationError as exc:
            self.add_error(None, exc.message)
        source, target = cleaned.get("source"), cleaned.get("target")
        if source is not None and source == target:
            self.add_error("target", "an agent cannot be linked to itself")
        return cleaned


@admin.register(AgentLink)
class AgentLinkAdmin(ServiceAdmin):
    form = AgentLinkForm
    list_display = ["source", "target", "direction", "max_concurrent", "enabled", "description", "created_at"]
    list_filter = ["enabled", "direction"]
    search_fields = ["source__key", "target__key", "description"]
    list_select_related = ["source", "target"]

    def get_readonly_fields(self, request, obj=None):
        return ["source", "target"] if obj is not None else []  # a new pair is a new link

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in LINK_FIELDS if name in form.cleaned_data}
        actor = Actor.for_user(request.user)
        if change:
            link = delegation_svc.agent_link_update(actor=actor, link=obj, **fields)
        else:
            link = delegation_svc.agent_link_create(actor=actor, source=obj.source, target=obj.target, **fields)
        obj.pk = link.pk
        obj._state.adding = False

    def delete_with_service(self, request, queryset):
        for link in queryset:
            delegation_svc.agent_link_delete(actor=Actor.for_user(request.user), link=link)


@admin.register(Delegation)
class DelegationAdmin(ReadOnlyAdmin):
    list_display = ["id", "source", "target", "status", "task", "created_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["source__key", "target__key", "request"]
    list_select_related = ["source", "target", "task"]
    readonly_fields = ["source", "target", "link", "task", "request", "status", "result", "user_id", "session_key",
                       "created_at", "finished_at"]
    actions = ["cancel_selected"]

    has_cancel_permission = admin_permission("teams_app.change_delegation")

    @admin.action(description="Cancel selected running delegations (their board tasks too)", permissions=["cancel"])
    def cancel_selected(self, request, queryset):
        actor, done = Actor.for_user(request.user), 0
        for delegation in queryset.filter(status=DelegationStatus.RUNNING).select_related("source", "target", "task"):
            try:
                delegation_svc.delegation_cancel(actor=actor, delegation=delegation,
                                                 reason=f"cancelled by {request.user.get_username()}")
                done += 1
            except ApplicationError as exc:
                messages.warning(request, f"D-{delegation.pk}: {exc.message}")
        messages.success(request, f"{done} delegation{'s' if done != 1 else ''} cancelled.")
