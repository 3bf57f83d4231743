"""GPU-side rules read from nvidia-smi (-q, --query-gpu, mig -lgi) and the kernel log."""

from __future__ import annotations

from gpuboot.bundle.model import Evidence
from gpuboot.bundle.names import MIG_LGI_FILE
from gpuboot.bundle.names import QUERY_GPU_FILE as QUERY_FILE
from gpuboot.bundle.names import SMI_Q_FILE as Q_FILE
from gpuboot.checks.base import (
    PASS,
    MissingEvidence,
    NodeContext,
    ProbeFailed,
    Result,
    agree,
    forms_in,
    not_applicable,
    parsed,
    probe,
    tool_failure,
)
from gpuboot.checks.smi import (
    LOST_GPU,
    LOST_TEXT,
    gpu_table,
    lost_gpus,
    query_file,
    seen_or_incomplete,
    smi_q,
)
from gpuboot.checks.stack_rules import driver_daemon_problems, installed_packages
from gpuboot.errors import GpubootError, ParseError
from gpuboot.evidence._common import to_int
from gpuboot.evidence.forms import parser_of
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.mig import parse_mig_lgi
from gpuboot.evidence.nvidia_smi_q import NvidiaSmiQ
from gpuboot.evidence.nvidia_smi_table import NO_DEVICES, NO_DRIVER, NOT_FOUND, SmiTable
from gpuboot.stacks.versions import upstream_of

# Thermal slowdown is what an over-hot GPU shows. Plain "HW Slowdown" / "HW Power Brake
# Slowdown" without a thermal cause is NOT judged: healthy HGX H100 captures in the corpus
# (driver 535.161.08, idle at P0) report both active; a real slowdown shows in the probes.
THERMAL_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown")


def kernel_log(evidence: Evidence) -> str:
    """The kernel log's text, in the first form the node's evidence holds (kernel_logs reads
    every form). A booted node's ring buffer always holds its boot messages (old lines are
    overwritten, never dropped), so an empty one was cleared or not readable: it cannot show
    that nothing happened since boot."""
    return kernel_logs(evidence)[0][1]


def kernel_logs(evidence: Evidence) -> list[tuple[str, str]]:
    """(file, text) of every kernel-log form held: dmesg, `journalctl -k`, syslog/kern.log/
    messages lines (evidence/forms.py)."""
    found = forms_in(evidence, "kernel_log")
    if not found:
        raise MissingEvidence(
            "no kernel log (dmesg, journalctl -k, syslog) was collected", where="dmesg.txt"
        )
    for name, _form, out in found:
        if not out.stdout.strip():
            raise ProbeFailed(
                f"{name} printed nothing (kernel log cleared or unreadable)", where=name
            )
    return [(name, out.stdout) for name, _form, out in found]


_EVENT_KEYS = {
    "xids": lambda x: (x.code, x.pci, x.message),
    "sxids": lambda x: (x.code, x.switch, x.link, x.message, x.source),
    "pcie_limits": lambda x: x,
}


def kernel_events(evidence: Evidence, what: str) -> list:
    """Xids, SXids or PCIe limit notices across every kernel-log form. The forms keep
    different windows (the ring buffer overwrites, journald rate-limits, syslog rotates), so
    one form lacking a line is no contradiction: the fullest form is read, plus any event
    only another form kept (never twice: an SXid's repeat count stays the fullest form's)."""
    # XID-001, XID-002 and PCI-001 read the same logs of a node: each parsed once per node
    logs = [parsed(parse_kernel_log, text) for _name, text in kernel_logs(evidence)]
    per_form = [list(getattr(log, what)) for log in logs]
    per_form.sort(key=len, reverse=True)
    key = _EVENT_KEYS[what]
    events = per_form[0]
    seen = {key(e) for e in events}
    for other in per_form[1:]:
        extra = [e for e in other if key(e) not in seen]
        events += extra
        seen |= {key(e) for e in extra}
    return events


