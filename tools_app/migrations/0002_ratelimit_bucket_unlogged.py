from django.db import migrations


class Migration(migrations.Migration):
    """Rate-limit buckets are ephemeral: UNLOGGED skips the WAL (no flush on every tool call). After a
    PostgreSQL crash the table is emptied, which only refills every bucket."""

    dependencies = [("tools_app", "0001_agents_tokens_invocations")]

    operations = [
        migrations.RunSQL("ALTER TABLE tools_app_ratelimitbucket SET UNLOGGED",
                          "ALTER TABLE tools_app_ratelimitbucket SET LOGGED"),
    ]
