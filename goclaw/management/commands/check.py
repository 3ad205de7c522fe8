"""`manage.py check` with the admin's modules loaded first: settings install SimpleAdminConfig (the admin loads with
the URLconf, goclaw/urls.py), and Django's checks run in no set order, so the admin's own checks would otherwise
see an empty site whenever they ran before the URL checks."""
from django.contrib import admin
from django.core.management.commands.check import Command as DjangoCheck


class Command(DjangoCheck):
    def handle(self, *app_labels, **options):
        admin.autodiscover()
        return super().handle(*app_labels, **options)
