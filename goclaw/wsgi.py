import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goclaw.settings")
application = get_wsgi_application()

from goclaw.warm import settle  # noqa: E402

settle()
