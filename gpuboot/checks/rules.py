"""Certification rules: pure functions from a node's evidence to a finding.

Each rule has a stable id shared by its check, the role task that fixes it and the
report line. A rule returns PASS or FAIL for what the node shows; when the evidence
cannot be read it raises (ParseError, MissingEvidence), which the harness reports as
ERROR: a harness fault never marks hardware bad.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuboot.collect import Evidence, ProbeOutput
from gpuboot.errors import GpubootError
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.modules import parse_nvidia_version
from gpuboot.evidence.nvidia_smi_csv import parse_query_gpu_csv

PASS, WARN, FAIL, ERROR = "PASS", "WARN", "FAIL", "ERROR"

# nvidia-smi prints this instead of a row for a GPU it lost (fallen off the bus, ...).
_LOST_GPU = re.compile(r"^Unable to determine the device handle for (?:GPU)?\s*(\S+?):? (.*)$")


class MissingEvidence(GpubootError):
    """A probe file the rule needs is absent from the evidence."""


@dataclass(frozen=True)
class NodeContext:
    host: str
    profile: dict[str, Any]
    hostvars: dict[str, Any] = field(default_factory=dict)

    def var(self, name: str, default: Any = None) -> Any:
        return self.hostvars.get(name, default)


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    status: str
    reason: str
    action: str = ""


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str  # FAIL or WARN: what a violation makes the node
    action: str  # what the operator should do when it fails
    check: Callable[[Evidence, NodeContext], str | None]  # None = pass, text = why not

    def evaluate(self, evidence: Evidence, ctx: NodeContext) -> Finding:
        problem = self.check(evidence, ctx)
        if problem is None:
            return Finding(self.id, self.title, PASS, "ok")
        return Finding(self.id, self.title, self.severity, problem, self.action)


def probe(evidence: Evidence, name: str) -> ProbeOutput:
    try:
        return evidence[name]
    except KeyError:
        raise MissingEvidence(f"probe {name} was not collected", where=name) from None


def _smi_failure(out: ProbeOutput) -> str | None:
    """nvidia-smi's own complaint (no driver, version mismatch) when it could not run."""
    if out.rc == 0:
        return None
    if out.rc == 127:
        return "nvidia-smi is not installed (the driver's userspace is missing)"
    text = (out.stdout + "\n" + out.stderr).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"nvidia-smi failed (exit {out.rc}): {first}"


def _gpu_table(evidence: Evidence):
    """(rows, lost) from the --query-gpu probe; lost = [(pci, message)] for vanished GPUs."""
    out = probe(evidence, "nvidia-smi_--query-gpu_--format=csv.csv")
    failure = _smi_failure(out)
    lost, kept = [], []
    for line in out.stdout.splitlines():
        m = _LOST_GPU.match(line.strip())
        if m:
            lost.append((m.group(1), m.group(2)))
        else:
            kept.append(line)
    if failure and not lost:
        return failure, [], []
    if not any(line.strip() for line in kept[1:]):
        return None, [], lost
    return None, list(parse_query_gpu_csv("\n".join(kept)).rows), lost


def _upstream(debian_version: str) -> str:
    return re.sub(r"-[^-]+$", "", debian_version.split(":", 1)[-1])


# ------------------------------------------------------------------------- rules
def check_driver_versions(evidence: Evidence, ctx: NodeContext) -> str | None:
    branch, pinned = ctx.var("nvidia_driver_branch"), ctx.var("nvidia_driver_version")
    if not branch or not pinned:
        raise MissingEvidence(
            "no driver pin (nvidia_driver_branch/_version) for this host", where=ctx.host
        )
    want = _upstream(str(pinned))
    packages = {}
    for line in probe(evidence, "dpkg-query_-W.txt").stdout.splitlines():
        parts = line.split("\t")
        # db:Status-Abbrev: desired state (i install, h hold...), then the actual state.
        if len(parts) == 3 and parts[2][1:2] == "i":
            packages[parts[0]] = parts[1]
    utils = packages.get(f"nvidia-utils-{branch}")
    if utils is None:
        return f"nvidia-utils-{branch} is not installed (pinned {pinned})"
    if utils != str(pinned):
        return f"nvidia-utils-{branch} is {utils}, pinned {pinned}"
    version_file = probe(evidence, "proc_driver_nvidia_version.txt")
    if version_file.rc != 0 or not version_file.stdout.strip():
        return f"no NVIDIA kernel module loaded (userspace {_upstream(utils)} installed)"
    loaded = parse_nvidia_version(version_file.stdout).version
    pending = probe(evidence, "reboot-required.txt").stdout.strip()
    if loaded != want:
        extra = " (reboot pending)" if pending else ""
        return f"kernel module {loaded} loaded, userspace and pin are {want}{extra}"
    if pending:
        return f"reboot pending: {pending.splitlines()[0]}"
    return None


