"""Built-in tool groups. Each module in BUILTIN_MODULES exposes `TOOLS`, a list of Tool instances."""
from __future__ import annotations

import importlib

BUILTIN_MODULES = ("datetime_tool", "fs", "runtime", "outputs", "approvals")


def register_builtin_tools(registry) -> None:
    for module_name in BUILTIN_MODULES:
        module = importlib.import_module(f"tools_app.builtin.{module_name}")
        for tool in module.TOOLS:
            registry.register(tool, replace=True)
