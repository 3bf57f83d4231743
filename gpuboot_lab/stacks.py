"""The lab checks its own stacks: rule LAB-001, every package of a stack a lab runs, for
the OS family of its nodes, is one the lab repositories serve (packages.yaml: the debs
of the apt repository, the rpms of the EL one). The product's stack schema and rules
know nothing of the lab; `gpuboot lab up --stack` applies this after them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from gpuboot.errors import ConfigError
from gpuboot.stacks import Stack, Violation
from gpuboot.stacks.rules import refuse


@dataclass(frozen=True)
class LabRule:
    id: str
    statement: str
    source: str


LAB_RULE = LabRule(
    "LAB-001",
    "A lab stack uses only package versions the lab repository serves.",
    "gpuboot_lab/packages.yaml",
)


@cache
def _served(family: str) -> dict[str, frozenset[str]]:
    from gpuboot_lab.catalogue import load_catalogue

    cat = load_catalogue()
    served: dict[str, set[str]] = {}
    for pkg in cat.packages if family == "debian" else cat.rpms:
        served.setdefault(pkg.name, set()).add(pkg.version)
    return {name: frozenset(v) for name, v in served.items()}


def check_served(stack: Stack, *, where: str = "", family: str = "debian") -> list[Violation]:
    """A LAB-001 violation per ``family`` package version the lab repositories do not serve."""
    label = where or stack.label

    def violation(key: str, message: str, fix: str) -> Violation:
        return Violation(LAB_RULE.id, f"{label}: {key}", message, fix, LAB_RULE.source)

    try:
        served = _served(family)
    except ConfigError as exc:
        return [violation("lab", f"lab catalogue unreadable: {exc}", "fix packages.yaml")]
    out = []
    for comp in stack.components():
        if comp.name == "kernel" or not comp.enabled:
            continue  # lab nodes are containers on the host's kernel
        for pkg in comp.pins_for(family).packages:
            if pkg.version not in served.get(pkg.name, ()):
                have = sorted(served.get(pkg.name, ()))
                out.append(
                    violation(
                        f"{comp.name}.{family}",
                        f"{pkg.name}={pkg.version} is not served by the lab repository",
                        f"use one of {have}"
                        if have
                        else f"{pkg.name} is not in the lab catalogue ({LAB_RULE.source}): "
                        "add it there, or run this stack on real machines",
                    )
                )
    return out


def require_served(
    stack: Stack, *, where: str = "", families: tuple[str, ...] = ("debian",)
) -> None:
    """Raise one ConfigError listing every LAB-001 violation (the lab refuses the stack)."""
    found = [v for fam in families for v in check_served(stack, where=where, family=fam)]
    refuse(stack, found, "cannot run in the lab", where=where)
