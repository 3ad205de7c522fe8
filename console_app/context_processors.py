from django.utils.functional import cached_property

from console_app.dashboard.selectors import approvals_waiting_count
from console_app.dashboard.views import dashboard_context


class ConsoleContext:
    """Read lazily, at most once per request, and only by templates that use it: the header badge on every admin
    page (one indexed count) and the dashboard on the admin home."""

    def __init__(self, request):
        self.request = request
        user = getattr(request, "user", None)
        self.staff = bool(user is not None and user.is_active and user.is_staff)

    @cached_property
    def badge_allowed(self) -> bool:
        return self.staff and self.request.user.has_perm("tools_app.view_approvalrequest")

    @cached_property
    def approvals_waiting(self) -> int | None:
        """Calls waiting for a person, or None for users who may not see approvals."""
        if not self.badge_allowed:
            return None
        return approvals_waiting_count()

    @cached_property
    def dashboard(self):
        """The admin home's numbers and charts, for staff who may read the audit; else None."""
        if not (self.staff and self.request.user.has_perm("tools_app.view_toolinvocation")):
            return None
        return dashboard_context(self.request)


def console(request):
    """Values every admin page needs from the console: the waiting-approvals badge (and the dashboard on the home)."""
    return {"console": ConsoleContext(request)}