def check_gpu_count(evidence: Evidence, ctx: NodeContext) -> str | None:
    """GPU count and model from whichever nvidia-smi forms the node's evidence holds: the
    --query-gpu table, else ``-q`` (text or XML). A GPU nvidia-smi could not open ("Unable to
    determine the device handle for GPU <bus>: Unknown Error", in any of its outputs) fell
    off the bus: FAIL naming it, even where nothing else could be read."""
    gpu = ctx.hardware["gpu"]
    expected, model = int(gpu["count"]), gpu.get("model")
    lost = [f"GPU {bus} lost: {msg}" for bus, msg, _f in lost_gpus(evidence).values()]
    table = _table(evidence)  # a GPU printing ERR! is seen whatever else can be read
    erring = [
        f"GPU {g.index} ({g.bus_id}) shows ERR! ({', '.join(g.errors)}): nvidia-smi cannot "
        "read it from the GPU"
        for g in (table[1].gpus if table and table[1] else ())
        if g.errors
    ]
    try:
        seen, countable = _visible_gpus(evidence)
    except GpubootError:
        if lost or erring:  # the GPU nvidia-smi lost is the finding; the rest may be unreadable
            return "; ".join(lost + erring)
        raise
    if isinstance(seen, str):  # nvidia-smi itself could not run: the node's state
        return "; ".join([*lost, seen])
    problems = list(lost)
    if countable and len(seen) != expected:
        problems.insert(0, f"{len(seen)} of {expected} GPUs visible")
    problems += [
        f"GPU {label} is {name}, profile expects {model}"
        for label, name in seen
        if model and name and not _is_model(name, model)
    ]
    return "; ".join(problems + erring) or None


def _is_model(name: str, model: str) -> bool:
    """The plain table cuts a long name with "...": a cut name matches its prefix."""
    if name.endswith("..."):
        return model.startswith(name[:-3].rstrip())
    return name == model


# nvidia-smi's answers instead of a table: each a state of the node, named with its causes
_ANSWERS = {
    NO_DEVICES: (
        "nvidia-smi: No devices were found: the driver sees none of the node's GPUs; likely "
        "causes: the GPUs are off the bus (lspci shows them missing or as rev ff), the driver "
        "failed to initialise them (dmesg 'RmInitAdapter failed': BAR space, enable Above 4G "
        "decoding / Resizable BAR in the BIOS), or another driver holds them (nouveau, vfio)"
    ),
    NO_DRIVER: (
        "nvidia-smi could not talk to the NVIDIA driver: the kernel module is not loaded or "
        "does not match the userspace (lsmod | grep nvidia; dmesg | grep NVRM): no GPU is usable"
    ),
    NOT_FOUND: "nvidia-smi is not installed (command not found): the driver's userspace is missing",
}


def _table(evidence: Evidence) -> tuple[str, SmiTable | None] | None:
    """(file, table) of the plain `nvidia-smi` output, its lost-GPU lines set aside (None:
    it held only those, which lost_gpus names); None when no such file is held."""
    found = forms_in(evidence, "smi_table")
    if not found:
        return None
    name, form, out = found[0]
    kept = [ln for ln in out.stdout.splitlines() if not LOST_GPU.match(ln.strip())]
    if not "".join(kept).strip():
        return name, None
    try:
        return name, parsed(parser_of("smi_table", form), "\n".join(kept))
    except ParseError as exc:
        raise ProbeFailed(exc.message, where=name) from None


def _visible_gpus(evidence: Evidence) -> tuple[list[tuple[str, str | None]] | str, bool]:
    """((label, model name) of each GPU nvidia-smi lists, countable), from --query-gpu, -q
    and the plain table; where several are held they must count the same GPUs (listed or
    lost). A text: nvidia-smi's failure or its answer instead of a table. Not countable: an
    excerpt of the table ("[...]") shows some GPUs, not how many there are."""
    views, counts = [], []
    if table := _table(evidence):
        name, t = table
        if t is not None and t.answer:
            return _ANSWERS[t.answer], True
        if t is not None:
            views.append([(str(g.index), g.name) for g in t.gpus])
            if not t.elided:
                lost_here = evidence[name].stdout.count(LOST_TEXT)
                counts.append((name, len(t.gpus) + lost_here))
    if forms_in(evidence, "query_gpu"):
        failure, rows, csv_lost = gpu_table(evidence)
        if failure:
            return failure, True
        views.append([(r.text("index"), r.text("name")) for r in rows])
        counts.append((query_file(evidence), len(rows) + len(csv_lost)))
    if forms_in(evidence, "smi_q"):
        q = smi_q(evidence)
        views.append([(str(i), g.product_name) for i, g in enumerate(q.gpus)])
        if q.asked is None:  # a `-i` run shows the GPUs it asked for: it does not count them
            q_lost = sum(o.stdout.count(LOST_TEXT) for _n, _f, o in forms_in(evidence, "smi_q"))
            counts.append((Q_FILE, len(q.gpus) + q_lost))
    if not views:
        raise MissingEvidence("neither --query-gpu nor -q was collected", where=QUERY_FILE)
    agree("nvidia-smi GPU list", counts)
    return views[0], bool(counts)


