"""Django's `migrate`, which on the embedded database also keeps the append-only audit tables locked: they belong
to their own role except while migrations run (goclaw.embedded_db.audit_tables_released, docs/audit-integrity.md).
With DATABASE_URL the operator arranges the roles (the docs show how)."""
from django.conf import settings
from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import connections


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " On the embedded database the audit tables are locked again afterwards."

    def handle(self, *args, **options):
        home = getattr(settings, "EMBEDDED_DB_HOME", None)
        db = connections[options["database"]].settings_dict
        if home is None or not str(db.get("HOST", "")).startswith("/"):
            return super().handle(*args, **options)
        from goclaw.embedded_db import audit_tables_released

        with audit_tables_released(home, db["HOST"], db["NAME"]):
            return super().handle(*args, **options)
