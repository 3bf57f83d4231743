"""Shared readers of nvidia-smi evidence for the rules (failure text, -q, --query-gpu), and
the node's own count of its GPUs, against which every per-GPU listing must be complete."""

from __future__ import annotations

import re
from dataclasses import replace

from gpuboot.bundle.model import Evidence, ProbeOutput
from gpuboot.bundle.names import QUERY_GPU_FILE, SMI_Q_FILE
from gpuboot.checks.base import MissingEvidence, ProbeFailed, agree, forms_in, parsed
from gpuboot.errors import GpubootError, ParseError
from gpuboot.evidence.forms import parser_of, query_fields
from gpuboot.evidence.nvidia_smi_csv import CsvGpuRow, parse_query_gpu_csv
from gpuboot.evidence.nvidia_smi_q import NvidiaSmiQ

# nvidia-smi prints this instead of a row for a GPU it lost (fallen off the bus, ...).
LOST_TEXT = "Unable to determine the device handle"
LOST_GPU = re.compile(
    rf"^{LOST_TEXT} for (?:GPU)?\s*([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f.]+?):?\s+(.*)$"
)
_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(\d+)\s*$", re.M)
_HEADER_CHARS = 4096  # the -q header (timestamp, driver, CUDA, Attached GPUs) comes first


def smi_failure(out: ProbeOutput) -> str | None:
    """nvidia-smi's own complaint (no driver, version mismatch) when it could not run."""
    if out.rc == 0:
        return None
    if out.rc == 127:
        return "nvidia-smi is not installed (the driver's userspace is missing)"
    text = (out.stdout + "\n" + out.stderr).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"nvidia-smi failed (exit {out.rc}): {first}"


def incomplete(what: str, where: str) -> ProbeFailed:
    """Evidence that covers less than the node's own inventory: ERROR, never PASS/FAIL."""
    return ProbeFailed(f"evidence incomplete: {what}", where=where)


def gpu_table(
    evidence: Evidence,
) -> tuple[str | None, tuple[CsvGpuRow, ...], tuple[tuple[str, str], ...]]:
    """(failure, rows, lost) from the --query-gpu probe (any of its file names: the field list
    of a ``noheader`` table comes from the command line in the name); lost = [(pci, message)].
    A table with fewer GPUs (rows + lost) than ``nvidia-smi -q`` says are attached is cut
    short."""
    name = query_file(evidence)
    return parsed(_gpu_table, evidence[name], _q_text_out(evidence), name, query_fields(name))


def query_file(evidence: Evidence) -> str:
    found = forms_in(evidence, "query_gpu")
    if not found:
        raise MissingEvidence(f"probe {QUERY_GPU_FILE} was not collected", where=QUERY_GPU_FILE)
    return found[0][0]


def _q_text_out(evidence: Evidence) -> ProbeOutput | None:
    if SMI_Q_FILE in evidence:
        return evidence[SMI_Q_FILE]
    return next((o for _n, form, o in forms_in(evidence, "smi_q") if form == "text"), None)


# Eight rules read the same table of a node one after another: parsed once per node (a
# pure function of the two outputs, its result immutable).
def _gpu_table(out: ProbeOutput, q_out: ProbeOutput | None, name: str, fields):
    failure = smi_failure(out)
    lost, kept = [], []
    for line in out.stdout.splitlines():
        m = LOST_GPU.match(line.strip())
        if m:
            lost.append((m.group(1), m.group(2)))
        else:
            kept.append(line)
    if failure and not lost:
        return failure, (), ()
    # nvidia-smi answers "No devices were found" (exit 6) when it sees none: a silent or
    # header-only table is not that answer, it is unreadable
    rows: tuple[CsvGpuRow, ...] = ()
    body = [ln for ln in kept if ln.strip()]
    if body and (len(body) > 1 or fields):
        rows = parse_query_gpu_csv("\n".join(kept), list(fields) if fields else None).rows
    elif not lost:
        raise ProbeFailed("nvidia-smi --query-gpu listed no GPU and no error", where=name)
    attached = _attached(q_out)
    if attached is not None and len(rows) + len(lost) < attached:
        raise incomplete(
            f"--query-gpu lists {len(rows) + len(lost)} GPU(s), nvidia-smi -q says "
            f"Attached GPUs: {attached}",
            name,
        )
    return None, rows, tuple(lost)


def attached_gpus(evidence: Evidence) -> int | None:
    """The ``Attached GPUs`` count in the -q header (NVML's device count), when -q ran."""
    return _attached(_q_text_out(evidence))


