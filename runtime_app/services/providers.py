"""LLM providers (the endpoints hosted agents run on): create, change and delete them, seal their API keys to the row
(goclaw.crypto; write-only everywhere) and open a key only to build the client's ProviderConfig. Every write is
recorded as an AuditEvent, never with the key. The admin, the staff API and configuration as code all write here."""
from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction

from goclaw import crypto
from runtime_app.choices import ProviderKind
from runtime_app.errors import ProviderExists, ProviderInUse, ProviderInvalid, ProviderKeyUnreadable, ProviderNotFound
from runtime_app.models import LLMProvider
from runtime_app.providers.base import ProviderConfig
from tools_app.models import Agent
from tools_app.services.audit import audit_actor, audit_event_record

logger = logging.getLogger("goclaw.runtime")

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
# A key travels in a request header: printable ASCII only (no CR/LF to smuggle a header), no surrounding spaces.
API_KEY_RE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?\Z")
MAX_API_KEY_CHARS = 8192
MIN_TIMEOUT, MAX_TIMEOUT = 1, 600
MIN_CONCURRENT, MAX_CONCURRENT = 1, 256
# The fields people set, by the model's name; the API and the document call timeout_seconds `timeout`.
EDITABLE = ("name", "kind", "base_url", "model", "timeout_seconds", "max_concurrent", "allow_private_network",
            "enabled")
PUBLIC_NAMES = {"timeout_seconds": "timeout"}
PRIVATE_NETWORK_HINT = "allow private networks on this provider to reach a local model server"


def api_key_seal_context(pk: Any) -> str:
    """The associated data a provider's API key is sealed with: it binds the ciphertext to this row and field."""
    return f"runtime_app.LLMProvider:{pk}:api_key"


# --- checks -----------------------------------------------------------------------------------------------------------
def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def base_url_problem(url: Any, *, allow_private_network: bool) -> str | None:
    """Early feedback on a base URL: http(s), a host, no credentials in it, and no loopback / private / metadata
    address (in any notation) unless private networks are allowed (metadata never). goclaw.outbound checks the
    address actually dialled again on every request."""
    from goclaw import outbound  # the HTTP client loads on the first request, not at startup

    if not isinstance(url, str) or not url:
        return "required: the endpoint's base URL, e.g. https://api.openai.com/v1"
    if len(url) > 500:
        return "at most 500 characters"
    if not url.lower().startswith(("http://", "https://")):
        return "the base URL must start with http:// or https://"
    if problem := outbound.url_problem(url, target=outbound.Target(allow_private=bool(allow_private_network),
                                                                   hint=PRIVATE_NETWORK_HINT)):
        return problem
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return "no credentials in the URL: give the key as the API key (it is sealed; a URL is shown to people)"
    return None


def api_key_problem(api_key: Any) -> str | None:
    if not isinstance(api_key, str):
        return "a string"
    if len(api_key) > MAX_API_KEY_CHARS:
        return f"at most {MAX_API_KEY_CHARS} characters"
    if not API_KEY_RE.match(api_key):
        return "printable ASCII without surrounding spaces, line breaks or control characters"
    return None


