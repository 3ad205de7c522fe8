"""MCP servers, the tools they offer (pinned), who may use them (grants) and who asked (access requests).
docs/mcp.md explains the workflow; the services in `mcp_app.services` are the only writers."""
from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from mcp_app.choices import AccessScope, AccessStatus, HealthState, ToolStatus, Transport

SERVER_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,47}\Z"
TOOL_PREFIX_RE = r"^[a-z][a-z0-9_]{0,47}\Z"
MAX_TIMEOUT = 3600


class MCPLauncher(models.Model):
    """A program a stdio MCP server may be started with (`python3`, `node`, `npx`, an absolute path …): the
    allowlist people edit in the admin. `denied_args` are arguments that turn the launcher into an inline-code
    runner (`-c`, `--eval`), refused as whole arguments (or `--flag=value`), never as substrings."""

    command = models.CharField(max_length=512, unique=True,
                               help_text="a bare program name (looked up on PATH) or an absolute path, matched exactly")
    description = models.CharField(max_length=300, blank=True)
    denied_args = models.JSONField(default=list, blank=True,
                                   help_text='arguments refused for this launcher, e.g. ["-c"] for python')
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["command"]
        verbose_name = "MCP launcher"
        permissions = [("manage_mcplauncher", "Can add, change and remove MCP stdio launchers (programs run on the host)")]

    def __str__(self) -> str:
        return self.command


class MCPServer(models.Model):
    """An MCP server goclaw connects to. Headers and env are sealed (bound to this row) and write-only; only their
    names are readable. Health fields are written by the connection manager (docs/mcp.md, "Health")."""

    name = models.CharField(max_length=48, unique=True, validators=[RegexValidator(
        SERVER_NAME_RE, "lower-case letters, digits, - and _, starting with a letter or digit (at most 48)")])
    display_name = models.CharField(max_length=200, blank=True)
    transport = models.CharField(max_length=16, choices=Transport.choices)
    command = models.CharField(max_length=512, blank=True, help_text="stdio: the launcher (see MCP launchers)")
    args = models.JSONField(default=list, blank=True, help_text="stdio: the argument list (argv, never a shell string)")
    url = models.URLField(max_length=2000, blank=True, help_text="sse / streamable-http: the endpoint URL")
    allow_private_network = models.BooleanField(
        default=False, help_text="the URL may point at loopback or private addresses (goclaw's own network)")
    headers_sealed = models.TextField(blank=True, default="", editable=False)
    headers_names = models.JSONField(default=list, blank=True, editable=False)
    env_sealed = models.TextField(blank=True, default="", editable=False)
    env_names = models.JSONField(default=list, blank=True, editable=False)
    tool_prefix = models.CharField(max_length=48, blank=True, validators=[RegexValidator(TOOL_PREFIX_RE)],
                                   help_text="prefix of the tool names agents see (empty: mcp_<name>__)")
    timeout_seconds = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1),
                                                                          MaxValueValidator(MAX_TIMEOUT)])
    enabled = models.BooleanField(default=True)
    sandbox_profile = models.ForeignKey("sandbox_app.SandboxProfile", null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="mcp_servers",
                                        help_text="stdio: how the server process is isolated (empty: the default profile)")
    review_new_tools = models.BooleanField(
        default=True, help_text="tools that appear after the first listing wait for a reviewer before agents see them")
    # health, written by the connection manager
    state = models.CharField(max_length=16, choices=HealthState.choices, default=HealthState.UNKNOWN, editable=False)
    last_ok_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, default="", editable=False)
    attempts = models.PositiveIntegerField(default=0, editable=False, help_text="reconnect attempts since the last success")
    next_attempt_at = models.DateTimeField(null=True, blank=True, editable=False)
    listed_at = models.DateTimeField(null=True, blank=True, editable=False, help_text="last successful tools/list")
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        constraints = [models.CheckConstraint(name="mcp_server_timeout_range",
                                              condition=Q(timeout_seconds__gte=1, timeout_seconds__lte=MAX_TIMEOUT))]

    def __str__(self) -> str:
        return self.name

    @property
    def prefix(self) -> str:
        """What every tool name of this server starts with."""
        return self.tool_prefix or "mcp_" + self.name.replace("-", "_") + "__"


