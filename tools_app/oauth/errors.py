"""OAuth errors carry the RFC's error codes (RFC 6749 §4.1.2.1 and §5.2, RFC 7591 §3.2.2, RFC 8707 §2)."""
from __future__ import annotations

from goclaw.errors import ApplicationError


class OAuthError(ApplicationError):
    """`code` is the RFC's `error`, `message` its `error_description`. At the authorization endpoint,
    `redirect_uri` is set once the client and its redirect URI are known to be valid: only then is the error sent
    back to the client; before that a person sees it (never a redirect to an unregistered URI)."""

    code = "invalid_request"
    http_status = 400

    def __init__(self, code: str, message: str, *, http_status: int = 400, redirect_uri: str | None = None,
                 state: str | None = None):
        super().__init__(message, code=code, http_status=http_status)
        self.redirect_uri = redirect_uri
        self.state = state

    def as_oauth(self) -> dict[str, str]:
        return {"error": self.code, "error_description": self.message}
