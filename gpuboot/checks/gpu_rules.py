"""GPU-side rules read from nvidia-smi (-q, --query-gpu, mig -lgi) and the kernel log."""

from __future__ import annotations

from gpuboot.checks.base import (
    PASS,
    SYSTEMD_STATES,
    MissingEvidence,
    NodeContext,
    ProbeFailed,
    Result,
    not_applicable,
    probe,
    tool_failure,
)
from gpuboot.checks.smi import Q_FILE, QUERY_FILE, gpu_table, smi_q
from gpuboot.checks.stack_rules import installed_packages, nvidia_version
from gpuboot.collect import MIG_LGI_FILE, Evidence
from gpuboot.errors import ParseError
from gpuboot.evidence._common import to_int
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.mig import parse_mig_lgi
from gpuboot.stacks.versions import upstream_of

# Thermal slowdown is what an over-hot GPU shows. Plain "HW Slowdown" / "HW Power Brake
# Slowdown" without a thermal cause is NOT judged: healthy HGX H100 captures in the corpus
# (driver 535.161.08, idle at P0) report both active; a real slowdown shows in the probes.
THERMAL_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown")


def kernel_log(evidence: Evidence) -> str:
    """dmesg's text. A booted node's ring buffer always holds its boot messages (old lines
    are overwritten, never dropped), so an empty one was cleared or not readable: it cannot
    show that nothing happened since boot."""
    text = probe(evidence, "dmesg.txt").stdout
    if not text.strip():
        raise ProbeFailed(
            "dmesg printed nothing (kernel log cleared or unreadable)", where="dmesg.txt"
        )
    return text


def _name(gpu, i: int) -> str:
    return f"GPU {i} ({gpu.bus_id})"


def check_pci_ids(evidence: Evidence, ctx: NodeContext) -> str | None:
    want = str(ctx.hardware["gpu"]["pci_device_id"]).upper()
    q = smi_q(evidence)
    bad = []
    for i, g in enumerate(q.gpus):
        got = (g.fields.get("PCI/Device Id") or g.fields.get("pci/pci_device_id") or "").upper()
        if got and got != want:
            bad.append(f"{_name(g, i)} has PCI device id {got}")
    return f"{'; '.join(bad)}; profile expects {want}" if bad else None


def _pcie_rows(
    evidence: Evidence,
) -> list[tuple[str, int | None, int | None, int | None, int | None]]:
    """(gpu, gen_cur, gen_max, width_cur, width_max) from --query-gpu, else from -q."""
    if QUERY_FILE in evidence:
        failure, rows, _lost = gpu_table(evidence)
        if not failure and rows and "pcie.link.gen.max" in rows[0].values:
            return [
                (
                    f"GPU {r.text('index') if 'index' in r.values else i}",
                    to_int(r.values.get("pcie.link.gen.current")),
                    to_int(r.values.get("pcie.link.gen.max")),
                    to_int(r.values.get("pcie.link.width.current")),
                    to_int(r.values.get("pcie.link.width.max")),
                )
                for i, r in enumerate(rows)
            ]
    if Q_FILE not in evidence and "dmesg.txt" in evidence:
        return []  # a kernel-log-only bundle: judge the "limited by" notices alone
    if Q_FILE not in evidence:
        raise MissingEvidence("neither --query-gpu nor -q was collected", where=QUERY_FILE)
    return [
        (_name(g, i), g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max)
        for i, g in enumerate(smi_q(evidence).gpus)
    ]


