
import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='SandboxProfile',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.SlugField(max_length=64, unique=True)),
                ('description', models.CharField(blank=True, max_length=300)),
                ('backend', models.CharField(choices=[('auto', 'auto (bubblewrap, else docker; refused when neither works)'), ('bubblewrap', 'bubblewrap'), ('docker', 'docker'), ('host', 'host (no isolation: only with the sandbox off)')], default='bubblewrap', max_length=12)),
                ('mode', models.CharField(choices=[('all', 'all: every process is sandboxed'), ('non-main', 'non-main: only subagents and non-main sessions'), ('off', 'off: processes run on the host')], default='all', help_text="non-main trusts the caller's session key and depth: use it only for agents you trust", max_length=10)),
                ('network', models.CharField(choices=[('off', 'off: no network at all'), ('on', 'on')], default='off', max_length=3)),
                ('network_local', models.BooleanField(default=False, help_text='with network on: loopback and private address ranges are reachable (goclaw itself too)')),
                ('timeout_seconds', models.PositiveIntegerField(default=300, help_text='default and maximum wall-clock time of one command', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(3600)])),
                ('cpu_seconds', models.PositiveIntegerField(default=300, help_text='CPU time per command (0 = no limit)')),
                ('memory_mb', models.PositiveIntegerField(default=1024, help_text='memory per command in MiB (0 = no limit)')),
                ('max_processes', models.PositiveIntegerField(default=256, help_text='processes per command (0 = no limit)')),
                ('max_open_files', models.PositiveIntegerField(default=1024, help_text='open files per process (0 = no limit)')),
                ('max_file_mb', models.PositiveIntegerField(default=1024, help_text='largest file a command may write, MiB (0 = no limit)')),
                ('image', models.CharField(blank=True, help_text='docker: image (empty: goclaw-sandbox:latest)', max_length=300)),
                ('ro_binds', models.JSONField(blank=True, default=list, help_text='extra host paths visible read-only at the same path, e.g. ["/opt/tools"]')),
                ('is_default', models.BooleanField(default=False, help_text='used by agents that have no profile')),
                ('selftest_at', models.DateTimeField(blank=True, editable=False, null=True)),
                ('selftest_ok', models.BooleanField(editable=False, null=True)),
                ('selftest_report', models.JSONField(blank=True, default=dict, editable=False)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['name'],
                'constraints': [models.UniqueConstraint(condition=models.Q(('is_default', True)), fields=('is_default',), name='sandbox_one_default_profile')],
            },
        ),
    ]


def create_default_profile(apps, schema_editor):
    """Every agent without a profile runs its processes in bubblewrap with no network."""
    SandboxProfile = apps.get_model("sandbox_app", "SandboxProfile")
    if not SandboxProfile.objects.filter(is_default=True).exists():
        SandboxProfile.objects.update_or_create(
            name="default",
            defaults={"description": "bubblewrap, no network, 300 s, 1 GiB, 256 processes", "backend": "bubblewrap",
                      "mode": "all", "network": "off", "is_default": True})


Migration.operations.append(migrations.RunPython(create_default_profile, migrations.RunPython.noop))
