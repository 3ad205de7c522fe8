from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0014_invocation_actor")]
    operations: list = []