def _attached(out: ProbeOutput | None) -> int | None:
    if out is None or out.rc not in (0, 15):  # 15: a GPU lost, the others listed
        return None
    m = _ATTACHED.search(out.stdout[:_HEADER_CHARS])
    return int(m.group(1)) if m else None


def gpu_inventory(evidence: Evidence) -> int | None:
    """How many GPUs the node has by its own account: the larger of the --query-gpu table
    (rows and lost GPUs) and the -q header; None when neither can be read (a bundle of
    captures of one tool). A GPU the node lost entirely is in neither: GPU-001 judges that
    against the profile."""
    counts = [attached_gpus(evidence)]
    if forms_in(evidence, "query_gpu"):
        try:
            failure, rows, lost = gpu_table(evidence)
            counts.append(None if failure else len(rows) + len(lost))
        except GpubootError:
            pass  # an unreadable table is GPU-001's ERROR; the -q header still counts
    known = [c for c in counts if c is not None]
    return max(known) if known else None


# The -q sections a rule reads, by their field paths in the text ("ECC Errors/...") and XML
# ("ecc_errors/...") forms: a `-q -d ROW_REMAPPER` report holds some sections only.
SECTIONS: dict[str, tuple[str, ...]] = {
    "pci": ("PCI/", "pci/"),
    "ecc": ("ECC Mode/", "ECC Errors/", "ecc_mode/", "ecc_errors/"),
    "remap": ("Remapped Rows", "Retired Pages", "remapped_rows", "retired_pages"),
    "clocks": (
        "Clocks Event Reasons/",
        "Clocks Throttle Reasons/",
        "clocks_event_reasons/",
        "clocks_throttle_reasons/",
        "clocks_throttle_reasons",
        "clocks_event_reasons",
    ),
    "fabric": ("Fabric/", "fabric/"),
}


def _view(q: NvidiaSmiQ, need: str) -> dict[str, tuple]:
    """What a rule reads of each GPU (by bus id), to compare two forms of the same -q."""

    def one(g) -> tuple:
        if need == "pci":
            dev = g.fields.get("PCI/Device Id") or g.fields.get("pci/pci_device_id")
            return (g.pcie_gen_max, g.pcie_width_max, g.pcie_width_current, (dev or "").upper())
        if need == "ecc":
            v = g.ecc_volatile
            unc = v and (v.uncorrectable_total or v.dram_uncorrectable or v.sram_uncorrectable)
            return (g.ecc_mode_current, bool(unc))
        if need == "remap":
            rr, rp = g.remapped_rows, g.retired_pages
            return (rr and rr.pending, rr and rr.failure, rp and rp.pending)
        if need == "fabric":
            return (g.fabric_state, g.fabric_status)
        return ()  # clocks: a moment's state, two runs may differ without contradiction

    return {g.bus_id.lower().lstrip("0"): one(g) for g in q.gpus}


def smi_q(evidence: Evidence, need: str | None = None, partial: bool = False) -> NvidiaSmiQ:
    """The parsed ``nvidia-smi -q`` in whichever forms the node's evidence holds (text, XML
    ``-q -x``, ``-q -d SECTION``, ``-a``); with ``need`` (a SECTIONS key) only forms holding
    that section count, and where two do they must agree on what the rule reads, else ERROR
    ("evidence disagrees", naming both files). Each form must be complete against what was
    asked: every attached GPU, or the GPUs a `-i`/`--id` run names in its file name
    (``nvidia-smi_-q_-i_0.txt``); a run that printed no GPU is unreadable. A run listing fewer
    GPUs than that, or whose last GPU block stops short of the sections the others end with
    (cut output), is a harness ERROR; with ``partial`` it is returned with ``incomplete`` set,
    for a rule that FAILs on a fault its GPUs show before it says the rest was not read."""
    found = forms_in(evidence, "smi_q")
    if not found:
        raise MissingEvidence(f"probe {SMI_Q_FILE} was not collected", where=SMI_Q_FILE)
    # eight rules ask: each form read (and checked complete) once per node
    views = [(name, parsed(_one_q, name, form, out)) for name, form, out in found]
    if need is not None:
        prefixes = SECTIONS[need]
        views = [
            (n, q)
            for n, q in views
            if any(k.startswith(prefixes) for g in q.gpus for k in g.fields)
        ]
        if not views:
            raise MissingEvidence(
                f"not judged: partial evidence, no nvidia-smi -q form holds the {need} section "
                f"({', '.join(n for n, _f, _o in found)})",
                where=found[0][0],
            )
        if len(views) > 1:
            agree("nvidia-smi -q", [(n, _view(q, need)) for n, q in views])
    name, q = views[0]
    if q.incomplete and not partial:
        raise incomplete(q.incomplete, name)
    return q


