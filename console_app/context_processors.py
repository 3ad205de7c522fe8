from django.utils.functional import cached_property

from console_app.dashboard.selectors import approvals_waiting_count
from console_app.dashboard.views import DASHBOARD_PERMISSION, dashboard_context
from goclaw.authz import is_person, person_may


class ConsoleContext:
    """Read lazily, at most once per request, and only by templates that use it: the header badge on every admin
    page (one indexed count) and the dashboard on the admin home."""

    def __init__(self, request):
        self.request = request
        self.staff = is_person(getattr(request, "user", None))

    @cached_property
    def badge_allowed(self) -> bool:
        return self.staff and person_may(self.request.user, "tools_app.view_approvalrequest")

    @cached_property
    def approvals_waiting(self) -> int | None:
        """Calls waiting for a person, or None for users who may not see approvals."""
        if not self.badge_allowed:
            return None
        return approvals_waiting_count()

    @cached_property
    def dashboard(self):
        """The admin home's numbers and charts, for staff who may read the audit; else None."""
        if not (self.staff and person_may(self.request.user, DASHBOARD_PERMISSION)):
            return None
        return dashboard_context(self.request)


def console(request):
    """Values every admin page needs from the console: the waiting-approvals badge (and the dashboard on the home)."""
    return {"console": ConsoleContext(request)}
