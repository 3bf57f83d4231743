"""Compatibility rules: each with an id, a one-line statement and the source it rests on.

``check_stack`` runs every rule and returns every violation (never just the first), so
an operator fixes a stack in one pass. Rules that need the SKU (fabric manager on an
NVSwitch board, GPU architecture) run only when a profile is given. README.md carries
the same table for humans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuboot.errors import ConfigError
from gpuboot.stacks.model import Stack
from gpuboot.stacks.versions import upstream_tuple

FM_GUIDE = "NVIDIA Fabric Manager User Guide, https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/"
GPU_OPERATOR_RDMA = (
    "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html"
)
CUDA_NOTES = (
    "CUDA Toolkit Release Notes, 'CUDA Toolkit and Minimum Required Driver Version' tables, "
    "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"
)

# Minor-version compatibility: a CUDA major runs (with limits) on any driver >= this.
CUDA_MAJOR_MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580"}
# Full compatibility: the driver a CUDA release (GA) shipped with, per the release notes.
CUDA_RELEASE_MIN_DRIVER = {
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}
# DOCA-OFED release -> host OS it supports -> kernel release prefix of that OS (its GA
# kernel series; DKMS rebuilds the modules for errata kernels of the same series).
DOCA_KERNELS = {
    "2.9.1": {
        "ubuntu20.04": "5.4.0-",
        "ubuntu22.04": "5.15.0-",
        "ubuntu24.04": "6.8.0-",
        "debian12": "6.1.0-",
        "rhel8.10": "4.18.0-553.",
        "rhel9.4": "5.14.0-427.",
        "rocky9.4": "5.14.0-427.",
    },
    "3.0.0": {
        "ubuntu22.04": "5.15.0-",
        "ubuntu24.04": "6.8.0-",
        "debian12": "6.1.0-",
        "rhel8.10": "4.18.0-553.",
        "rhel9.4": "5.14.0-427.",
        "rhel9.5": "5.14.0-503.",
        "rocky9.5": "5.14.0-503.",
    },
}
# GDS kernel module releases from this one on run only on the open GPU kernel modules.
GDS_OPEN_ONLY_FROM = "2.17.5"
TURING = (7, 5)  # compute capability of the first GPUs the open modules support


@dataclass(frozen=True)
class Violation:
    rule_id: str
    where: str
    message: str
    fix: str
    source: str

    def __str__(self) -> str:
        return f"{self.rule_id} {self.where}: {self.message} -- fix: {self.fix}"


@dataclass(frozen=True)
class _Ctx:
    stack: Stack
    profile: dict[str, Any] | None
    label: str

    @property
    def profile_name(self) -> str:
        return str((self.profile or {}).get("name", "the profile"))

    def hardware(self, *keys: str) -> Any:
        node: Any = (self.profile or {}).get("hardware", {})
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    @property
    def compute_cap(self) -> tuple[int, int] | None:
        cap = self.hardware("gpu", "compute_cap")
        if cap is None:
            return None
        major, _, minor = str(cap).partition(".")
        return int(major), int(minor or 0)


@dataclass(frozen=True)
class Rule:
    id: str
    statement: str
    source: str
    needs_profile: bool
    check: Callable[[Rule, _Ctx], list[Violation]]

    def violation(self, ctx: _Ctx, key: str, message: str, fix: str) -> Violation:
        return Violation(self.id, f"{ctx.label}: {key}", message, fix, self.source)


def _ge(version: str, minimum: str) -> bool:
    return upstream_tuple(version) >= upstream_tuple(minimum)


def _newest_cuda_for(driver: str) -> str | None:
    """The newest CUDA release a driver fully supports (for a concrete fix)."""
    ok = [rel for rel, minimum in CUDA_RELEASE_MIN_DRIVER.items() if _ge(driver, minimum)]
    return "{}.{}".format(*max(ok)) if ok else None


# ------------------------------------------------------------------ rule bodies
def _fm_matches_driver(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    if not s.fabricmanager.enabled or s.fabricmanager.version == s.driver.version:
        return []
    return [
        rule.violation(
            ctx,
            "fabricmanager.version",
            f"fabric manager {s.fabricmanager.version} does not match driver {s.driver.version}; "
            "nv-fabricmanager refuses to start on a mismatch and the GPUs stay uninitialised",
            f"set fabricmanager.version to {s.driver.version} (and its packages to "
            f"{s.driver.version}-<revision>)",
        )
    ]


def _nscq_matches_driver(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    if s.nscq.enabled != s.fabricmanager.enabled:
        state = "enabled" if s.nscq.enabled else "disabled"
        other = "disabled" if s.nscq.enabled else "enabled"
        return [
            rule.violation(
                ctx,
                "nscq.enabled",
                f"NSCQ is {state} while fabric manager is {other}",
                "enable NSCQ exactly when fabric manager is enabled (NVSwitch SKUs)",
            )
        ]
    if s.nscq.enabled and s.nscq.version != s.driver.version:
        return [
            rule.violation(
                ctx,
                "nscq.version",
                f"libnvidia-nscq {s.nscq.version} does not match driver {s.driver.version}",
                f"set nscq.version to {s.driver.version}",
            )
        ]
    return []


def _fm_only_on_nvswitch(rule: Rule, ctx: _Ctx) -> list[Violation]:
    count = ctx.hardware("nvlink", "nvswitch_count") or 0
    if count > 0 or not ctx.stack.fabricmanager.enabled:
        return []
    return [
        rule.violation(
            ctx,
            "fabricmanager.enabled",
            f"fabric manager is enabled but {ctx.profile_name} has no NVSwitch "
            "(hardware.nvlink.nvswitch_count is 0); the service fails to start there",
            "use a stack with fabricmanager.enabled: false and nscq.enabled: false for this SKU",
        )
    ]


def _nvswitch_needs_fm(rule: Rule, ctx: _Ctx) -> list[Violation]:
    count = ctx.hardware("nvlink", "nvswitch_count") or 0
    if count == 0 or ctx.stack.fabricmanager.enabled:
        return []
    return [
        rule.violation(
            ctx,
            "fabricmanager.enabled",
            f"{ctx.profile_name} has {count} NVSwitches but the stack installs no fabric manager; "
            "CUDA cannot initialise the GPUs without it",
            "use a stack that enables fabricmanager and nscq at the driver's version",
        )
    ]


def _open_needs_turing(rule: Rule, ctx: _Ctx) -> list[Violation]:
    cap = ctx.compute_cap
    if ctx.stack.driver.flavor != "open" or cap is None or cap >= TURING:
        return []
    return [
        rule.violation(
            ctx,
            "driver.flavor",
            f"open kernel modules do not support {ctx.profile_name} "
            f"(compute capability {cap[0]}.{cap[1]} < 7.5)",
            "set driver.flavor: proprietary (and drop GPUDirect Storage) for this SKU",
        )
    ]


def _driver_names(rule: Rule, ctx: _Ctx) -> list[Violation]:
    d = ctx.stack.driver
    suffix = "-open" if d.flavor == "open" else ""
    out: list[Violation] = []
    deb = d.pins_for("debian")
    want_deb = {
        f"nvidia-driver-{d.branch}{suffix}",
        f"nvidia-dkms-{d.branch}{suffix}",
        f"nvidia-utils-{d.branch}",
        f"nvidia-compute-utils-{d.branch}",
    }
    have_deb = {p.name for p in deb.packages}
    if deb.package != f"nvidia-driver-{d.branch}{suffix}" or not want_deb <= have_deb:
        out.append(
            rule.violation(
                ctx,
                "driver.debian",
                f"packages {sorted(have_deb)} do not match branch {d.branch}, flavor {d.flavor}",
                f"list nvidia-driver-{d.branch}{suffix} as package and "
                f"{sorted(want_deb - {f'nvidia-driver-{d.branch}{suffix}'})} as depends",
            )
        )
    rh = d.pins_for("redhat")
    stream = f"nvidia-driver:{d.branch}-{'open' if d.flavor == 'open' else 'dkms'}"
    kmod = "kmod-nvidia-open-dkms" if d.flavor == "open" else "kmod-nvidia-latest-dkms"
    have_rh = {p.name for p in rh.packages}
    if rh.module_stream != stream or kmod not in have_rh:
        out.append(
            rule.violation(
                ctx,
                "driver.redhat",
                f"module stream {rh.module_stream!r} / packages {sorted(have_rh)} do not match "
                f"branch {d.branch}, flavor {d.flavor}",
                f"set module_stream: {stream} and list {kmod} in depends",
            )
        )
    return out


def _fm_names(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s, branch = ctx.stack, ctx.stack.driver.branch
    new_rpm_names = int(branch) >= 580  # NVIDIA's RHEL repo renamed both at R580
    expected = {
        ("fabricmanager", "debian"): f"nvidia-fabricmanager-{branch}",
        ("fabricmanager", "redhat"): "nvidia-fabricmanager"
        if new_rpm_names
        else "nvidia-fabric-manager",
        ("nscq", "debian"): f"libnvidia-nscq-{branch}",
        ("nscq", "redhat"): "libnvidia-nscq" if new_rpm_names else f"libnvidia-nscq-{branch}",
    }
    out = []
    for (component, family), name in expected.items():
        comp = s.parts[component]
        if comp.enabled and comp.pins_for(family).package != name:
            out.append(
                rule.violation(
                    ctx,
                    f"{component}.{family}.package",
                    f"{comp.pins_for(family).package} is not the {component} package of driver "
                    f"branch {branch}",
                    f"set {component}.{family}.package: {name}",
                )
            )
    return out


def _cuda_major_driver(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    major = s.cuda_major_minor[0]
    minimum = CUDA_MAJOR_MIN_DRIVER.get(major)
    if minimum is None:
        return [
            rule.violation(
                ctx,
                "cuda.version",
                f"no minimum driver is known for CUDA {major}.x",
                f"add CUDA {major} to CUDA_MAJOR_MIN_DRIVER in gpuboot/stacks/rules.py from "
                "the CUDA release notes",
            )
        ]
    if _ge(str(s.driver.version), minimum):
        return []
    return [
        rule.violation(
            ctx,
            "driver.version",
            f"CUDA {s.cuda.version} needs driver >= {minimum} (CUDA {major}.x minor-version "
            f"compatibility); driver {s.driver.version} cannot run CUDA {major} applications",
            f"use a driver >= {minimum}, or a CUDA toolkit <= "
            f"{_newest_cuda_for(str(s.driver.version)) or '(none known)'} that driver "
            f"{s.driver.version} supports",
        )
    ]


def _cuda_release_driver(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    major, minor = s.cuda_major_minor
    major_min = CUDA_MAJOR_MIN_DRIVER.get(major)
    if major_min is None or not _ge(str(s.driver.version), major_min):
        return []  # CMP-010 already refuses the stack; one message per fault
    minimum = CUDA_RELEASE_MIN_DRIVER.get((major, minor))
    if minimum is None:
        return [
            rule.violation(
                ctx,
                "cuda.version",
                f"no minimum driver is known for CUDA {major}.{minor}",
                f"add ({major}, {minor}) to CUDA_RELEASE_MIN_DRIVER in gpuboot/stacks/rules.py "
                "from the release notes table",
            )
        ]
    if _ge(str(s.driver.version), minimum):
        return []
    return [
        rule.violation(
            ctx,
            "driver.version",
            f"CUDA {major}.{minor} needs driver >= {minimum} for full compatibility; driver "
            f"{s.driver.version} only gives minor-version compatibility (no PTX JIT of newer code)",
            f"use a driver >= {minimum} or an older CUDA {major}.x toolkit",
        )
    ]


def _cuda13_arch(rule: Rule, ctx: _Ctx) -> list[Violation]:
    cap = ctx.compute_cap
    major, _ = ctx.stack.cuda_major_minor
    if major < 13 or cap is None or cap >= TURING:
        return []
    return [
        rule.violation(
            ctx,
            "cuda.version",
            f"CUDA {ctx.stack.cuda.version} dropped Maxwell/Pascal/Volta; {ctx.profile_name} has "
            f"compute capability {cap[0]}.{cap[1]}",
            "use a CUDA 12.x toolkit for this SKU",
        )
    ]


def _gds_needs_ofed(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    if not s.nvidia_fs.enabled or s.doca_ofed.enabled:
        return []
    return [
        rule.violation(
            ctx,
            "nvidia_fs.enabled",
            "GPUDirect Storage (nvidia-fs) is enabled without DOCA-OFED/MLNX_OFED",
            "enable doca_ofed, or set nvidia_fs.enabled: false",
        )
    ]


def _gds_needs_open(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    if not s.nvidia_fs.enabled or s.driver.flavor == "open":
        return []
    if not _ge(str(s.nvidia_fs.version), GDS_OPEN_ONLY_FROM):
        return []
    return [
        rule.violation(
            ctx,
            "driver.flavor",
            f"nvidia-fs {s.nvidia_fs.version} (GPUDirect Storage) needs the open GPU kernel "
            "modules; the stack installs the proprietary ones",
            f"set driver.flavor: open (nvidia-driver-{s.driver.branch}-open, "
            f"nvidia-dkms-{s.driver.branch}-open), or set nvidia_fs.enabled: false",
        )
    ]


def _gds_matches_cuda(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    if not s.nvidia_fs.enabled:
        return []
    major, minor = s.cuda_major_minor
    want = f"nvidia-gds-{major}-{minor}"
    out = []
    for family in ("debian", "redhat"):
        for i, pkg in enumerate(s.nvidia_fs.pins_for(family).depends):
            if pkg.name.startswith("nvidia-gds-") and pkg.name != want:
                out.append(
                    rule.violation(
                        ctx,
                        f"nvidia_fs.{family}.depends[{i}]",
                        f"{pkg.name} is the GDS userspace of another CUDA release than "
                        f"{s.cuda.version}",
                        f"use {want}={s.cuda.pins_for(family).version}",
                    )
                )
    return out


def _peermem_needs_ofed(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    if not s.nvidia_peermem.enabled or s.doca_ofed.enabled:
        return []
    return [
        rule.violation(
            ctx,
            "nvidia_peermem.enabled",
            "nvidia_peermem is enabled but DOCA-OFED is not: the module needs ib_core with the "
            "PeerDirect API from MLNX_OFED/DOCA-OFED and will not load",
            "enable doca_ofed, or set nvidia_peermem.enabled: false (use DMA-BUF instead)",
        )
    ]


def _peermem_needs_r470(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    if not s.nvidia_peermem.enabled or int(s.driver.branch) >= 470:
        return []
    return [
        rule.violation(
            ctx,
            "nvidia_peermem.enabled",
            f"driver branch {s.driver.branch} ships no nvidia_peermem (it came with R470)",
            "use a driver branch >= 470, or disable nvidia_peermem",
        )
    ]


def _ofed_kernel(rule: Rule, ctx: _Ctx) -> list[Violation]:
    s = ctx.stack
    if not s.doca_ofed.enabled:
        return []
    supported = DOCA_KERNELS.get(str(s.doca_ofed.version))
    if supported is None:
        return [
            rule.violation(
                ctx,
                "doca_ofed.version",
                f"no supported-kernel list is known for DOCA {s.doca_ofed.version}",
                "add it to DOCA_KERNELS in gpuboot/stacks/rules.py from the DOCA release notes",
            )
        ]
    out = []
    for family in ("debian", "redhat"):
        k = s.kernel_pins(family)
        prefix = supported.get(k.distro)
        if prefix is None or not k.release.startswith(prefix):
            out.append(
                rule.violation(
                    ctx,
                    f"kernel.{family}.release",
                    f"DOCA {s.doca_ofed.version} does not support kernel {k.release} on {k.distro}",
                    "pin a kernel DOCA supports: "
                    + ", ".join(f"{d} {p}*" for d, p in sorted(supported.items())),
                )
            )
    return out


RULES: tuple[Rule, ...] = (
    Rule(
        "CMP-001",
        "Fabric manager's version equals the driver's version exactly.",
        FM_GUIDE + "; https://github.com/NVIDIA/yum-packaging-fabric-manager README",
        False,
        _fm_matches_driver,
    ),
    Rule(
        "CMP-002",
        "NSCQ (libnvidia-nscq) comes with fabric manager, at the driver's exact version.",
        "https://github.com/NVIDIA/yum-packaging-libnvidia-nscq README; " + FM_GUIDE,
        False,
        _nscq_matches_driver,
    ),
    Rule(
        "CMP-003",
        "Fabric manager is installed only on NVSwitch SKUs.",
        FM_GUIDE + " (NVSwitch-based HGX/DGX systems)",
        True,
        _fm_only_on_nvswitch,
    ),
    Rule("CMP-004", "An NVSwitch SKU gets fabric manager.", FM_GUIDE, True, _nvswitch_needs_fm),
    Rule(
        "CMP-005",
        "Open GPU kernel modules only on Turing or newer (compute capability >= 7.5).",
        "NVIDIA Driver Installation Guide, 'Kernel Modules'; "
        "https://github.com/NVIDIA/open-gpu-kernel-modules README",
        True,
        _open_needs_turing,
    ),
    Rule(
        "CMP-006",
        "Driver package names follow the branch and flavor (apt: "
        "nvidia-driver-<branch>[-open]; dnf: module stream nvidia-driver:<branch>-open or -dkms).",
        "NVIDIA CUDA repository package names; NVIDIA Driver Installation Guide "
        "(RHEL modularity streams)",
        False,
        _driver_names,
    ),
    Rule(
        "CMP-007",
        "Fabric manager and NSCQ package names belong to the driver's branch "
        "(RHEL: nvidia-fabric-manager/libnvidia-nscq-<branch> before R580, "
        "nvidia-fabricmanager/libnvidia-nscq from R580).",
        "https://github.com/NVIDIA/gpu-driver-container rhel9/install.sh; NVIDIA CUDA repository",
        False,
        _fm_names,
    ),
    Rule(
        "CMP-010",
        "The driver meets the CUDA major's minor-version-compatibility minimum "
        "(11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580).",
        CUDA_NOTES + "; https://docs.nvidia.com/deploy/cuda-compatibility/",
        False,
        _cuda_major_driver,
    ),
    Rule(
        "CMP-011",
        "The driver meets the CUDA release's full-compatibility minimum "
        "(e.g. 12.4 >= 550.54.14, 12.8 >= 570.26, 13.0 >= 580.65.06).",
        CUDA_NOTES,
        False,
        _cuda_release_driver,
    ),
    Rule(
        "CMP-012",
        "CUDA 13 runs only on Turing or newer (compute capability >= 7.5).",
        "CUDA 13.0 Release Notes, dropped Maxwell/Pascal/Volta support",
        True,
        _cuda13_arch,
    ),
    Rule(
        "CMP-020",
        "GPUDirect Storage (nvidia-fs) comes with DOCA-OFED/MLNX_OFED.",
        "GPUDirect Storage Release Notes, 'MLNX_OFED/DOCA and File System Requirements', "
        "https://docs.nvidia.com/gpudirect-storage/release-notes/; "
        "https://github.com/NVIDIA/gds-nvidia-fs README (MOFED 5.1 or above)",
        False,
        _gds_needs_ofed,
    ),
    Rule(
        "CMP-021",
        "nvidia-fs >= 2.17.5 runs only on the open GPU kernel modules.",
        "GPU Operator docs 'GPUDirect RDMA and GPUDirect Storage', "
        + GPU_OPERATOR_RDMA
        + "; https://docs.nvidia.com/gpudirect-storage/nvidia_fs/ "
        "'Install NVIDIA Open Source Driver'",
        False,
        _gds_needs_open,
    ),
    Rule(
        "CMP-022",
        "The GDS userspace package is the CUDA release's (nvidia-gds-<major>-<minor>).",
        "NVIDIA CUDA Installation Guide for Linux, GDS packages",
        False,
        _gds_matches_cuda,
    ),
    Rule(
        "CMP-030",
        "nvidia_peermem needs DOCA-OFED/MLNX_OFED (ib_core with PeerDirect).",
        "GPU Operator docs 'Using nvidia-peermem' (MOFED prerequisite), "
        + GPU_OPERATOR_RDMA
        + "; MLNX_OFED docs 'NVIDIA PeerDirect' (IB core peer-memory API)",
        False,
        _peermem_needs_ofed,
    ),
    Rule(
        "CMP-031",
        "nvidia_peermem ships with the driver from R470 on.",
        "GPU Operator docs (nvidia-peermem since CUDA 11.4 / R470), " + GPU_OPERATOR_RDMA,
        False,
        _peermem_needs_r470,
    ),
    Rule(
        "CMP-040",
        "The pinned kernel is one the DOCA-OFED release supports (OS and kernel series).",
        "DOCA-Host release notes and 'NVIDIA DOCA Profiles' (supported host OS per profile, "
        "doca-ofed), https://docs.nvidia.com/doca/sdk/NVIDIA+DOCA+Profiles",
        False,
        _ofed_kernel,
    ),
)


def check_stack(
    stack: Stack, profile: dict[str, Any] | None = None, *, where: str = ""
) -> list[Violation]:
    """Every violation of every rule (profile rules only with a profile), in rule order."""
    ctx = _Ctx(stack=stack, profile=profile, label=where or stack.label)
    found: list[Violation] = []
    for rule in RULES:
        if rule.needs_profile and profile is None:
            continue
        found.extend(rule.check(rule, ctx))
    return found


def require_compatible(
    stack: Stack, profile: dict[str, Any] | None = None, *, where: str = ""
) -> None:
    """Raise one ConfigError listing every violation (for callers that must refuse)."""
    found = check_stack(stack, profile, where=where)
    refuse(stack, found, f"breaks {len(found)} compatibility rule(s)", where=where)


def refuse(stack: Stack, found: list[Violation], what: str, *, where: str = "") -> None:
    """One ConfigError naming every violation in ``found`` (none: nothing to refuse)."""
    if found:
        lines = "; ".join(f"{v.rule_id} {v.where}: {v.message}" for v in found)
        raise ConfigError(
            f"stack {stack.name} {what}: {lines}",
            where=where or stack.label,
            hint="; ".join(dict.fromkeys(v.fix for v in found)),
        )
