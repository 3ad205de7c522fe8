def console(request):
    """Values every admin page needs from the console (filled in by the dashboard: the waiting-approvals badge)."""
    return {}
