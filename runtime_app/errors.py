"""The runtime's ApplicationError subclasses: stable codes the API renders as {"error": {"code", …}}, the admin shows as
a message and the agent loop records on the session."""
from __future__ import annotations

from goclaw.errors import ApplicationError, Conflict, NotFound, ValidationError


class ProviderInvalid(ValidationError):
    """A provider definition that may not be saved; `details` maps each field (as the API and the document name it)
    to its problem."""

    code = "provider_invalid"


class ProviderNotFound(NotFound):
    code = "provider_not_found"


class ProviderExists(Conflict):
    code = "provider_exists"


class ProviderInUse(Conflict):
    """Agents still name the provider (their `provider` field): renaming or deleting it would strand them."""

    code = "provider_in_use"


class ProviderKeyUnreadable(ApplicationError):
    """The stored API key does not open (another GOCLAW_ENCRYPTION_KEY, or a tampered value): set it again."""

    code = "provider_key_unreadable"
    http_status = 409
