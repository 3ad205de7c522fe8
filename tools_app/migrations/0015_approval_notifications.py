import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    """Approval notifications: webhook channels (signing secret sealed) and one delivery row per channel and request."""

    dependencies = [("tools_app", "0014_invocation_actor")]

    operations = [
        migrations.CreateModel(
            name="NotificationChannel",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100, unique=True)),
                ("kind", models.CharField(choices=[("generic", "Generic JSON webhook"), ("slack", "Slack-compatible (incoming webhook)")], default="generic", max_length=10)),
                ("url", models.URLField(help_text="where the POST goes (http or https); redirects are not followed", max_length=2000)),
                ("secret_sealed", models.TextField(blank=True, help_text="HMAC-SHA256 signing secret, sealed; empty: unsigned")),
                ("enabled", models.BooleanField(default=True)),
                ("tool_names", models.JSONField(blank=True, default=list, help_text='only requests for these tools, e.g. ["exec", "write_file"]; empty: every tool')),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("agents", models.ManyToManyField(blank=True, help_text="only requests of these agents; none selected: every agent", related_name="+", to="tools_app.agent")),
            ],
            options={"ordering": ["name"]},
        ),
        migrations.CreateModel(
            name="NotificationDelivery",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("status", models.CharField(choices=[("pending", "Pending"), ("sent", "Sent"), ("failed", "Failed"), ("skipped", "skipped (decided or expired before it was sent)")], default="pending", max_length=10)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_error", models.CharField(blank=True, help_text="scrubbed; never the URL or the secret", max_length=300)),
                ("last_status_code", models.PositiveIntegerField(blank=True, null=True)),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("approval", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="notification_deliveries", to="tools_app.approvalrequest")),
                ("channel", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="deliveries", to="tools_app.notificationchannel")),
            ],
            options={
                "ordering": ["-created_at"],
                "indexes": [models.Index(fields=["status", "next_attempt_at"], name="notification_delivery_due")],
                "constraints": [models.UniqueConstraint(fields=("channel", "approval"), name="notification_delivery_unique")],
            },
        ),
    ]