class MCPTool(models.Model):
    """A tool a server offers, pinned: `approved_hash` is the hash of the definition a person (or the first listing)
    accepted. A listing whose definition differs quarantines the tool until someone reviews the diff."""

    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=128, help_text="the tool's name on the server (without the prefix)")
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict, blank=True)
    definition_hash = models.CharField(max_length=64, help_text="hash of the latest listing's definition")
    status = models.CharField(max_length=12, choices=ToolStatus.choices, default=ToolStatus.PENDING)
    approved_hash = models.CharField(max_length=64, blank=True, default="")
    approved_definition = models.JSONField(default=dict, blank=True, help_text="the pinned definition (for the diff)")
    rejected_hash = models.CharField(max_length=64, blank=True, default="", help_text="the definition a reviewer rejected")
    flags = models.JSONField(default=list, blank=True, help_text="instruction-like content found in the description")
    present = models.BooleanField(default=True, help_text="in the server's latest listing")
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.CharField(max_length=150, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["server__name", "name"]
        verbose_name = "MCP tool"
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_server_name")]
        indexes = [models.Index(fields=["server", "status"], name="mcp_tool_server_status")]

    def __str__(self) -> str:
        return f"{self.server.name}/{self.name}"

    @property
    def usable(self) -> bool:
        """Agents may see and call it: approved, still listed, and the listed definition is the pinned one."""
        return self.status == ToolStatus.APPROVED and self.present and self.definition_hash == self.approved_hash


class GrantFields(models.Model):
    """What agent and user grants share: a tool allow list (null = every tool), a deny list, an expiry."""

    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="+")
    enabled = models.BooleanField(default=True)
    tool_allow = models.JSONField(null=True, blank=True, help_text="tool names (without prefix); empty: all tools")
    tool_deny = models.JSONField(default=list, blank=True, help_text="tool names (without prefix); deny always wins")
    granted_by = models.CharField(max_length=150, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class MCPAgentGrant(GrantFields):
    """An agent may use a server (the grant every access needs). `overrides_sealed` holds `config_overrides`
    (env, headers, args_suffix, timeout) sealed, since env and headers may carry secrets."""

    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="agent_grants")
    agent = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="mcp_grants")
    overrides_sealed = models.TextField(blank=True, default="", editable=False)
    overrides_summary = models.JSONField(default=dict, blank=True, editable=False,
                                         help_text="the overrides with env and header values left out")

    class Meta:
        ordering = ["server__name", "agent__key"]
        verbose_name = "MCP agent grant"
        constraints = [models.UniqueConstraint(fields=["server", "agent"], name="mcp_agent_grant_unique")]

    def __str__(self) -> str:
        return f"{self.agent} → {self.server}"


class MCPUserGrant(GrantFields):
    """Narrows an agent's access for one user (its allow list intersects, its deny list adds; disabled = no access
    for that user) and may carry that user's own upstream credentials (sealed headers / env), used only for calls
    made for that user. `agent` empty: for every agent."""

    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="user_grants")
    agent = models.ForeignKey("tools_app.Agent", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="mcp_user_grants", help_text="empty: every agent")
    user_id = models.CharField(max_length=255)
    credentials_sealed = models.TextField(blank=True, default="", editable=False)
    credentials_names = models.JSONField(default=dict, blank=True, editable=False,
                                         help_text='{"headers": [names], "env": [names]}')

    class Meta:
        ordering = ["server__name", "user_id"]
        verbose_name = "MCP user grant"
        constraints = [models.UniqueConstraint(fields=["server", "agent", "user_id"], nulls_distinct=False,
                                               name="mcp_user_grant_unique")]
        indexes = [models.Index(fields=["user_id", "server"], name="mcp_user_grant_user")]

    def __str__(self) -> str:
        return f"{self.user_id} @ {self.agent or 'all agents'} → {self.server}"