def provider_problems(provider: LLMProvider, *, api_key: str | None = None,
                      clear_api_key: bool = False) -> dict[str, str]:
    """What is wrong with a provider's settings (and a new key), per field as the API and the document name it
    (`timeout`, not `timeout_seconds`); empty when it may be saved."""
    problems: dict[str, str] = {}
    name = provider.name
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems["name"] = "1-64 letters, digits, '-' or '_', starting with a letter or digit"
    if provider.kind not in ProviderKind.values:
        problems["kind"] = f"one of {', '.join(ProviderKind.values)}"
    for flag in ("allow_private_network", "enabled"):
        if not isinstance(getattr(provider, flag), bool):
            problems[flag] = "true or false"
    if problem := base_url_problem(provider.base_url, allow_private_network=provider.allow_private_network is True):
        problems["base_url"] = problem
    model = provider.model
    if not isinstance(model, str) or len(model) > 128 or (model and not model.isprintable()):
        problems["model"] = "a model name of at most 128 printable characters (empty: each agent names its own)"
    timeout = provider.timeout_seconds
    if not _number(timeout) or not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:
        problems["timeout"] = f"seconds per model request, from {MIN_TIMEOUT} to {MAX_TIMEOUT}"
    concurrent = provider.max_concurrent
    if not _number(concurrent) or not isinstance(concurrent, int) or not MIN_CONCURRENT <= concurrent <= MAX_CONCURRENT:
        problems["max_concurrent"] = f"an integer from {MIN_CONCURRENT} to {MAX_CONCURRENT}"
    if api_key is not None and api_key != "" and (problem := api_key_problem(api_key)):
        problems["api_key"] = problem
    if api_key and clear_api_key:
        problems["clear_api_key"] = "give a new API key or clear it, not both"
    return problems


def agents_naming(name: str) -> list[str]:
    """The keys of the agents whose `provider` names this provider (they run on it)."""
    return list(Agent.objects.filter(provider=name).order_by("key").values_list("key", flat=True))


def _in_use(name: str, doing: str) -> ProviderInUse | None:
    keys = agents_naming(name)
    if not keys:
        return None
    shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
    return ProviderInUse(f"cannot {doing} provider {name}: agents run on it ({shown}); point them at another "
                         "provider first", details={"name": f"agents run on it: {shown}"})


def provider_conflict(provider: LLMProvider, *, old_name: str | None = None) -> ProviderExists | ProviderInUse | None:
    """The conflict saving `provider` would cause, or None: its name is another provider's, or it is a rename of a
    provider agents still name (`old_name`: its stored name)."""
    if LLMProvider.objects.filter(name=provider.name).exclude(pk=provider.pk).exists():
        return ProviderExists(f"a provider named {provider.name} already exists",
                              details={"name": "another provider has this name"})
    if old_name is not None and old_name != provider.name:
        return _in_use(old_name, "rename")
    return None


# --- writes -----------------------------------------------------------------------------------------------------------
def _invalid(problems: dict[str, str]) -> ProviderInvalid:
    field, message = next(iter(problems.items()))
    return ProviderInvalid(f"{field}: {message}", details=problems)


def _full_clean(provider: LLMProvider) -> None:
    """The model's own checks (lengths, choices) on top of provider_problems. base_url is ours alone: Django's
    URLValidator refuses single-label hosts such as http://ollama:11434/v1, a usual local model server."""
    try:
        provider.full_clean(exclude=["api_key_sealed", "base_url"], validate_unique=False)
    except DjangoValidationError as exc:
        raise _invalid({PUBLIC_NAMES.get(f, f): "; ".join(m) for f, m in exc.message_dict.items()}) from None


def _seal(provider: LLMProvider, api_key: str) -> str:
    return crypto.encrypt_bytes(api_key.encode(), associated_data=api_key_seal_context(provider.pk))


def _audited(provider: LLMProvider) -> dict[str, Any]:
    return {"name": provider.name, "kind": provider.kind, "base_url": provider.base_url, "model": provider.model,
            "timeout": provider.timeout_seconds, "max_concurrent": provider.max_concurrent,
            "allow_private_network": provider.allow_private_network, "enabled": provider.enabled}


