"""A host's meta.json: the context `gpuboot evaluate` needs to judge its evidence as
certify did.

meta.json keeps an allow-list of the host's variables, never one named like a secret:
an inventory also holds mirror URLs with credentials, tokens and passwords.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from gpuboot import __version__
from gpuboot.components import components

# What meta.json's "pins" records of a host's variables: exactly what the rules read
# (ctx.var / ctx.enabled / hostvars in gpuboot/checks and gpuboot/probes) and the
# stack's pins, so `gpuboot evaluate` judges as certify did. Nothing else.
_COMPONENTS = tuple(c.prefix for c in components() if c.generic_vars)  # components.yaml
BUNDLE_VARS = frozenset(
    {
        "gpuboot_profile",
        "gpuboot_stack",
        "gpuboot_os_family",
        "gpuboot_probes",
        "gpuboot_baseline_manage_kernel",
        "gpuboot_roce_pfc_priorities",
        "gpuboot_roce_trust",
        "gpuboot_rdma_cni",
        "gpuboot_rdma_vfs",
        "gpuboot_rdma_cm_dscp",
        "gpuboot_rdma_mtu",
        "gpuboot_thresholds",
        "gpuboot_mig",
        "nvidia_mig_layout",
        "kernel_version",
        "kernel_package_version",
        "kernel_packages",
        "kernel_hold_method",
        "kernel_hold_packages",
        "nvidia_driver_branch",
        "nvidia_driver_version",
        "nvidia_driver_flavor",
        "nvidia_driver_packages",
        "nvidia_driver_module_stream",
        "nvidia_peermem_enabled",
        *(f"{c}_{k}" for c in _COMPONENTS for k in ("enabled", "package", "version", "packages")),
    }
)
_SECRET_WORDS = ("password", "passwd", "token", "secret", "credential", "_key")
_URL_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")


def _scrub(value: Any) -> Any:
    """Credentials out of any URL in a recorded value (``https://user:pw@host`` -> host)."""
    if isinstance(value, str):
        return _URL_USERINFO.sub(r"\1", value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    return value


def bundle_pins(hostvars: dict) -> dict:
    """The allow-listed variables a bundle records (never one named like a secret)."""
    return {
        k: _scrub(v)
        for k, v in sorted(hostvars.items())
        if k in BUNDLE_VARS and not any(w in k.lower() for w in _SECRET_WORDS)
    }


def node_meta(
    name: str, hostvars: dict, level: str, commands: Mapping[str, str], started: float
) -> dict:
    """A host's meta.json as certify keeps it: what `gpuboot evaluate` needs to judge the
    bundle as certify did (profile, the allow-listed variables, the probe level, each
    file's command), no more."""
    return {
        "host": name,
        "profile": hostvars.get("gpuboot_profile"),
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "collect_s": round(time.time() - started, 3),
        "gpuboot": __version__,
        "pins": bundle_pins(hostvars),
        "probes": level,
        "commands": dict(commands),
    }
