"""gpuboot's exception family.

Library code raises these; only ``gpuboot.cli`` turns them into a message and an
exit code. Every error carries a hint: what the operator should do next.
"""

from __future__ import annotations

# Exit codes (documented in README.md).
EXIT_OK = 0
EXIT_NODE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_RUN_BROKE = 3


class GpubootError(Exception):
    """Base class: a message, where it happened, and what to do about it."""

    exit_code = EXIT_RUN_BROKE

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        parts = [f"{self.where}: {self.message}" if self.where else self.message]
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return " -- ".join(parts)


class BadInput(GpubootError):
    """Configuration, inventory, stack or usage error: nothing has been touched."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(BadInput):
    """A file is missing, malformed or breaks a rule (``where`` = file and key)."""


class RunError(GpubootError):
    """The run itself broke (runner, podman, harness), not a node."""

    exit_code = EXIT_RUN_BROKE


class ParseError(GpubootError):
    """A tool's output could not be read: the harness cannot judge, so ERROR, never FAIL."""

    exit_code = EXIT_RUN_BROKE

    def __init__(self, tool: str, message: str, *, hint: str | None = None):
        super().__init__(message, where=tool, hint=hint)
        self.tool = tool
