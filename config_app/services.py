"""Export and import of the whole governance configuration (docs/config-as-code.md). One engine walks the section
table (config_app.sections): the export reads every section in a stable order; the import validates and applies
every entry through the owning app's writers in one transaction, collects every problem with its path, and keeps
nothing unless there are none (a dry run computes the same plan and keeps nothing either)."""
from __future__ import annotations

import hashlib
import logging
import os
import re
from datetime import datetime, timezone as dt_timezone
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import DateTimeField, ProtectedError
from django.utils.dateparse import parse_datetime

from config_app.document import DOCUMENT_VERSION, document_normalize
from config_app.errors import ConfigInvalid, problem
from config_app.models import SecretSource
from config_app.permissions import write_permissions
from config_app.sections import SECTIONS, SECTIONS_BY_NAME, Section, generic_create, generic_delete, generic_update
from goclaw import crypto
from goclaw.errors import ApplicationError
from goclaw.events import publish
from goclaw.generations import generation_caches_clear

logger = logging.getLogger("goclaw.config")
EVENTS_GROUP = "config"
ENV_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
# goclaw's own settings and credentials are never a secret's source: `{env: GOCLAW_ENCRYPTION_KEY}` would hand the
# platform's keys to a tool an agent runs (or a header it sends). Refused by name, case-insensitively.
RESERVED_ENV_PREFIXES = ("GOCLAW_", "DJANGO_", "PG")
RESERVED_ENV_NAMES = frozenset({"SECRET_KEY", "DATABASE_URL", "REDIS_URL"})
_IMPORT_LOCK = 0x636F6E666967  # "config": one import at a time, so two plans never interleave
_MISSING = object()
# What a writer may raise for a bad entry: reported as a problem at the entry's path, never a traceback.
_WRITE_ERRORS = (ApplicationError, DjangoValidationError, ProtectedError, DatabaseError, ValueError, TypeError)


# --- values as the document writes them -----------------------------------------------------------------------------
def _iso(value: datetime) -> str:
    return value.astimezone(dt_timezone.utc).isoformat().replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    return _iso(value) if isinstance(value, datetime) else value


