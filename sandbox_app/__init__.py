"""Process execution behind a pluggable sandbox backend (host today; bubblewrap/docker later).

Dependency direction: tools_app -> sandbox_app. Nothing here imports tools_app, teams_app or mcp_app.
"""
