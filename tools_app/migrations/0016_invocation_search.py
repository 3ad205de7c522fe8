"""Audit search: links from an audit row to the decision it waited for, and the full-text index.

The index is built CONCURRENTLY (so the migration is not atomic): on a large audit table a plain CREATE INDEX would
block every tool call's INSERT for the whole build."""
import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.functions.comparison
import django.db.models.functions.text
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("tools_app", "0015_approval_notifications")]
    operations = [
        migrations.AddField(model_name="toolinvocation", name="approval_id", field=models.UUIDField(blank=True, null=True)),
        migrations.AddField(model_name="toolinvocation", name="pending_change_id",
                            field=models.UUIDField(blank=True, null=True)),
        AddIndexConcurrently(
            model_name="toolinvocation",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.search.SearchVector(
                    "tool_name",
                    django.db.models.functions.text.Left(
                        django.db.models.functions.comparison.Cast("arguments", models.TextField()), 8192),
                    "error", config="simple"),
                fastupdate=True, gin_pending_list_limit=256, name="invocation_search_gin"),
        ),
        AddIndexConcurrently(
            model_name="toolinvocation",
            index=models.Index(condition=models.Q(approval_id__isnull=False), fields=["approval_id"],
                               name="invocation_approval"),
        ),
        AddIndexConcurrently(
            model_name="toolinvocation",
            index=models.Index(condition=models.Q(pending_change_id__isnull=False), fields=["pending_change_id"],
                               name="invocation_pending_change"),
        ),
    ]
