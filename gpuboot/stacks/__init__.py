"""Version stacks as data, and the compatibility rules engine.

A stack (``gpuboot/stacks/<name>.yaml``) pins every package of the GPU software stack
for Debian/Ubuntu and RHEL/Rocky. ``load_stack`` checks its schema, ``check_stack``
its compatibility rules; ``role_vars``, ``mirror_packages`` and ``compare`` derive what
the roles, an offline mirror and an upgrade plan need. Schema and rules: README.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuboot.errors import ConfigError
from gpuboot.filecache import FileCache
from gpuboot.stacks.model import OS_FAMILIES, Component, Driver, KernelPins, Package, Pins, Stack
from gpuboot.stacks.model import read_stack_file as _read
from gpuboot.stacks.plan import (
    PlanItem,
    compare,
    mirror_packages,
    needs_reboot,
    restarts,
    role_vars,
    table_vars,
)
from gpuboot.stacks.rules import RULES, Rule, Violation, check_stack, require_compatible

STACK_DIR = Path(__file__).resolve().parent
_PROJECT_DIR = STACK_DIR.parent.parent

__all__ = [
    "OS_FAMILIES",
    "RULES",
    "STACK_DIR",
    "Component",
    "Driver",
    "KernelPins",
    "Package",
    "Pins",
    "PlanItem",
    "Rule",
    "Stack",
    "Violation",
    "check_stack",
    "compare",
    "list_stacks",
    "load_stack",
    "mirror_packages",
    "needs_reboot",
    "require_compatible",
    "restarts",
    "role_vars",
    "table_vars",
]


def list_stacks() -> list[str]:
    """Names of the stacks shipped with gpuboot (file stems, sorted)."""
    return sorted(p.stem for p in STACK_DIR.glob("*.yaml"))


def _label(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(_PROJECT_DIR))
    except ValueError:
        return str(path)


def load_stack(name_or_path: str | Path) -> Stack:
    """A shipped stack by name, or a stack file by path; schema-checked (ConfigError)."""
    text = str(name_or_path)
    is_path = isinstance(name_or_path, Path) or "/" in text or text.endswith((".yaml", ".yml"))
    if not is_path:
        path = STACK_DIR / f"{text}.yaml"
        if not path.is_file():
            raise ConfigError(
                f"no stack named {text!r}",
                where="stack",
                hint=f"use one of: {', '.join(list_stacks())}, or give a path to a stack file",
            )
    else:
        path = Path(name_or_path)
    return _read_once(path)


# A Stack is frozen, so every caller may hold the same one.
_LOADED: FileCache[Stack] = FileCache()


def _read_once(path: Path) -> Stack:
    key = (os.path.abspath(path), path)  # the label and Stack.path follow the name given
    return _LOADED.get(key, path, lambda: _read(path, _label(path)))