def _get(entry: dict, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(entry, dict) or part not in entry:
            return _MISSING
        entry = entry[part]
    return entry


def _put(entry: dict, path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        entry = entry.setdefault(part, {})
    entry[path[-1]] = value


def _fingerprint(sealed: str) -> str:
    return hashlib.sha256((sealed or "").encode()).hexdigest()


def _label(section: Section, entry: dict[str, Any]) -> str:
    """How plans, problems and secret sources name an entity: its natural key."""
    if len(section.key) == 1:
        return str(entry[section.key[0]])
    return ", ".join(f"{k}={entry[k]}" for k in section.key if entry.get(k) not in (None, "")) or "(global)"


def _sort_key(section: Section, entry: dict[str, Any]) -> tuple:
    return tuple((entry[k] is not None, str(entry[k]) if entry[k] is not None else "") for k in section.key)


def _exported(section: Section, obj: Any) -> dict[str, Any]:
    """One entity's entry without its secrets: fields, references by natural key, computed fields."""
    entry: dict[str, Any] = {}
    for name in section.all_fields:
        if name in section.refs:
            target = getattr(obj, name)
            entry[name] = getattr(target, section.refs[name].lookup) if target is not None else None
        elif name in section.computed:
            entry[name] = section.computed[name][0](obj)
        else:
            entry[name] = _plain(getattr(obj, name))
    return entry


def _secret_path(secret) -> str:
    return ".".join(secret.path)


def _secret_at(secret, name: str) -> str:
    """Where one secret value sits in an entry: `env.API_TOKEN`, or the path itself for a single secret (`api_key`)."""
    return _secret_path(secret) if secret.single else f"{_secret_path(secret)}.{name}"


def _secret_of(section: Section, where: str):
    """The secret of `section` that holds the value at `where` (as _secret_at names it)."""
    return next(s for s in section.secrets
                if (where == _secret_path(s) if s.single else where.startswith(_secret_path(s) + ".")))


# --- export ---------------------------------------------------------------------------------------------------------
def config_export() -> dict[str, Any]:
    """The whole governance configuration as one document (natural keys, stable order, secrets as references:
    `{env: NAME}` where the value is known to come from that variable, else `{set: true}`; never a value)."""
    sources = {(s.section, s.key, s.path): s for s in SecretSource.objects.all()}
    document: dict[str, Any] = {"version": DOCUMENT_VERSION}
    for section in SECTIONS:
        entries = []
        for obj in section.rows():
            entry = _exported(section, obj)
            label = _label(section, entry)
            for secret in section.secrets:
                try:
                    names = sorted(secret.open(obj))
                except crypto.DecryptionError:
                    logger.warning("config export: the %s of %s %s cannot be opened (encryption key?): left out",
                                   _secret_path(secret), section.name, label)
                    continue
                if not names:
                    if secret.single:  # the key is always written: `api_key: null` says none is set
                        _put(entry, secret.path, None)
                    continue
                fingerprint = _fingerprint(getattr(obj, secret.sealed))
                refs = {}
                for name in names:
                    source = sources.get((section.name, label, _secret_at(secret, name)))
                    held = source is not None and source.fingerprint == fingerprint
                    refs[name] = {"env": source.env_var} if held else {"set": True}
                _put(entry, secret.path, refs[names[0]] if secret.single else refs)
            entries.append(entry)
        document[section.name] = sorted(entries, key=lambda e, s=section: _sort_key(s, e))
    return document


# --- import ---------------------------------------------------------------------------------------------------------
def _field_default(section: Section, name: str) -> Any:
    if name in section.refs:
        return None
    if name in section.computed:
        return section.computed[name][1]
    return _plain(section.model._meta.get_field(name).get_default())


def _problems_of(exc: Exception, path: str, section: Section) -> list[dict[str, str]]:
    """An error a writer raised, as problems under `path` (a field named in its details gets its own path)."""
    if isinstance(exc, DjangoValidationError):
        details = exc.message_dict if hasattr(exc, "error_dict") else list(exc.messages)
        message = "; ".join(exc.messages)
    elif isinstance(exc, ApplicationError):
        details, message = exc.details, exc.message
    elif isinstance(exc, ProtectedError):
        users = sorted({str(o) for o in exc.protected_objects})[:5]
        return [problem(path, f"still used by {', '.join(users)}")]
    elif isinstance(exc, IntegrityError):
        return [problem(path, "conflicts with another row (a uniqueness rule of the database)")]
    else:  # a value the model's checks let through but the database refuses (a NUL byte, a wrong type …)
        logger.info("config import: %s refused by the database: %s", path, type(exc).__name__)
        return [problem(path, "a value has the wrong type or cannot be stored (e.g. a NUL byte)")]
    fields = set(section.all_fields) | {s.path[0] for s in section.secrets}
    found = []
    if isinstance(details, dict) and details:
        for key, value in details.items():
            text = "; ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            found.append(problem(path if key in ("__all__", None) else f"{path}.{key}", text))
    elif isinstance(details, list) and details:
        for item in map(str, details):
            head, _, rest = item.partition(": ")
            found.append(problem(f"{path}.{head}", rest) if rest and head in fields else problem(path, item))
    else:
        head, _, rest = message.partition(": ")
        found.append(problem(f"{path}.{head}", rest) if rest and head in fields else problem(path, message))
    return found


class _Import:
    """One import: walks the sections in dependency order, applies what differs, and records the plan and every
    problem. The caller owns the transaction (and rolls it back on problems or a dry run)."""

    def __init__(self, sections: dict[str, list], options: dict[str, Any], *, prune: bool, actor, dry_run: bool = False):
        self.sections, self.options, self.prune, self.actor = sections, options, prune, actor
        # applying as a person who is not a superuser: each write also needs the admin's permission for it
        self.checks_permissions = not dry_run and actor is not None and not getattr(actor, "is_superuser", False)
        self.problems: list[dict[str, str]] = []
        self.plan: dict[str, list] = {"created": [], "changed": [], "removed": []}
        self.keys: dict[str, dict[tuple, str]] = {}  # section -> key tuple -> label, of the document's entries

    def run(self) -> None:
        for section in SECTIONS:
            if section.name in self.sections:
                self._section(section, self.sections[section.name])
        if self.prune:
            for section in reversed(SECTIONS):
                if section.name in self.sections:
                    self._prune(section)

    # --- one section ------------------------------------------------------------------------------------------------
    def _section(self, section: Section, entries: list) -> None:
        existing = {}
        for obj in section.rows():
            current = _exported(section, obj)
            existing[tuple(current[k] for k in section.key)] = (obj, current)
        seen: dict[tuple, int] = {}
        self.keys[section.name] = {}
        allowed = set(section.all_fields) | {s.path[0] for s in section.secrets}
        for index, entry in enumerate(entries):
            path = f"{section.name}[{index}]"
            if not isinstance(entry, dict):
                self.problems.append(problem(path, "must be a mapping of fields"))
                continue
            unknown = sorted(str(k)[:80] for k in entry if k not in allowed)
            for key in unknown:
                self.problems.append(problem(f"{path}.{key}", "unknown field"))
            if unknown:
                continue
            key = tuple(entry.get(k, _field_default(section, k)) for k in section.key)
            try:
                hash(key)
            except TypeError:
                self.problems.append(problem(path, f"the key fields ({', '.join(section.key)}) must be plain values"))
                continue
            if key in seen:
                self.problems.append(problem(path, f"the same entry as {section.name}[{seen[key]}] "
                                                   f"({', '.join(section.key)} must be unique)"))
                continue
            seen[key] = index
            obj, current = existing.get(key, (None, None))
            desired = self._desired(section, entry, current, path)
            if desired is None:
                continue
            self.keys[section.name][key] = _label(section, desired)
            self._apply(section, path, entry, desired, obj, current)

    def _desired(self, section: Section, entry: dict, current: dict | None, path: str) -> dict[str, Any] | None:
        """The entry's fields in export form (omitted: the default, or in a partial document the current value)."""
        desired, ok = {}, True
        for name in section.all_fields:
            if name in entry:
                value = entry[name]
            elif self.options["partial"] and current is not None:
                value = current[name]
            else:
                value = _field_default(section, name)
            if name in section.computed and isinstance(value, dict):
                value = {k: v for k, v in value.items()
                         if not any(s.path == (name, k) for s in section.secrets)}
            if name not in section.refs and name not in section.computed and value is not None and isinstance(
                    section.model._meta.get_field(name), DateTimeField):
                parsed = value if isinstance(value, datetime) else parse_datetime(value) if isinstance(value, str) else None
                if parsed is None:
                    self.problems.append(problem(f"{path}.{name}", "a date-time such as 2030-01-31T12:00:00Z"))
                    ok = False
                    continue
                value = _iso(parsed if parsed.tzinfo else parsed.replace(tzinfo=dt_timezone.utc))
            desired[name] = value
        return desired if ok else None

    def _resolved(self, section: Section, desired: dict, path: str) -> dict[str, Any] | None:
        """The writers' values: references as objects, date-times parsed. None when a reference does not resolve."""
        values, ok = dict(desired), True
        for name, ref in section.refs.items():
            wanted = desired[name]
            if wanted is None:
                continue
            target = ref.model._default_manager.filter(**{ref.lookup: wanted}).first() if isinstance(wanted, str) else None
            if target is None:
                self.problems.append(problem(f"{path}.{name}", f"no {ref.what} named {str(wanted)[:80]!r}"))
                ok = False
            elif self.prune and ref.section in self.sections and (wanted,) not in self.keys.get(ref.section, {}) \
                    and ref.section != section.name:
                self.problems.append(problem(f"{path}.{name}", f"{ref.what} {wanted!r} is not in the document's "
                                                               f"{ref.section}, so the prune would remove it"))
                ok = False
            values[name] = target
        for name, value in desired.items():
            if isinstance(value, str) and name not in section.refs and name not in section.computed and isinstance(
                    section.model._meta.get_field(name), DateTimeField):
                values[name] = parse_datetime(value)
        return values if ok else None

    def _secrets(self, section: Section, entry: dict, obj: Any, path: str):
        """(changes per secret path: name → value | None, display per "path.name", env sources), or None on a problem."""
        changes, display, sources, ok = {}, {}, {}, True
        for secret in section.secrets:
            where = _secret_path(secret)
            given = _get(entry, secret.path)
            try:
                current = secret.open(obj) if obj is not None else {}
            except crypto.DecryptionError:
                self.problems.append(problem(f"{path}.{where}", "the stored values cannot be opened (check "
                                                                "GOCLAW_ENCRYPTION_KEY and its old keys)"))
                ok = False
                continue
            if given is _MISSING or given is None:
                if self.options["partial"]:
                    continue
                given = {}
            elif secret.single:  # one reference at the path itself: named as open() names its value
                given = {secret.path[-1]: given}
            if not isinstance(given, dict):
                self.problems.append(problem(f"{path}.{where}", "a mapping of names to {env: VAR} or {set: true}"))
                ok = False
                continue
            change: dict[str, str | None] = {}
            for name, ref in given.items():
                at = f"{path}.{_secret_at(secret, name)}"
                value = self._secret_value(ref, current.get(name), at)
                if isinstance(ref, dict) and isinstance(ref.get("env"), str):
                    # a variable missing here keeps the stored value, and the record of where it came from
                    sources[_secret_at(secret, name)] = ref["env"] if value is not None else None
                if value is _MISSING:
                    ok = False
                elif value is None:  # {set: true}, or an unset variable: the stored value stays
                    display[_secret_at(secret, name)] = "(kept)"
                else:
                    if current.get(name) == value:
                        display[_secret_at(secret, name)] = "(kept)"
                    else:
                        change[name] = value
                        display[_secret_at(secret, name)] = "(changed)" if name in current else "(added)"
            if not self.options["partial"]:
                for name in current:
                    if name not in given:
                        change[name] = None
                        display[_secret_at(secret, name)] = "(removed)"
            if change:
                changes[where] = change
        return (changes, display, sources) if ok else None

    def _secret_value(self, ref: Any, current: str | None, at: str) -> Any:
        """The value a reference stands for; None: keep the stored value; _MISSING: a problem was recorded."""
        if isinstance(ref, dict) and ref == {"set": True}:
            if current is None:
                self.problems.append(problem(at, "no value is stored yet: give it as {env: VARIABLE}"))
                return _MISSING
            return None
        if isinstance(ref, dict) and set(ref) == {"env"}:
            var = ref["env"]
            if not isinstance(var, str) or not ENV_VAR_RE.fullmatch(var):
                self.problems.append(problem(at, "env: the name of an environment variable"))
                return _MISSING
            if var.upper() in RESERVED_ENV_NAMES or var.upper().startswith(RESERVED_ENV_PREFIXES):
                self.problems.append(problem(at, f"{var} is one of goclaw's own settings, never a secret's source"))
                return _MISSING
            if var not in os.environ:
                if current is not None:
                    return None  # the stored value is kept
                self.problems.append(problem(at, f"the environment variable {var} is not set"))
                return _MISSING
            return os.environ[var]
        if isinstance(ref, str):
            if not self.options["literal_secrets"]:
                self.problems.append(problem(at, "a secret is given as {env: VARIABLE} or {set: true}; literal "
                                                 "values need literal_secrets: true at the top of the document"))
                return _MISSING
            return ref
        self.problems.append(problem(at, "{env: VARIABLE} or {set: true}"))
        return _MISSING

    def _apply(self, section: Section, path: str, entry: dict, desired: dict, obj: Any, current: dict | None) -> None:
        values = self._resolved(section, desired, path)
        secrets = self._secrets(section, entry, obj, path)
        if values is None or secrets is None:
            return
        changes, display, sources = secrets
        label = _label(section, desired)
        try:
            with transaction.atomic():
                if obj is None:
                    if not self._permitted(section, "add", path):
                        return
                    written = (section.create or generic_create(section.model))(self.actor, values, changes)
                    self.plan["created"].append({"section": section.name, "key": label})
                else:
                    changed = {name for name in section.all_fields if desired[name] != current[name]}
                    if not changed and not changes:
                        written = obj
                    elif not self._permitted(section, "change", path):
                        return
                    else:
                        written = (section.update or generic_update)(self.actor, obj, values, changed, changes)
                        fields = {name: {"old": current[name], "new": desired[name]} for name in sorted(changed)}
                        fields.update({k: {"old": "(set)" if v != "(added)" else "(unset)", "new": v}
                                       for k, v in sorted(display.items())})
                        self.plan["changed"].append({"section": section.name, "key": label, "fields": fields})
                self._record_sources(section, label, written, sources)
        except _WRITE_ERRORS as exc:
            self.problems.extend(_problems_of(exc, path, section))

    def _permitted(self, section: Section, action: str, path: str) -> bool:
        """Whether the actor holds the admin's `action` permission on the section's model (a problem if not): the
        apply_configuration permission opens the import, not every model behind it."""
        opts = section.model._meta
        missing = [perm for perm in write_permissions(section.model, action) if not self.actor.has_perm(perm)] \
            if self.checks_permissions else []
        if not missing:
            return True
        self.problems.append(problem(path, f"you may not {action} {opts.verbose_name_plural} (needs the "
                                           f"{' and '.join(missing)} permission{'s' if len(missing) > 1 else ''})"))
        return False

    def _record_sources(self, section: Section, label: str, written: Any, sources: dict[str, str | None]) -> None:
        """Remember which secrets come from which variable, bound to the sealed column as it is now (None: the
        variable was not set, the stored value and its record stay)."""
        if not section.secrets:
            return
        SecretSource.objects.filter(section=section.name, key=label).exclude(path__in=list(sources)).delete()
        written = type(written)._default_manager.get(pk=written.pk)
        for where, var in sources.items():
            if var is None:
                continue
            secret = _secret_of(section, where)
            SecretSource.objects.update_or_create(
                section=section.name, key=label, path=where,
                defaults={"env_var": var, "fingerprint": _fingerprint(getattr(written, secret.sealed))})

    def _prune(self, section: Section) -> None:
        wanted = self.keys.get(section.name, {})
        for obj in section.rows():
            current = _exported(section, obj)
            if tuple(current[k] for k in section.key) in wanted:
                continue
            label = _label(section, current)
            if not self._permitted(section, "delete", f"{section.name} ({label})"):
                continue
            try:
                with transaction.atomic():
                    (section.delete or generic_delete)(self.actor, obj)
                    SecretSource.objects.filter(section=section.name, key=label).delete()
                self.plan["removed"].append({"section": section.name, "key": label})
            except _WRITE_ERRORS as exc:
                for found in _problems_of(exc, section.name, section):
                    self.problems.append(problem(found["path"], f"cannot remove {label}: {found['message']}"))


def config_import(document: Any, *, dry_run: bool, prune: bool, actor) -> dict[str, Any]:
    """Apply a parsed document (native, or one of GoClaw's JSON shapes): the plan of what was (or, with `dry_run`,
    would be) created, changed field by field, and removed (only with `prune`, only in sections the document has).
    All or nothing: any problem raises ConfigInvalid listing every problem, and nothing changes."""
    sections, options = document_normalize(document)
    run = _Import(sections, options, prune=prune, actor=actor, dry_run=dry_run)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_IMPORT_LOCK])
        run.run()
        if run.problems or dry_run:
            transaction.set_rollback(True)
        else:
            counts = {kind: len(items) for kind, items in run.plan.items()}
            publish("config.imported", {**counts, "prune": prune, "actor": getattr(actor, "get_username", lambda: "system")()},
                    [EVENTS_GROUP])
            transaction.on_commit(lambda: logger.info("configuration imported by %s: %d created, %d changed, %d removed",
                                                      getattr(actor, "get_username", lambda: "system")(),
                                                      counts["created"], counts["changed"], counts["removed"]))
    if run.problems or dry_run:
        # The writers moved cache generations inside the rolled-back transaction: drop what this process may have
        # cached under those never-committed counters.
        generation_caches_clear()
    if run.problems:
        raise ConfigInvalid(run.problems)
    return {"applied": not dry_run, "dry_run": dry_run, **run.plan}


def plan_text(plan: dict[str, Any]) -> str:
    """The plan as a readable diff: `+` created, `~` changed (field by field, old -> new), `-` removed."""
    lines = [f"+ {item['section']}: {item['key']}" for item in plan["created"]]
    for item in plan["changed"]:
        lines.append(f"~ {item['section']}: {item['key']}")
        secrets = SECTIONS_BY_NAME[item["section"]].secrets
        secret_paths = tuple(_secret_path(s) + "." for s in secrets if not s.single)
        single_paths = {_secret_path(s) for s in secrets if s.single}
        for name, change in item["fields"].items():
            if name.startswith(secret_paths) or name in single_paths:
                lines.append(f"    {name}: {change['new']}")
            else:
                lines.append(f"    {name}: {change['old']!r} -> {change['new']!r}")
    lines += [f"- {item['section']}: {item['key']}" for item in plan["removed"]]
    summary = (f"{len(plan['created'])} created, {len(plan['changed'])} changed, {len(plan['removed'])} removed")
    lines.append(summary + (" (dry run: nothing was changed)" if plan["dry_run"] else ""))
    return "\n".join(lines) + "\n"