def check_gpu_count(evidence: Evidence, ctx: NodeContext) -> str | None:
    expected = int(ctx.profile["hardware"]["gpu"]["count"])
    model = ctx.profile["hardware"]["gpu"].get("model")
    failure, rows, lost = _gpu_table(evidence)
    if failure:
        return failure
    problems = [f"GPU {pci} lost: {msg}" for pci, msg in lost]
    if len(rows) != expected:
        problems.insert(0, f"{len(rows)} of {expected} GPUs visible")
    wrong = [
        f"GPU {r.text('index')} is {r.text('name')}"
        for r in rows
        if model and r.text("name") != model
    ]
    problems += [f"{w}, profile expects {model}" for w in wrong]
    return "; ".join(problems) or None


def check_persistence(evidence: Evidence, ctx: NodeContext) -> str | None:
    failure, rows, _ = _gpu_table(evidence)
    if failure:
        return failure
    off = [r.text("index") for r in rows if r.text("persistence_mode") != "Enabled"]
    return f"persistence mode off on GPU {', '.join(map(str, off))}" if off else None


def check_xid(evidence: Evidence, ctx: NodeContext) -> str | None:
    log = (
        parse_kernel_log(probe(evidence, "dmesg.txt").stdout)
        if probe(evidence, "dmesg.txt").stdout.strip()
        else None
    )
    if log is None:
        return None  # an empty kernel ring buffer holds no Xid
    bad = [x for x in log.xids if x.info.category != "application"]
    if not bad:
        return None
    seen: dict[int, list[str]] = {}
    for x in bad:
        seen.setdefault(x.code, []).append(x.pci)
    parts = [
        f"Xid {code} ({xid_meaning(code)}) on {', '.join(sorted(set(pcis)))}"
        for code, pcis in sorted(seen.items())
    ]
    return "; ".join(parts)


def xid_meaning(code: int) -> str:
    from gpuboot.evidence.xid_catalog import xid_info

    return xid_info(code).meaning


RULES: tuple[Rule, ...] = (
    Rule(
        "STK-001",
        "driver userspace and kernel module match the pin",
        FAIL,
        "reinstall the stack (`gpuboot install`), then reboot the node",
        check_driver_versions,
    ),
    Rule(
        "GPU-001",
        "GPU count and model as the profile expects",
        FAIL,
        "reseat or RMA the missing GPU; check `nvidia-smi -q` and the kernel log",
        check_gpu_count,
    ),
    Rule(
        "GPU-002",
        "persistence mode enabled on every GPU",
        FAIL,
        "enable nvidia-persistenced (`gpuboot install --tags driver`)",
        check_persistence,
    ),
    Rule(
        "XID-001",
        "no hardware Xid in the kernel log since boot",
        FAIL,
        "follow the Xid's action (reset GPU, reboot, or RMA); see NVIDIA's Xid catalogue",
        check_xid,
    ),
)

RULES_BY_ID = {rule.id: rule for rule in RULES}


def evaluate(evidence: Evidence, ctx: NodeContext) -> list[Finding]:
    """Every rule on one node; a rule that cannot read its evidence gives ERROR."""
    findings = []
    for rule in RULES:
        try:
            findings.append(rule.evaluate(evidence, ctx))
        except GpubootError as exc:
            findings.append(
                Finding(
                    rule.id,
                    rule.title,
                    ERROR,
                    f"cannot judge: {exc}",
                    "fix the harness or probe, then certify again",
                )
            )
    return findings


def verdict(findings: list[Finding]) -> str:
    statuses = {f.status for f in findings}
    for status in (FAIL, ERROR, WARN):
        if status in statuses:
            return status
    return PASS