def check_pcie_link(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """Judge the link against its max, not its idle state: an idle GPU drops to Gen1 to save
    power (the L40S trap) and retrains under load, so current gen < max alone is no fault.
    A lost lane (width), a max below the SKU's, or a kernel "limited by" notice is."""
    sku_gen = int(ctx.hardware["gpu"]["pcie"]["gen_max"])
    sku_width = int(ctx.hardware["gpu"]["pcie"]["width_max"])
    problems, idle = [], []
    for gpu, gen_cur, gen_max, w_cur, w_max in _pcie_rows(evidence):
        if gen_max is not None and gen_max < sku_gen:
            problems.append(f"{gpu} link max Gen{gen_max}, SKU is Gen{sku_gen}")
        if w_max is not None and w_max < sku_width:
            problems.append(f"{gpu} link max x{w_max}, SKU is x{sku_width}")
        if w_cur is not None and w_max is not None and w_cur < w_max:
            problems.append(f"{gpu} trained at x{w_cur} of x{w_max} (lanes lost)")
        if gen_cur is not None and gen_max is not None and gen_cur < gen_max:
            idle.append(gpu)
    if "dmesg.txt" in evidence:
        for lim in parse_kernel_log(kernel_log(evidence)).pcie_limits:
            problems.append(
                f"kernel: {lim.device} limited to {lim.available_gbits_s:g} Gb/s by "
                f"{lim.limiting_device} ({lim.limited_by_gts:g} GT/s x{lim.limited_width}, "
                f"capable of {lim.capable_gbits_s:g} Gb/s)"
            )
    if problems:
        return "; ".join(problems)
    if idle:
        return Result(
            PASS,
            f"at max width; {len(idle)} GPU(s) below max gen while idle (link power saving, "
            "judged against max and under load by the bandwidth probes)",
        )
    return None


def check_ecc(evidence: Evidence, ctx: NodeContext) -> str | None:
    problems = []
    for i, g in enumerate(smi_q(evidence).gpus):
        if g.ecc_mode_current is False:
            problems.append(f"{_name(g, i)} ECC mode disabled")
        vol = g.ecc_volatile
        if vol is not None:
            unc = vol.uncorrectable_total or vol.dram_uncorrectable or vol.sram_uncorrectable
            if unc:
                problems.append(f"{_name(g, i)} {unc} uncorrectable ECC error(s) since reset")
    return "; ".join(problems) or None


def check_remap_pending(evidence: Evidence, ctx: NodeContext) -> str | None:
    problems = []
    for i, g in enumerate(smi_q(evidence).gpus):
        rr, rp = g.remapped_rows, g.retired_pages
        if rr is not None and rr.pending:
            problems.append(f"{_name(g, i)} row remap pending (GPU reset needed to apply it)")
        if rp is not None and rp.pending:
            problems.append(f"{_name(g, i)} page retirement pending (GPU reset needed)")
    return "; ".join(problems) or None


def check_remap_failure(evidence: Evidence, ctx: NodeContext) -> str | None:
    bad = [
        f"{_name(g, i)} row remapping failure"
        for i, g in enumerate(smi_q(evidence).gpus)
        if g.remapped_rows is not None and g.remapped_rows.failure
    ]
    return "; ".join(bad) or None


def check_throttle(evidence: Evidence, ctx: NodeContext) -> str | None:
    problems = []
    for i, g in enumerate(smi_q(evidence).gpus):
        active = [r for r in (g.clock_event_reasons_active or ()) if r in THERMAL_REASONS]
        if active:
            temp = f" at {g.temperature_gpu_c:g} C" if g.temperature_gpu_c is not None else ""
            problems.append(f"{_name(g, i)} {', '.join(active)} active{temp}")
    return "; ".join(problems) or None


def check_mig_layout(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """Each GPU as ``nvidia_mig_layout`` wants it: MIG mode on iff its entry lists instances,
    and the GPU instances (-lgi) the same profiles, in any order. Instances do not survive a
    reboot or GPU reset, so a node that lost them fails here until they are re-created."""
    layout = ctx.var("nvidia_mig_layout")
    if layout is None:
        return not_applicable("the host does not manage MIG (nvidia_mig_layout unset)")
    if not ctx.hardware.get("mig", {}).get("supported"):
        return not_applicable("the SKU has no MIG (hardware.mig.supported: false)")
    failure, rows, _lost = gpu_table(evidence)
    if failure:
        raise ProbeFailed(failure, where=QUERY_FILE)
    out = probe(evidence, MIG_LGI_FILE)
    try:  # "No MIG-enabled devices found." / "No GPU instances found" parse as no instance
        instances = parse_mig_lgi(out.stdout).items
    except ParseError as exc:
        why = tool_failure("nvidia-smi mig -lgi", out) or str(exc)
        raise ProbeFailed(why, where=MIG_LGI_FILE) from None
    mode = {r.index: r.mig_mode_current for r in rows}
    # A pending mode (set, not yet applied) changes the GPU at its next reset or reboot.
    pending = {r.index: r.as_bool("mig.mode.pending") for r in rows}
    problems = []
    for i, want in enumerate(layout):
        if i not in mode:
            problems.append(f"GPU {i}: not listed by nvidia-smi")
            continue
        if bool(mode[i]) != bool(want):
            state = "Enabled" if mode[i] else "Disabled"
            problems.append(f"GPU {i}: MIG mode {state}, want {'Enabled' if want else 'Disabled'}")
            continue
        if pending.get(i) is not None and bool(pending[i]) != bool(want):
            state = "Enabled" if pending[i] else "Disabled"
            problems.append(
                f"GPU {i}: MIG mode {state} pending (applied at the next GPU reset or reboot), "
                f"want {'Enabled' if want else 'Disabled'}"
            )
        got = sorted(gi.name for gi in instances if gi.gpu == i)
        if got != sorted(want):
            problems.append(
                f"GPU {i}: instances {', '.join(got) or 'none'}, want {', '.join(sorted(want))}"
            )
    return "; ".join(problems) or None


FM_ACTIVE = "systemctl_is-active_nvidia-fabricmanager.txt"


def check_fabric_manager(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """NVSwitch boards need nv-fabricmanager at exactly the driver's version; until it has
    trained the fabric every GPU reports fabric state "In Progress" and CUDA refuses."""
    if int(ctx.hardware["nvlink"].get("nvswitch_count", 0) or 0) == 0:
        return not_applicable("no NVSwitch on this SKU")
    if not ctx.enabled("nvidia_fabricmanager_enabled"):
        return not_applicable("the host's stack does not manage fabric manager")
    problems = []
    active = probe(evidence, FM_ACTIVE).stdout.strip()
    if active not in SYSTEMD_STATES:
        raise ProbeFailed(
            f"systemctl is-active printed no unit state: {active[:60]!r}", where=FM_ACTIVE
        )
    if active != "active":
        problems.append(f"nvidia-fabricmanager service is {active}")
    want = str(ctx.var("nvidia_driver_version", "")).split(":")[-1].rsplit("-", 1)[0]
    loaded = nvidia_version(evidence)  # kernel side; None: no module loaded
    installed = _fm_package_version(evidence)
    if installed is None:
        problems.append("no nvidia-fabricmanager package installed")
    elif loaded and installed != loaded:
        problems.append(f"fabric manager {installed} does not match the loaded driver {loaded}")
    elif want and installed != want:
        problems.append(f"fabric manager {installed}, pinned driver {want}")
    for i, g in enumerate(smi_q(evidence).gpus):
        if g.fabric_state is not None and (g.fabric_state, g.fabric_status) != (
            "Completed",
            "Success",
        ):
            problems.append(f"{_name(g, i)} fabric {g.fabric_state}/{g.fabric_status}")
    return "; ".join(problems) or None


def _fm_package_version(evidence: Evidence) -> str | None:
    for pkg in installed_packages(evidence).values():
        if pkg.name.startswith("nvidia-fabricmanager") and pkg.installed:
            return upstream_of(pkg.version)
    return None
