"""Skills agents publish, search and use (docs/skills.md)."""
from __future__ import annotations

import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0012_memory")]
    operations: list = [
        migrations.CreateModel(
            name='Skill',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=100)),
                ('slug', models.SlugField(help_text='derived from the name when first published', max_length=64)),
                ('description', models.TextField()),
                ('content', models.TextField(help_text='the SKILL.md body after its front matter')),
                ('files', models.JSONField(blank=True, default=dict, help_text="the skill directory's other text files: relative path → text")),
                ('tags', models.JSONField(blank=True, default=list)),
                ('version', models.PositiveIntegerField(default=1, help_text='incremented on every re-publish or edit')),
                ('enabled', models.BooleanField(default=True)),
                ('source_path', models.CharField(blank=True, help_text='the workspace directory it was last published from', max_length=1024)),
                ('published_by', models.CharField(blank=True, help_text='"agent:<key>" or "staff:<username>"', max_length=255)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('agent', models.ForeignKey(blank=True, help_text='empty: every agent sees this skill', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='skills', to='tools_app.agent')),
            ],
            options={
                'ordering': ['slug', 'created_at'],
            },
        ),
        migrations.CreateModel(
            name='SkillUse',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('agent_key', models.CharField(max_length=64)),
                ('user_id', models.CharField(blank=True, max_length=255)),
                ('session_key', models.CharField(blank=True, max_length=255)),
                ('at', models.DateTimeField(default=django.utils.timezone.now)),
                ('skill', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='uses', to='tools_app.skill')),
            ],
            options={
                'ordering': ['-at'],
            },
        ),
        migrations.AddConstraint(
            model_name='skill',
            constraint=models.UniqueConstraint(condition=models.Q(('agent__isnull', True)), fields=('slug',), name='skill_global_slug'),
        ),
        migrations.AddConstraint(
            model_name='skill',
            constraint=models.UniqueConstraint(fields=('slug', 'agent'), name='skill_agent_slug'),
        ),
        migrations.AddConstraint(
            model_name='skill',
            constraint=models.CheckConstraint(condition=models.Q(('version__gte', 1)), name='skill_version_positive'),
        ),
        migrations.AddIndex(
            model_name='skilluse',
            index=models.Index(fields=['skill', '-at'], name='skill_use_recent'),
        ),
    ]
