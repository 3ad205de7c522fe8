"""Admin for approval notifications: webhook channels (signing secret write-only, a "send test notification" action)
and their deliveries (read-only, failures with their scrubbed error, a retry action). Writes go through
tools_app.services.notifications."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from tools_app.admin.base import ServiceAdmin
from tools_app.models.notifications import DeliveryStatus, NotificationChannel, NotificationDelivery
from tools_app.services import notifications as svc


class NotificationChannelForm(forms.ModelForm):
    """The channel plus its write-only signing secret: never rendered back, not even after a form error."""

    secret = forms.CharField(required=False, label="Set signing secret", strip=False,
                             widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
                             help_text="Write-only: sealed at rest and never shown again. Receivers check the "
                                       f"{svc.SIGNATURE_HEADER} header (sha256=HMAC-SHA256 of the body). "
                                       "Empty: keep the current one.")
    clear_secret = forms.BooleanField(required=False, label="Remove the signing secret")
    url = forms.URLField(max_length=2000, assume_scheme="https",
                         help_text="where the POST goes (http or https); redirects are not followed. Loopback, "
                                   "private, link-local and CGNAT addresses are refused unless private networks are "
                                   "allowed below; cloud metadata addresses always")

    class Meta:
        model = NotificationChannel
        fields = ["name", "kind", "url", "enabled", "allow_private_network", "agents", "tool_names"]

    def clean_url(self):
        url = self.cleaned_data["url"]
        if not url.lower().startswith(("http://", "https://")):
            raise forms.ValidationError("the webhook URL must start with http:// or https://")
        return url

    def clean(self):
        cleaned = super().clean()
        url = cleaned.get("url")
        if url and (problem := svc.channel_url_problem(
                url, allow_private_network=bool(cleaned.get("allow_private_network")))):
            self.add_error("url", f"refused: {problem}")
        return cleaned

    def clean_tool_names(self):
        names = self.cleaned_data.get("tool_names") or []
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise forms.ValidationError('a JSON list of tool names, e.g. ["exec"]')
        return names


@admin.register(NotificationChannel)
class NotificationChannelAdmin(ServiceAdmin):
    form = NotificationChannelForm
    list_display = ["name", "kind", "destination", "enabled", "secret_status", "covers", "failed_deliveries"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name"]
    filter_horizontal = ["agents"]
    readonly_fields = ["secret_status", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "kind", "url", "enabled", "allow_private_network"]}),
        ("Which requests", {"fields": ["agents", "tool_names"]}),
        ("Signing secret (write-only)", {"fields": ["secret_status", "secret", "clear_secret"]}),
        ("Record", {"fields": ["created_at", "updated_at"]}),
    ]
    actions = ["send_test"]

    @admin.display(description="URL")
    def destination(self, obj: NotificationChannel) -> str:
        return obj.url_origin  # the path of a webhook URL is often its credential

    @admin.display(description="signing secret")
    def secret_status(self, obj: NotificationChannel) -> str:
        return "set" if obj.secret_sealed else "not set (unsigned)"

    @admin.display(description="covers")
    def covers(self, obj: NotificationChannel) -> str:
        agents = ", ".join(a.key for a in obj.agents.all()) or "every agent"
        return f"{agents}; {', '.join(obj.tool_names) if obj.tool_names else 'every tool'}"

    @admin.display(description="failed deliveries")
    def failed_deliveries(self, obj: NotificationChannel):
        count = obj.deliveries.filter(status=DeliveryStatus.FAILED).count()
        if not count:
            return "0"
        url = reverse("admin:tools_app_notificationdelivery_changelist")
        return format_html('<a href="{}?channel__id__exact={}&amp;status__exact=failed">{}</a>', url, obj.pk, count)

    def save_model(self, request, obj, form, change):
        svc.notification_channel_save(actor=request.user, channel=obj, secret=form.cleaned_data.get("secret") or None,
                                      clear_secret=bool(form.cleaned_data.get("clear_secret")))

    def delete_with_service(self, request, queryset):
        return svc.notification_channel_delete(actor=request.user, channels=queryset)

    @admin.action(description="Send a test notification", permissions=["change"])
    def send_test(self, request, queryset):
        for channel in queryset:
            result = svc.notification_channel_test(channel=channel)
            if result.ok:
                self.message_user(request, f"{channel.name}: test notification accepted (HTTP {result.status_code})",
                                  messages.SUCCESS)
            else:
                self.message_user(request, f"{channel.name}: test notification failed: {result.error}", messages.ERROR)


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "channel", "request", "status", "attempts", "last_status_code", "last_error",
                    "next_attempt_at", "sent_at"]
    list_filter = ["status", "channel", "created_at"]
    list_select_related = ["channel", "approval", "approval__agent"]
    search_fields = ["channel__name", "approval__agent__key", "approval__tool_name", "last_error"]
    readonly_fields = [f.name for f in NotificationDelivery._meta.fields] + ["request"]
    actions = ["retry"]

    @admin.display(description="approval request")
    def request(self, obj: NotificationDelivery):
        url = reverse("admin:tools_app_approvalrequest_change", args=[obj.approval_id])
        return format_html('<a href="{}">{} {}</a>', url, obj.approval.agent.key, obj.approval.tool_name)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        # the list's retry action needs change permission; a single delivery is never edited
        return obj is None and super().has_change_permission(request)

    @admin.action(description="Retry selected failed deliveries", permissions=["change"])
    def retry(self, request, queryset):
        count = svc.notification_deliveries_retry(actor=request.user, deliveries=queryset)
        self.message_user(request, f"{count} deliveries queued to be sent again.", messages.SUCCESS)
