from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0012_memory")]
    operations: list = []
