"""The OAuth server's routes, mounted at the root by goclaw.urls: the well-known metadata and /oauth/…."""
from django.urls import path

from tools_app.oauth import views

app_name = "oauth"

urlpatterns = [
    path(".well-known/oauth-protected-resource", views.protected_resource, name="protected-resource"),
    path(".well-known/oauth-protected-resource/mcp", views.protected_resource, name="protected-resource-mcp"),
    path(".well-known/oauth-authorization-server", views.authorization_server, name="authorization-server"),
    path("oauth/authorize", views.authorize, name="authorize"),
    path("oauth/token", views.token, name="token"),
    path("oauth/register", views.register, name="register"),
    path("oauth/revoke", views.revoke, name="revoke"),
]
