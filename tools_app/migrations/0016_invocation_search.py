from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0015_approval_notifications")]
    operations: list = []
