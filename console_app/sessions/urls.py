"""URLs of the console's hosted-session pages (staff sessions only, through the admin site's login)."""
from django.contrib import admin
from django.urls import path

from console_app.sessions import views

urlpatterns = [
    path("", admin.site.admin_view(views.session_list_page), name="session_list"),
    path("<uuid:session_id>/", admin.site.admin_view(views.session_timeline_page), name="session_timeline"),
    path("<uuid:session_id>/live/", admin.site.admin_view(views.session_timeline_live), name="session_timeline_live"),
    path("<uuid:session_id>/cancel/", admin.site.admin_view(views.session_cancel_view), name="session_cancel"),
    path("<uuid:session_id>/approvals/<uuid:approval_id>/decide/", admin.site.admin_view(views.session_approval_decide),
         name="session_approval_decide"),
]