@transaction.atomic
def provider_save(*, actor, provider: LLMProvider, api_key: str | None = None,
                  clear_api_key: bool = False) -> LLMProvider:
    """Create or update a provider, checked whole (name, kind, base URL and its outbound rule, timeout 1-600 s,
    1-256 concurrent requests). `api_key` (write-only) replaces the key, sealed to the row; `clear_api_key` removes
    it; without either the key stays. A rename is refused while agents name the provider. Audited, without the key."""
    if problems := provider_problems(provider, api_key=api_key, clear_api_key=clear_api_key):
        raise _invalid(problems)
    before = LLMProvider.objects.select_for_update().filter(pk=provider.pk).first() if provider.pk else None
    if conflict := provider_conflict(provider, old_name=before.name if before else None):
        raise conflict
    _full_clean(provider)
    try:
        with transaction.atomic():
            if before is None:
                provider.api_key_sealed = ""  # only a key given here is ever sealed to this row
                provider.save()
            else:  # the sealed key is written only below, never from a possibly stale instance
                provider.save(update_fields=[*EDITABLE, "updated_at"])
    except IntegrityError:
        raise ProviderExists(f"a provider named {provider.name} already exists",
                             details={"name": "another provider has this name"}) from None
    key_change = "cleared" if clear_api_key and (before and before.api_key_sealed) else "set" if api_key else ""
    if api_key or clear_api_key:
        provider.api_key_sealed = _seal(provider, api_key) if api_key else ""
        provider.save(update_fields=["api_key_sealed"])
    elif before is not None:
        provider.api_key_sealed = before.api_key_sealed
    changed = sorted(PUBLIC_NAMES.get(f, f) for f in EDITABLE
                     if before is not None and getattr(before, f) != getattr(provider, f))
    if before is None or changed or key_change:
        details = {**_audited(provider), "changed": changed, "key_change": key_change or "none"}
        if before is not None and before.name != provider.name:
            details["old_name"] = before.name
        audit_event_record(kind="llm_provider.created" if before is None else "llm_provider.updated",
                           actor=audit_actor(actor), target=provider.name, details=details)
        logger.info("LLM provider %s %s by %s", provider.name, "created" if before is None else "updated",
                    audit_actor(actor))
    return provider


@transaction.atomic
def provider_delete(*, actor, provider: LLMProvider) -> None:
    """Delete a provider (its sealed key with it); refused while agents name it. Recorded as an AuditEvent."""
    provider = LLMProvider.objects.select_for_update().filter(pk=provider.pk).first() or provider
    if conflict := _in_use(provider.name, "delete"):
        raise conflict
    details = _audited(provider)
    provider.delete()
    audit_event_record(kind="llm_provider.deleted", actor=audit_actor(actor), target=details["name"], details=details)
    logger.info("LLM provider %s deleted by %s", details["name"], audit_actor(actor))


# --- reads ------------------------------------------------------------------------------------------------------------
def provider_get(name: str) -> LLMProvider:
    """The provider named `name`, else ProviderNotFound (a malformed name is simply not found)."""
    provider = LLMProvider.objects.filter(name=name).first() if isinstance(name, str) and NAME_RE.match(name) else None
    if provider is None:
        raise ProviderNotFound(f"no LLM provider named {str(name)[:64]!r}")
    return provider


def provider_api_key(provider: LLMProvider) -> str:
    """The provider's API key in clear ("" when none is set), for the protocol client and configuration as code's
    comparisons only. crypto.DecryptionError when it does not open."""
    if not provider.api_key_sealed:
        return ""
    try:
        return crypto.decrypt_bytes(provider.api_key_sealed, associated_data=api_key_seal_context(provider.pk)).decode()
    except UnicodeDecodeError:
        raise crypto.DecryptionError("the sealed API key is not text") from None


def provider_config(provider: LLMProvider) -> ProviderConfig:
    """What a protocol client needs of `provider`, the API key opened. ProviderKeyUnreadable when the key does not
    open (another encryption key, or a tampered value): people must set it again."""
    try:
        api_key = provider_api_key(provider)
    except crypto.DecryptionError:
        raise ProviderKeyUnreadable(
            f"the API key of LLM provider {provider.name} cannot be opened (GOCLAW_ENCRYPTION_KEY changed without "
            "listing the old key, or the stored value was altered): set the key again",
            details={"provider": provider.name}) from None
    return ProviderConfig(name=provider.name, kind=provider.kind, base_url=provider.base_url, api_key=api_key,
                          timeout=float(provider.timeout_seconds), allow_private_network=provider.allow_private_network)
