"""URLs of the console's playground pages (staff sessions only, through the admin site's login)."""
from django.contrib import admin
from django.urls import path

from console_app.playground import views

urlpatterns = [
    path("", admin.site.admin_view(views.playground), name="playground"),
]
