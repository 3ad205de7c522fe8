"""Model signals: any change to a WebSocket principal (token, agent, staff user, session) tells its open sockets,
after commit, to close (deleted / ended) or to re-check themselves (changed); see goclaw.consumers. A change to a
person's permissions (their own, their groups', their group memberships) is a change of the person: their sockets
re-check which staff groups they may still see (docs/permissions.md). Queryset
`update()` sends no signal: services that revoke that way notify the sockets themselves, and the consumer's
periodic re-check is the safety net for any other path.

Catalog and permission caches are not kept here: the services that write agents, policies, profiles and
permissions (tools_app.services.agents / .policy) drop them inside their transaction. The token cache is the
exception: every saved or deleted token or agent drops it, whichever path wrote the row (the admin's token form).
"""
from importlib import import_module

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import m2m_changed, post_delete, post_save

from goclaw import events
from tools_app.models import Agent, AgentToken
from tools_app.services.agents import token_cache_changed

_TOKEN_CACHE_KINDS = frozenset({"token", "agent"})


def _principal_saved(kind):
    def receiver(sender, instance, created=False, raw=False, update_fields=None, **kwargs):
        # A new row has no sockets yet; a login only stamps last_login.
        if raw or created or (update_fields is not None and set(update_fields) <= {"last_login"}):
            return
        if kind in _TOKEN_CACHE_KINDS:
            token_cache_changed()
        events.principal_changed([events.principal_group(kind, instance.pk)])
    return receiver


def _principal_deleted(kind):
    def receiver(sender, instance, **kwargs):
        if kind in _TOKEN_CACHE_KINDS:
            token_cache_changed()
        events.principal_ended([events.principal_group(kind, instance.pk)])
    return receiver


def _session_deleted(sender, instance, **kwargs):
    events.principal_ended([events.session_principal_group(instance.session_key)])


def _logged_out(sender, request, user, **kwargs):
    # Session backends without rows (signed cookies, cache) send no delete signal: logout is the only notice.
    session = getattr(request, "session", None)
    if session is not None and session.session_key:
        events.principal_ended([events.session_principal_group(session.session_key)])


def _permissions_changed(sender, instance, action, reverse, model, pk_set, **kwargs):
    """A person's permissions changed (their own, their groups', or their group membership): their sockets re-check
    which staff groups they may still see (goclaw.consumers), after commit. Clears are read at `pre_clear`, while
    the links, and so the people, still exist."""
    if action not in ("post_add", "post_remove", "pre_clear"):
        return
    user_model = get_user_model()
    if isinstance(instance, user_model):
        people = {instance.pk}
    elif model is user_model:  # from the group's or the permission's side, naming users
        people = set(pk_set) if pk_set is not None else set(instance.user_set.values_list("pk", flat=True))
    elif isinstance(instance, Group):  # a group's permissions
        people = set(instance.user_set.values_list("pk", flat=True))
    else:  # a permission given to or taken from groups
        groups = pk_set if pk_set is not None else instance.group_set.values_list("pk", flat=True)
        people = set(user_model._default_manager.filter(groups__in=list(groups)).values_list("pk", flat=True))
    if people:
        events.principal_changed(events.principal_group("user", pk) for pk in people)


def connect() -> None:
    for kind, model in (("token", AgentToken), ("agent", Agent), ("user", get_user_model())):
        post_save.connect(_principal_saved(kind), sender=model, weak=False, dispatch_uid=f"ws-principal-save-{kind}")
        post_delete.connect(_principal_deleted(kind), sender=model, weak=False, dispatch_uid=f"ws-principal-delete-{kind}")
    store = import_module(settings.SESSION_ENGINE).SessionStore
    if hasattr(store, "get_model_class"):  # database-backed sessions
        post_delete.connect(_session_deleted, sender=store.get_model_class(), dispatch_uid="ws-principal-delete-session")
    user_logged_out.connect(_logged_out, dispatch_uid="ws-principal-logout")
    user_model = get_user_model()
    for through in (user_model.user_permissions.through, user_model.groups.through, Group.permissions.through):
        m2m_changed.connect(_permissions_changed, sender=through,
                            dispatch_uid=f"ws-principal-permissions-{through.__name__}")
