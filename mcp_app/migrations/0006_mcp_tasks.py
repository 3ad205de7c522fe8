# MCP tasks (the io.modelcontextprotocol/tasks extension) and the extensions a session's client declared.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mcp_app', '0005_people_permissions'),
        ('tools_app', '0020_chained_audit_rows'),
    ]

    operations = [
        migrations.AddField(
            model_name='mcpserversession',
            name='extensions',
            field=models.JSONField(blank=True, default=list, help_text='the MCP extensions the client declared at initialize (identifiers)'),
        ),
        migrations.CreateModel(
            name='MCPTask',
            fields=[
                ('id', models.UUIDField(editable=False, primary_key=True, serialize=False)),
                ('tool_name', models.CharField(max_length=128)),
                ('status', models.CharField(choices=[('working', 'waiting for a person'), ('running', 'approved, running'), ('completed', 'Completed'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='working', max_length=10)),
                ('status_message', models.CharField(blank=True, max_length=500)),
                ('sealed_arguments', models.TextField(blank=True, help_text='the exact call; erased once it ran or can no longer run')),
                ('sealed_result', models.TextField(blank=True, help_text='completed: the tools/call result')),
                ('error', models.JSONField(blank=True, help_text='failed: the JSON-RPC error ({code, message})', null=True)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField(help_text='kept until then (ttlMs), then purged')),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tools_app.agent')),
                ('approval', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tools_app.approvalrequest')),
            ],
            options={
                'verbose_name': 'MCP task',
                'ordering': ['-created_at'],
                'indexes': [models.Index(fields=['expires_at'], name='mcp_task_expiry'), models.Index(condition=models.Q(('status', 'running')), fields=['updated_at'], name='mcp_task_running')],
            },
        ),
    ]