def check_persistence(evidence: Evidence, ctx: NodeContext) -> str | None:
    """Persistence mode per GPU, from --query-gpu or -q (text/XML); both held must agree."""
    views = []
    if forms_in(evidence, "query_gpu"):
        failure, rows, _lost = gpu_table(evidence)
        if failure:
            return failure
        if rows and "persistence_mode" in rows[0].values:
            off = [r.text("index") for r in rows if r.text("persistence_mode") != "Enabled"]
            views.append((query_file(evidence), off))
    if (table := _table(evidence)) and table[1] and table[1].gpus:
        t = table[1]
        views.append((table[0], [str(g.index) for g in t.gpus if g.persistence is not True]))
    if forms_in(evidence, "smi_q"):
        q = smi_q(evidence)
        if any(g.persistence_mode is not None for g in q.gpus):
            off = [str(i) for i, g in enumerate(q.gpus) if g.persistence_mode is not True]
            views.append((Q_FILE, off))
    if not views:
        raise MissingEvidence(
            "not judged: partial evidence, no nvidia-smi output with persistence mode",
            where=QUERY_FILE,
        )
    agree("nvidia-smi persistence mode", views)
    off = views[0][1]
    return f"persistence mode off on GPU {', '.join(map(str, off))}" if off else None


def _name(gpu, i: int) -> str:
    return f"GPU {i} ({gpu.bus_id})"


def check_pci_ids(evidence: Evidence, ctx: NodeContext) -> str | None:
    want = str(ctx.hardware["gpu"]["pci_device_id"]).upper()
    q = smi_q(evidence, "pci")
    bad = []
    for i, g in enumerate(q.gpus):
        got = (g.fields.get("PCI/Device Id") or g.fields.get("pci/pci_device_id") or "").upper()
        if got and got != want:
            bad.append(f"{_name(g, i)} has PCI device id {got}")
    return f"{'; '.join(bad)}; profile expects {want}" if bad else None


def _pcie_rows(
    evidence: Evidence,
) -> tuple[list[tuple[str, int | None, int | None, int | None, int | None]], NvidiaSmiQ | None]:
    """(gpu, gen_cur, gen_max, width_cur, width_max) from --query-gpu, else from -q. Where
    both are held, -q must be complete too and agree on each GPU's maximum link (the
    current one moves with load): a cut or contradicting -q is no PASS."""
    if forms_in(evidence, "query_gpu"):
        failure, rows, _lost = gpu_table(evidence)
        if not failure and rows and "pcie.link.gen.max" in rows[0].values:
            csv = [
                (
                    f"GPU {r.text('index') if 'index' in r.values else i}",
                    to_int(r.values.get("pcie.link.gen.current")),
                    to_int(r.values.get("pcie.link.gen.max")),
                    to_int(r.values.get("pcie.link.width.current")),
                    to_int(r.values.get("pcie.link.width.max")),
                )
                for i, r in enumerate(rows)
            ]
            q = None
            if forms_in(evidence, "smi_q"):
                try:  # a cut -q is no PASS either: its gap is judged after the csv's faults
                    q = smi_q(evidence, "pci", partial=True)
                except MissingEvidence:  # no -q form with the PCI section: nothing to compare
                    q = None
                if q is not None and len(q.gpus) == len(csv):
                    agree(
                        "nvidia-smi PCIe link maximum",
                        [
                            (query_file(evidence), [(r[2], r[4]) for r in csv]),
                            (Q_FILE, [(g.pcie_gen_max, g.pcie_width_max) for g in q.gpus]),
                        ],
                    )
            return csv, q
    if not forms_in(evidence, "smi_q") and forms_in(evidence, "kernel_log"):
        return [], None  # a kernel-log-only bundle: judge the "limited by" notices alone
    if not forms_in(evidence, "smi_q"):
        raise MissingEvidence("neither --query-gpu nor -q was collected", where=QUERY_FILE)
    q = smi_q(evidence, "pci", partial=True)  # the caller judges its gap after its faults
    return [
        (_name(g, i), g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max)
        for i, g in enumerate(q.gpus)
    ], q


