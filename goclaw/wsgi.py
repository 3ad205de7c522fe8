import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goclaw.settings")
django_application = get_wsgi_application()

from goclaw.fronts import with_fronts  # noqa: E402
from goclaw.warm import settle  # noqa: E402

application = with_fronts(django_application)  # what apps answer before Django's handling (goclaw.fronts)
settle()
