from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0011_context_files")]
    operations: list = []
