"""Context files in PostgreSQL (docs/context-files.md): agent-level and per-user files and their version history."""
import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0010_secure_cli_binaries")]

    operations = [
        migrations.CreateModel(
            name='AgentContextFile',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(choices=[('SOUL.md', 'SOUL.md'), ('IDENTITY.md', 'IDENTITY.md'), ('AGENTS.md', 'AGENTS.md'), ('TOOLS.md', 'TOOLS.md'), ('HEARTBEAT.md', 'HEARTBEAT.md'), ('USER.md', 'USER.md'), ('BOOTSTRAP.md', 'BOOTSTRAP.md')], max_length=32)),
                ('content', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='context_files', to='tools_app.agent')),
            ],
            options={
                'ordering': ['agent__key', 'name'],
                'constraints': [models.UniqueConstraint(fields=('agent', 'name'), name='agent_context_file_unique')],
            },
        ),
        migrations.CreateModel(
            name='ContextFileVersion',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('user_id', models.CharField(blank=True, default='', help_text='empty: the agent-level file', max_length=255)),
                ('name', models.CharField(choices=[('SOUL.md', 'SOUL.md'), ('IDENTITY.md', 'IDENTITY.md'), ('AGENTS.md', 'AGENTS.md'), ('TOOLS.md', 'TOOLS.md'), ('HEARTBEAT.md', 'HEARTBEAT.md'), ('USER.md', 'USER.md'), ('BOOTSTRAP.md', 'BOOTSTRAP.md')], max_length=32)),
                ('content', models.TextField(blank=True, default='', help_text="the file's text after this write")),
                ('deleted', models.BooleanField(default=False, help_text='this write removed the file')),
                ('previous_hash', models.CharField(blank=True, default='', help_text='SHA-256 of the text before this write (empty: there was no file)', max_length=64)),
                ('diff', models.TextField(blank=True, default='', help_text='unified diff from the previous text')),
                ('actor_kind', models.CharField(choices=[('agent', 'Agent (through a file tool)'), ('person', 'Person (admin or API)'), ('system', 'System')], max_length=16)),
                ('actor_name', models.CharField(blank=True, default='', max_length=150)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='context_file_versions', to='tools_app.agent')),
                ('restored_from', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='tools_app.contextfileversion')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
                'indexes': [models.Index(fields=['agent', 'user_id', 'name', '-created_at'], name='context_version_lookup')],
            },
        ),
        migrations.CreateModel(
            name='UserContextFile',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('user_id', models.CharField(max_length=255)),
                ('name', models.CharField(choices=[('SOUL.md', 'SOUL.md'), ('IDENTITY.md', 'IDENTITY.md'), ('AGENTS.md', 'AGENTS.md'), ('TOOLS.md', 'TOOLS.md'), ('HEARTBEAT.md', 'HEARTBEAT.md'), ('USER.md', 'USER.md'), ('BOOTSTRAP.md', 'BOOTSTRAP.md')], max_length=32)),
                ('content', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='user_context_files', to='tools_app.agent')),
            ],
            options={
                'ordering': ['agent__key', 'user_id', 'name'],
                'constraints': [models.UniqueConstraint(fields=('agent', 'user_id', 'name'), name='user_context_file_unique'), models.CheckConstraint(condition=models.Q(('user_id', ''), _negated=True), name='user_context_file_has_user')],
            },
        ),
    ]
