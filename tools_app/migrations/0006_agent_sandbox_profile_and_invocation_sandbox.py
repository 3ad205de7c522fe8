
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sandbox_app', '0001_sandbox_profiles'),
        ('tools_app', '0005_approval_call_context'),
    ]

    operations = [
        migrations.AddField(
            model_name='agent',
            name='sandbox_profile',
            field=models.ForeignKey(blank=True, help_text='how the processes this agent starts are isolated (empty: the default profile)', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='agents', to='sandbox_app.sandboxprofile'),
        ),
        migrations.AddField(
            model_name='toolinvocation',
            name='sandbox_backend',
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.AddField(
            model_name='toolinvocation',
            name='sandbox_profile',
            field=models.CharField(blank=True, max_length=64),
        ),
    ]
