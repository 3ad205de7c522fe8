"""Admin screens for OAuth clients and grants (docs/mcp-oauth.md): register a client (its secret shown once), rename
it or change its redirect URIs, disable it, revoke grants. Writes go through tools_app.oauth.services; people need
the model permissions (view / add / change / delete), and change for the disable and revoke actions."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from goclaw.admin import ReadOnlyAdmin
from goclaw.authz import admin_permission
from tools_app.admin.base import ServiceAdmin
from tools_app.models.oauth import OAuthClient, OAuthGrant
from tools_app.oauth.errors import OAuthError
from tools_app.oauth.services import client_delete, client_disable, client_fields_checked, client_register, client_update
from tools_app.oauth.services import grant_revoke

ADMIN_GRANT_TYPES = ["authorization_code", "refresh_token"]


class OAuthClientForm(forms.ModelForm):
    redirect_uris_text = forms.CharField(
        label="Redirect URIs", widget=forms.Textarea(attrs={"rows": 3}),
        help_text="one per line: https://…, or http:// on 127.0.0.1, localhost or [::1] (any port there)")

    class Meta:
        model = OAuthClient
        fields = ["name", "auth_method"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["redirect_uris_text"].initial = "\n".join(self.instance.redirect_uris)

    def clean(self):
        cleaned = super().clean()
        uris = [line.strip() for line in (cleaned.get("redirect_uris_text") or "").splitlines() if line.strip()]
        method = cleaned.get("auth_method") or self.instance.auth_method
        try:
            client_fields_checked({"client_name": cleaned.get("name") or "", "redirect_uris": uris,
                                   "token_endpoint_auth_method": method, "grant_types": ADMIN_GRANT_TYPES})
        except OAuthError as exc:
            raise forms.ValidationError(exc.message) from None
        cleaned["redirect_uris"] = uris
        return cleaned


@admin.register(OAuthClient)
class OAuthClientAdmin(ServiceAdmin):
    form = OAuthClientForm
    list_display = ["name", "client_id", "answers_to", "auth_method", "dynamic", "enabled", "created_at", "last_used_at"]
    list_filter = ["enabled", "dynamic", "auth_method"]
    search_fields = ["name", "client_id"]
    actions = ["disable"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["name", "redirect_uris_text", "auth_method"]
        return ["name", "client_id", "redirect_uris_text", "auth_method", "dynamic", "enabled", "grant_types", "scope",
                "created_at", "created_by", "last_used_at"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["client_id", "auth_method", "dynamic", "enabled", "grant_types", "scope", "created_at", "created_by",
                "last_used_at"]

    @admin.display(description="answers go to")
    def answers_to(self, obj: OAuthClient) -> str:
        return ", ".join(obj.redirect_hosts)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            client_update(client=obj, name=data["name"], redirect_uris=data["redirect_uris"], actor=request.user)
            return
        client, secret = client_register(data={"client_name": data["name"], "redirect_uris": data["redirect_uris"],
                                               "token_endpoint_auth_method": data["auth_method"],
                                               "grant_types": ADMIN_GRANT_TYPES}, dynamic=False, actor=request.user)
        obj.pk, obj._state.adding, obj.client_id = client.pk, False, client.client_id
        obj.oauth_secret_once = secret

    def response_add(self, request, obj, post_url_continue=None):
        secret = getattr(obj, "oauth_secret_once", None)
        if secret:
            return TemplateResponse(request, "oauth/client_secret.html", {
                **self.admin_site.each_context(request), "title": "OAuth client registered",
                "client": OAuthClient.objects.get(pk=obj.pk), "secret": secret})
        return super().response_add(request, obj, post_url_continue)

    def delete_with_service(self, request, queryset):
        return client_delete(queryset=queryset, actor=request.user)

    def get_deleted_objects(self, objs, request):
        """A client's grants go with it (revoked first, by client_delete): grants are never deleted on their own, so
        their admin allows no delete, which must not forbid deleting the client."""
        deleted, counts, missing, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, missing - {str(OAuthGrant._meta.verbose_name)}, protected

    has_disable_permission = admin_permission("tools_app.change_oauthclient")

    @admin.action(description="Disable and revoke their grants", permissions=["disable"])
    def disable(self, request, queryset):
        revoked = sum(client_disable(client=client, actor=request.user) for client in queryset)
        self.message_user(request, f"Disabled {queryset.count()} client(s); revoked {revoked} grant(s).", messages.SUCCESS)


@admin.register(OAuthGrant)
class OAuthGrantAdmin(ReadOnlyAdmin):
    """Who let which client act as which agent. Revoking one revokes its access tokens (agent tokens) at once."""

    list_display = ["client", "agent", "person", "scope", "created_at", "refreshed_at", "revoked", "revoked_reason"]
    list_filter = ["revoked", "agent"]
    search_fields = ["client__name", "client__client_id", "agent__key", "person__username"]
    list_select_related = ["client", "agent", "person"]
    fields = ["client", "agent", "person", "scope", "resource", "access_token", "created_at", "refreshed_at",
              "revoked", "revoked_at", "revoked_reason"]
    actions = ["revoke"]

    has_revoke_permission = admin_permission("tools_app.change_oauthgrant")

    @admin.action(description="Revoke selected grants (their tokens stop working)", permissions=["revoke"])
    def revoke(self, request, queryset):
        revoked = sum(grant_revoke(grant=grant, reason=f"revoked by {request.user.get_username()}", actor=request.user)
                      for grant in queryset.select_related("client", "agent").filter(revoked=False))
        self.message_user(request, f"Revoked {revoked} grant(s).", messages.SUCCESS)
