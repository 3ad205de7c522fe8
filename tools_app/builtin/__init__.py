"""Built-in tool groups. Each module in BUILTIN_MODULES exposes `TOOLS`, a list of Tool instances."""
from __future__ import annotations

import importlib

BUILTIN_MODULES = ("datetime_tool", "fs", "runtime", "outputs")


def register_builtin_tools(registry) -> None:
    for module_name in BUILTIN_MODULES:
        try:  # TEMPORARY while tool modules are being written
            module = importlib.import_module(f"tools_app.builtin.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tools_app.builtin.{module_name}":
                raise
            continue
        for tool in module.TOOLS:
            registry.register(tool, replace=True)
