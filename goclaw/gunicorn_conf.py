"""gunicorn settings for `manage.py up` (the WSGI side serves every HTTP route; daphne serves /ws/)."""
import os

workers = int(os.environ.get("GOCLAW_WEB_WORKERS", "2"))
threads = int(os.environ.get("GOCLAW_WEB_THREADS", "8"))
worker_class = "gthread" if threads > 1 else "sync"
timeout = int(os.environ.get("GOCLAW_WEB_TIMEOUT", "3700"))  # exec may run an hour; approvals long-poll
graceful_timeout = 10
keepalive = 5
backlog = 2048
accesslog = "-" if os.environ.get("GOCLAW_ACCESS_LOG") == "1" else None
errorlog = "-"
loglevel = os.environ.get("GOCLAW_LOG_LEVEL", "info")
