"""Governance configuration as code (docs/config-as-code.md): one YAML document exported and imported whole."""
