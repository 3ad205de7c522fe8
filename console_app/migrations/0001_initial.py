from django.db import migrations


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []
    operations: list = []