def _one_q(name: str, form: str, out: ProbeOutput) -> NvidiaSmiQ:
    text, lost = out.stdout, 0
    if LOST_TEXT in text:  # rare: look at the lines only then (six rules call this per node)
        lines = text.splitlines()
        kept = [ln for ln in lines if not LOST_GPU.match(ln.strip())]
        text, lost = "\n".join(kept), len(lines) - len(kept)
    try:
        # six rules read the same -q of a node: parsed once per node
        q = parsed(parser_of("smi_q", form), text)
    except ParseError as exc:
        why = smi_failure(out) or str(exc)
        if lost and not text.strip():
            why = f"nvidia-smi lost every GPU it names: {why}"
        raise ProbeFailed(why, where=name) from None
    if not q.gpus:
        raise ProbeFailed(smi_failure(out) or "nvidia-smi -q listed no GPU", where=name)
    asked = asked_gpus(name)
    gap = None if q.elided else _q_gap(q, lost, asked)  # an excerpt says what it left out
    return replace(q, incomplete=gap, asked=asked) if gap or asked else q


# `nvidia-smi -q -i 0,1` / `--id=0`: the run shows the GPUs it was asked for
_ASKED = re.compile(r"_(?:-i_|--id=|--id_)([^_]+)")


def asked_gpus(name: str) -> int | None:
    """How many GPUs a `-i`/`--id` run names in its file name (None: not such a run)."""
    m = _ASKED.search(name)
    return m.group(1).count(",") + 1 if m else None


def lost_gpus(evidence: Evidence) -> dict[str, tuple[str, str, str]]:
    """GPUs nvidia-smi could not open ("Unable to determine the device handle for GPU <bus>:
    Unknown Error": fallen off the bus), from any of its outputs: one entry per GPU (bus ids
    compared in one spelling) -> (bus id as printed, message, file)."""
    lost: dict[str, tuple[str, str, str]] = {}
    for name, _form, out in forms_in(evidence, "smi_any"):
        text = out.stdout + "\n" + out.stderr
        if LOST_TEXT not in text:
            continue
        for line in text.splitlines():
            if m := LOST_GPU.match(line.strip()):
                lost.setdefault(_bus(m.group(1)), (m.group(1), m.group(2), name))
    return lost


def _bus(bus: str) -> str:
    """One spelling of a PCI bus id across tools ("0000:0B:00.0", "00000000:0b:00.0")."""
    dom, _, rest = bus.lower().rpartition(":")[0].partition(":")
    tail = bus.lower().rsplit(":", 1)[-1]
    return f"{int(dom or '0', 16):04x}:{rest}:{tail}" if rest else bus.lower()


def _q_gap(q: NvidiaSmiQ, lost: int, asked: int | None) -> str | None:
    """What the run lacks against what was asked (None: nothing). A `-i` run prints the
    node's Attached GPUs count and the GPUs asked for: judged against those. A full run cut
    exactly between two GPU blocks is still short of its header's count."""
    if q.attached_gpus is None:
        return "nvidia-smi -q has no 'Attached GPUs' header"
    shown = len(q.gpus) + lost
    if asked is not None and shown < asked:
        return f"nvidia-smi -q lists {shown} of the {asked} GPU(s) its -i asked for"
    if asked is None and shown < q.attached_gpus:
        return f"nvidia-smi -q lists {shown} of its {q.attached_gpus} attached GPUs"
    first, last = _last_section(q.gpus[0].fields), _last_section(q.gpus[-1].fields)
    if first != last:
        return (
            f"nvidia-smi -q stops inside GPU {q.gpus[-1].bus_id} (its block ends at "
            f"{last!r}, the first GPU's at {first!r})"
        )
    return None


def seen_or_incomplete(problems: list[str], q: NvidiaSmiQ | None, where: str = SMI_Q_FILE):
    """A rule's answer from what it read of -q (see seen_or_unread)."""
    return seen_or_unread(problems, q.incomplete if q is not None else None, where)


def seen_or_unread(problems: list[str], gap: str | None, where: str) -> str | None:
    """The house order, FAIL seen > ERROR unreadable > PASS: the faults the readable part
    shows (FAIL, saying what was not read), else ERROR when the evidence is incomplete, else
    None (PASS)."""
    if problems:
        return "; ".join(problems) + (f" (the rest not read: {gap})" if gap else "")
    if gap:
        raise incomplete(gap, where)
    return None


def _last_section(fields: dict[str, str | None]) -> str | None:
    """The top-level section a GPU block ends with (-q prints them in a fixed order)."""
    return next(reversed(fields), "").split("/", 1)[0] or None
