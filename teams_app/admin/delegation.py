"""Placeholder: HandoffRoute, AgentLink, Delegation admin."""
