from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0010_secure_cli_binaries")]
    operations: list = []
