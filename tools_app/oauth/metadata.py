"""What goclaw publishes about itself as an OAuth protected resource (RFC 9728) and authorization server (RFC 8414),
and the `WWW-Authenticate` challenge that points MCP clients at it. Pure functions of a base URL and the settings,
so the MCP port's ASGI layer (no Django request there) answers with the same documents as the main port."""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

SCOPE = "agent"
# The one scope: the client acts as the agent the person chose, with everything that agent's token may do.
SCOPES = {SCOPE: "act as the chosen agent: its tools over MCP and the REST API, under its policy"}
MCP_RESOURCE_PATH = "/mcp"
RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
SERVER_METADATA_PATH = "/.well-known/oauth-authorization-server"
AUTHORIZE_PATH = "/oauth/authorize"
TOKEN_PATH = "/oauth/token"
REGISTER_PATH = "/oauth/register"
REVOKE_PATH = "/oauth/revoke"
TOKEN_AUTH_METHODS = ["none", "client_secret_post", "client_secret_basic"]


def _base(url: str) -> str:
    return url.rstrip("/")


def resource_base_url(scheme: str, host: str) -> str:
    """The base URL a request to /mcp reached, from its scheme and (validated) Host header, for callers without a
    Django request (the MCP port's ASGI layer): GOCLAW_PUBLIC_URL when the Host is the public URL's host (a request
    proxied from the main port behind a TLS proxy arrives as plain http), else `scheme://host`."""
    if settings.PUBLIC_URL and host.lower() == urlsplit(settings.PUBLIC_URL).netloc.lower():
        return _base(settings.PUBLIC_URL)
    return f"{scheme}://{host}"


def authorization_server_url(base_url: str) -> str:
    """The issuer that serves a resource reached at `base_url`: GOCLAW_PUBLIC_URL when set; else `base_url` itself,
    except that the MCP port's address becomes the same host on the main port (only the main port runs the
    authorization server)."""
    if settings.PUBLIC_URL:
        return _base(settings.PUBLIC_URL)
    parts = urlsplit(_base(base_url))
    if settings.PORT and settings.MCP_PORT and parts.port == settings.MCP_PORT != settings.PORT:
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        return urlunsplit((parts.scheme, f"{host}:{settings.PORT}", "", "", ""))
    return _base(base_url)


def protected_resource_metadata(base_url: str, resource_path: str = MCP_RESOURCE_PATH,
                                authorization_server: str | None = None) -> dict:
    """RFC 9728 metadata of the MCP resource served at `base_url` + `resource_path` (the origin the client reached:
    the MCP SDK checks the resource against the URL it connected to)."""
    return {
        "resource": _base(base_url) + resource_path,
        "authorization_servers": [_base(authorization_server or authorization_server_url(base_url))],
        "bearer_methods_supported": ["header"],
        "scopes_supported": list(SCOPES),
        "resource_name": "goclaw MCP server",
    }


def www_authenticate_value(base_url: str, error: str | None = None) -> str:
    """The `WWW-Authenticate` value of a 401 from /mcp served at `base_url`: where the protected-resource metadata
    is (RFC 9728 §5.1) and the scope to ask for. `error="invalid_token"` when a token was sent but refused
    (RFC 6750 §3.1)."""
    value = (f'Bearer realm="goclaw", resource_metadata="{_base(base_url)}{RESOURCE_METADATA_PATH}{MCP_RESOURCE_PATH}", '
             f'scope="{" ".join(SCOPES)}"')
    return value + (f', error="{error}"' if error else "")


def authorization_server_metadata(issuer: str) -> dict:
    """RFC 8414 metadata of the authorization server `issuer` (S256 PKCE only, authorization code and refresh)."""
    issuer = _base(issuer)
    metadata = {
        "issuer": issuer,
        "authorization_endpoint": issuer + AUTHORIZE_PATH,
        "token_endpoint": issuer + TOKEN_PATH,
        "revocation_endpoint": issuer + REVOKE_PATH,
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": TOKEN_AUTH_METHODS,
        "revocation_endpoint_auth_methods_supported": TOKEN_AUTH_METHODS,
        "scopes_supported": list(SCOPES),
        "authorization_response_iss_parameter_supported": True,  # RFC 9207: the answer names who sent it
    }
    if settings.OAUTH_DYNAMIC_REGISTRATION:
        metadata["registration_endpoint"] = issuer + REGISTER_PATH
    return metadata


def resource_canonical(url: str) -> str | None:
    """`url` as compared for RFC 8707: lower-case scheme and host, no default port, no trailing slash; None for
    anything that is not a plain http(s) URL (userinfo, query, fragment, no host)."""
    if not isinstance(url, str) or len(url) > 2000 or any(c.isspace() or ord(c) < 32 for c in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc or parts.query or parts.fragment:
        return None
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    if port is not None and port != (443 if scheme == "https" else 80):
        host = f"{host}:{port}"
    return f"{scheme}://{host}{parts.path.rstrip('/')}"


def accepted_resources(issuer: str) -> set[str]:
    """The resources (canonical) a client may name: the issuer's /mcp, /mcp on the MCP port of the issuer's host,
    and GOCLAW_OAUTH_RESOURCES."""
    parts = urlsplit(_base(issuer))
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    candidates = [_base(issuer) + MCP_RESOURCE_PATH, *settings.OAUTH_RESOURCES]
    if settings.MCP_PORT:
        candidates.append(f"{parts.scheme}://{host}:{settings.MCP_PORT}{MCP_RESOURCE_PATH}")
    return {canonical for canonical in map(resource_canonical, candidates) if canonical}