class MCPAccessRequest(models.Model):
    """Someone (an agent, or staff on a user's behalf) asks for access to a server; a reviewer approves (the grant is
    created or updated in the same transaction) or rejects it."""

    scope = models.CharField(max_length=8, choices=AccessScope.choices)
    server = models.ForeignKey(MCPServer, on_delete=models.CASCADE, related_name="access_requests")
    agent = models.ForeignKey("tools_app.Agent", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="mcp_access_requests")
    user_id = models.CharField(max_length=255, blank=True)
    tool_allow = models.JSONField(null=True, blank=True, help_text="the tools asked for (empty: all)")
    reason = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=AccessStatus.choices, default=AccessStatus.PENDING)
    requested_by = models.CharField(max_length=200, help_text="agent:<key> or a person's username")
    reviewed_by = models.CharField(max_length=150, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    review_note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "MCP access request"
        permissions = [("review_mcpaccessrequest", "Can review (approve or reject) MCP access requests")]
        indexes = [models.Index(fields=["created_at"], condition=Q(status="pending"), name="mcp_access_pending")]
        constraints = [
            models.CheckConstraint(name="mcp_access_scope_fields", condition=(
                Q(scope="agent", agent__isnull=False) | Q(scope="user") & ~Q(user_id=""))),
        ]

    def __str__(self) -> str:
        who = self.agent.key if self.scope == AccessScope.AGENT and self.agent_id else self.user_id
        return f"{self.scope} {who} → {self.server} ({self.status})"


# --- goclaw served as an MCP server (docs/mcp-server.md) -------------------------------------------------------
class MCPServerSession(models.Model):
    """One MCP client session on goclaw's own `/mcp` endpoint. Kept in PostgreSQL so any server process can serve
    any request of it (a process that does not hold it revives it from this row); DELETE or the idle purge ends it."""

    session_id = models.CharField(max_length=64, primary_key=True)
    agent = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="mcp_server_sessions")
    token = models.ForeignKey("tools_app.AgentToken", null=True, on_delete=models.SET_NULL, related_name="+",
                              help_text="the token that opened it (any active token of the same agent may use it)")
    context = models.JSONField(default=dict, blank=True, help_text="the call context its initialize request carried")
    protocol_version = models.CharField(max_length=32)
    client_info = models.JSONField(default=dict, blank=True)
    extensions = models.JSONField(default=list, blank=True,
                                  help_text="the MCP extensions the client declared at initialize (identifiers)")
    catalog_fingerprint = models.CharField(max_length=64, blank=True, help_text="the catalog it last listed")
    notified_fingerprint = models.CharField(max_length=64, blank=True,
                                            help_text="the catalog it was last told about (tools/list_changed)")
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-last_seen_at"]
        verbose_name = "MCP client session"

    def __str__(self) -> str:
        return f"{self.session_id[:12]}… ({self.agent_id})"


class MCPApprovalResume(models.Model):
    """A call that was still waiting for a person when its MCP request had to answer: the exact arguments, sealed
    (bound to the approval and agent), so `goclaw_approval_wait` / `goclaw_approval_resume` can run it once. Erased
    when it runs or its approval ends."""

    approval = models.OneToOneField("tools_app.ApprovalRequest", primary_key=True, on_delete=models.CASCADE,
                                    related_name="+")
    agent = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="+")
    sealed_arguments = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "MCP approval awaiting resumption"
        indexes = [models.Index(fields=["agent"], name="mcp_resume_agent")]

    def __str__(self) -> str:
        return f"{self.approval_id} ({self.agent_id})"


class MCPTaskStatus(models.TextChoices):
    """Where an MCP task stands. `running` (approved and claimed by one process) is `working` on the wire."""

    WORKING = "working", "waiting for a person"
    RUNNING = "running", "approved, running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class MCPTask(models.Model):
    """A tools/call that waits for a person, answered as an MCP task (the `io.modelcontextprotocol/tasks`
    extension, docs/mcp-server.md "Tasks"): bound to its approval and the exact arguments (sealed to this row and
    agent), run at most once by whichever process first finds the approval granted, its result kept sealed until
    `expires_at`. Any process serves any task; another agent's task is unknown."""

    id = models.UUIDField(primary_key=True, editable=False)
    agent = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="+")
    approval = models.OneToOneField("tools_app.ApprovalRequest", on_delete=models.CASCADE, related_name="+")
    tool_name = models.CharField(max_length=128)
    status = models.CharField(max_length=10, choices=MCPTaskStatus.choices, default=MCPTaskStatus.WORKING)
    status_message = models.CharField(max_length=500, blank=True)
    sealed_arguments = models.TextField(blank=True, help_text="the exact call; erased once it ran or can no longer run")
    sealed_result = models.TextField(blank=True, help_text="completed: the tools/call result")
    error = models.JSONField(null=True, blank=True, help_text="failed: the JSON-RPC error ({code, message})")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    expires_at = models.DateTimeField(help_text="kept until then (ttlMs), then purged")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "MCP task"
        indexes = [models.Index(fields=["expires_at"], name="mcp_task_expiry"),
                   models.Index(fields=["updated_at"], condition=Q(status="running"), name="mcp_task_running")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.status} ({self.pk})"