def check_pcie_link(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """Judge the link against its max, not its idle state: an idle GPU drops to Gen1 to save
    power (the L40S trap) and retrains under load, so current gen < max alone is no fault.
    A lost lane (width), a max below the SKU's, or a kernel "limited by" notice is."""
    sku_gen = int(ctx.hardware["gpu"]["pcie"]["gen_max"])
    sku_width = int(ctx.hardware["gpu"]["pcie"]["width_max"])
    problems, idle = [], []
    rows, q = _pcie_rows(evidence)
    for gpu, gen_cur, gen_max, w_cur, w_max in rows:
        if gen_max is not None and gen_max < sku_gen:
            problems.append(f"{gpu} link max Gen{gen_max}, SKU is Gen{sku_gen}")
        if w_max is not None and w_max < sku_width:
            problems.append(f"{gpu} link max x{w_max}, SKU is x{sku_width}")
        if w_cur is not None and w_max is not None and w_cur < w_max:
            problems.append(f"{gpu} trained at x{w_cur} of x{w_max} (lanes lost)")
        if gen_cur is not None and gen_max is not None and gen_cur < gen_max:
            idle.append(gpu)
    if forms_in(evidence, "kernel_log"):
        for lim in kernel_events(evidence, "pcie_limits"):
            problems.append(
                f"kernel: {lim.device} limited to {lim.available_gbits_s:g} Gb/s by "
                f"{lim.limiting_device} ({lim.limited_by_gts:g} GT/s x{lim.limited_width}, "
                f"capable of {lim.capable_gbits_s:g} Gb/s)"
            )
    if problems or (q is not None and q.incomplete):
        return seen_or_incomplete(problems, q)  # a lane lost is seen even in a cut -q
    if idle:
        return Result(
            PASS,
            f"at max width; {len(idle)} GPU(s) below max gen while idle (link power saving, "
            "judged against max and under load by the bandwidth probes)",
        )
    return None


# The --query-gpu fields that carry each -q section's facts: a bundle holding the csv but no
# -q form with that section is judged from them (same rule, other form).
CSV_FIELDS = {
    "ecc": ("ecc.mode.current", "ecc.errors.uncorrected.volatile.total"),
    "remap": ("remapped_rows.pending", "remapped_rows.failure", "retired_pages.pending"),
    "clocks": tuple(
        f"{prefix}.{r}"
        for prefix in ("clocks_event_reasons", "clocks_throttle_reasons")
        for r in THERMAL_REASONS
    ),
}


def _gpus(evidence: Evidence, need: str) -> tuple[list[tuple[str, dict]], NvidiaSmiQ | None]:
    """((label, facts) per GPU, the -q read) for one -q section: from -q (text/XML, any -q -d)
    where a form holds it, else from the --query-gpu csv's fields of that section. A -q that
    is incomplete is read too: its GPUs' faults count (seen_or_incomplete)."""
    rows = _csv_rows(evidence, need)  # read whenever held: an unreadable form is ERROR
    try:
        q = smi_q(evidence, need, partial=True)
    except MissingEvidence:
        if rows is None:
            raise
        return [(f"GPU {r.text('index') if 'index' in r.values else i}", _csv_facts(r, need))
                for i, r in enumerate(rows)], None  # fmt: skip
    facts = [(_name(g, i), _q_facts(g, need)) for i, g in enumerate(q.gpus)]
    # both forms held: they must say the same of each GPU (clocks move from one run to the
    # next, so only ECC and remapping are compared)
    if rows is not None and need != "clocks" and len(rows) == len(facts):
        agree(
            f"nvidia-smi {need}",
            [
                (query_file(evidence), [_csv_facts(r, need) for r in rows]),
                (Q_FILE, [f for _n, f in facts]),
            ],
        )
    return facts, q


def _csv_rows(evidence: Evidence, need: str):
    if not forms_in(evidence, "query_gpu"):
        return None
    failure, rows, _lost = gpu_table(evidence)
    if failure:
        raise ProbeFailed(failure, where=query_file(evidence))
    if not rows or not any(f in rows[0].values for f in CSV_FIELDS[need]):
        return None
    return rows


def _q_facts(g, need: str) -> dict:
    if need == "ecc":
        vol = g.ecc_volatile
        unc = vol and (vol.uncorrectable_total or vol.dram_uncorrectable or vol.sram_uncorrectable)
        return {"ecc_off": g.ecc_mode_current is False, "unc": unc or 0}
    if need == "remap":
        rr, rp = g.remapped_rows, g.retired_pages
        return {
            "pending": bool(rr and rr.pending),
            "failure": bool(rr and rr.failure),
            "retire_pending": bool(rp and rp.pending),
        }
    active = [r for r in (g.clock_event_reasons_active or ()) if r in THERMAL_REASONS]
    return {"thermal": active, "temp": g.temperature_gpu_c}


def _csv_facts(r, need: str) -> dict:
    if need == "ecc":
        return {
            "ecc_off": r.as_bool("ecc.mode.current") is False,
            "unc": r.as_int("ecc.errors.uncorrected.volatile.total") or 0,
        }
    if need == "remap":
        return {
            "pending": bool(r.as_bool("remapped_rows.pending")),
            "failure": bool(r.as_bool("remapped_rows.failure")),
            "retire_pending": bool(r.as_bool("retired_pages.pending")),
        }
    prefixes = ("clocks_event_reasons", "clocks_throttle_reasons")  # R535+, older
    active = [t for t in THERMAL_REASONS if any(r.as_bool(f"{p}.{t}") for p in prefixes)]
    return {"thermal": active, "temp": r.as_float("temperature.gpu")}


def _judged(problems: list[str], q: NvidiaSmiQ | None) -> str | Result | None:
    """FAIL on a fault seen (even in an incomplete -q), ERROR for an incomplete one showing
    none; a complete `-i` run passes on the GPUs it was asked for, and says so."""
    out = seen_or_incomplete(problems, q)
    if out is None and q is not None and q.asked is not None:
        return Result(PASS, f"no fault on the {len(q.gpus)} GPU(s) the -i run asked for")
    return out


def check_ecc(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    problems = []
    gpus, q = _gpus(evidence, "ecc")
    for name, f in gpus:
        if f["ecc_off"]:
            problems.append(f"{name} ECC mode disabled")
        if f["unc"]:
            problems.append(f"{name} {f['unc']} uncorrectable ECC error(s) since reset")
    return _judged(problems, q)


def check_remap_pending(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    problems = []
    gpus, q = _gpus(evidence, "remap")
    for name, f in gpus:
        if f["pending"]:
            problems.append(f"{name} row remap pending (GPU reset needed to apply it)")
        if f["retire_pending"]:
            problems.append(f"{name} page retirement pending (GPU reset needed)")
    return _judged(problems, q)


def check_remap_failure(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    gpus, q = _gpus(evidence, "remap")
    return _judged([f"{name} row remapping failure" for name, f in gpus if f["failure"]], q)


def check_throttle(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    problems = []
    gpus, q = _gpus(evidence, "clocks")
    for name, f in gpus:
        if f["thermal"]:
            temp = f" at {f['temp']:g} C" if f["temp"] is not None else ""
            problems.append(f"{name} {', '.join(f['thermal'])} active{temp}")
    return _judged(problems, q)


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


def check_fabric_manager(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """NVSwitch boards need nv-fabricmanager at exactly the driver's version; until it has
    trained the fabric every GPU reports fabric state "In Progress" and CUDA refuses."""
    if int(ctx.hardware["nvlink"].get("nvswitch_count", 0) or 0) == 0:
        return not_applicable("no NVSwitch on this SKU")
    if not ctx.enabled("nvidia_fabricmanager_enabled"):
        return not_applicable("the host's stack does not manage fabric manager")
    installed = _fm_package_version(evidence)
    problems = driver_daemon_problems(
        evidence, ctx, "nvidia-fabricmanager", "fabric manager", installed
    )
    for i, g in enumerate(smi_q(evidence, "fabric").gpus):
        if g.fabric_state is not None and (g.fabric_state, g.fabric_status) != (
            "Completed",
            "Success",
        ):
            problems.append(f"{_name(g, i)} fabric {g.fabric_state}/{g.fabric_status}")
    return "; ".join(problems) or None


def _fm_package_version(evidence: Evidence) -> str | None:
    for pkg in installed_packages(evidence).values():
        # NVIDIA's RPMs before R580 spell it nvidia-fabric-manager
        if pkg.name.startswith(("nvidia-fabricmanager", "nvidia-fabric-manager")) and pkg.installed:
            return upstream_of(pkg.version)
    return None
