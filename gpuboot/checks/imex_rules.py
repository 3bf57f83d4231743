"""IMEX rule: the daemon that shares GPU memory across the nodes of a multi-node NVLink domain
(GB200 NVL72) is installed at exactly the driver's version and its service is active.

NVIDIA ships IMEX with each driver release (nvidia-imex-<branch> on Debian/Ubuntu and, before
R580, on EL; nvidia-imex on EL from R580) and the daemon checks the loaded driver at start,
refusing one of another version (NVIDIA IMEX guide, "Getting Started"): a driver upgrade
without its IMEX leaves the domain without this node, and CUDA's cross-node memory with it.
"""

from __future__ import annotations

import re

from gpuboot.bundle import names
from gpuboot.bundle.model import Evidence
from gpuboot.checks.base import (
    NodeContext,
    Result,
    not_applicable,
)
from gpuboot.checks.stack_rules import driver_daemon_problems, installed_packages
from gpuboot.components import components
from gpuboot.stacks.versions import upstream_of

IMEX_ACTIVE = names.unit_active_file("nvidia-imex")


def check_imex(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    if not ctx.enabled("nvidia_imex_enabled"):
        return not_applicable("the host's stack does not manage IMEX")
    problems = driver_daemon_problems(
        evidence, ctx, "nvidia-imex", "nvidia-imex", imex_version(evidence)
    )
    return "; ".join(problems) or None


def imex_version(evidence: Evidence) -> str | None:
    """The upstream version of the installed IMEX package, whatever its branch suffix (the
    component table's package patterns, of either OS family)."""
    imex = next(c for c in components() if c.role == "nvidia_imex")
    names = [re.compile(p) for family in imex.families.values() for p, _slot in family]
    for name, pkg in installed_packages(evidence).items():
        if pkg.installed and any(n.match(name) for n in names):
            return upstream_of(pkg.version)
    return None
