"""What a certify run measured on a node, what it did not, and which of those gaps the
node's policy accepts.

A node that passed every check is certified in ``full`` only when every rule ran and every
probe its SKU requires (``required_checks``) measured, on every rail. Otherwise it is
``partial``, and each gap carries a scope name saying why it was not measured, decided from
the same facts that decided which probes ran (gpuboot.probes, checks.pair_phase):

  no-probes     probe level none: no bandwidth probe ran
  quick-probes  probe level quick measured the first rail only (ib_write_bw on the others)
  no-pair       no pair partner in the run: ib_write_bw and the TCP pair probe did not run
  mig           the host's MIG layout: no whole-GPU CUDA probe (nvbandwidth, all_reduce_perf),
                and no dcgmi diag where the layout splits a GPU
  no-tool       the host's stack provides no tool for the probe (CUDA, DCGM or DOCA-OFED)

A gap none of these explains (a rule left out of the run, a probe skipped for another
reason) is ``unproven``: no policy accepts it. ``gpuboot_accept_partial`` (a host or group
variable, a list of the names above) accepts a partial certification of that node only
when it names every gap's scope; it is checked when the inventory is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot.bundle.names import META, ib_write_bw_file, is_safe_name
from gpuboot.errors import ConfigError, GpubootError
from gpuboot.verdict import Status

if TYPE_CHECKING:  # light to import: the inventory checks the policy at load
    from gpuboot.checks.base import Finding
    from gpuboot.results import NodeReport

FULL, PARTIAL = "full", "partial"
FULL_PROBE_LEVELS = ("quick", "full")  # probe level none measures nothing
ACCEPT_VAR = "gpuboot_accept_partial"
NO_PROBES, QUICK_PROBES, NO_PAIR, MIG, NO_TOOL = (
    "no-probes", "quick-probes", "no-pair", "mig", "no-tool",
)  # fmt: skip
UNPROVEN = "unproven"  # never accepted: what no scope explains
GAP_SCOPES = {
    NO_PROBES: "probe level none: no bandwidth probe ran",
    QUICK_PROBES: "probe level quick: ib_write_bw on the first rail only",
    NO_PAIR: "no pair partner in the run: no ib_write_bw, no TCP pair probe",
    MIG: "MIG layout: no whole-GPU nvbandwidth or all_reduce_perf; no dcgmi diag where a "
    "GPU is split",
    NO_TOOL: "the stack provides no CUDA, DCGM or DOCA-OFED for the probe",
}
# what to do so that the gap is measured next time (printed with the command around it)
GAP_FIX = {
    NO_PROBES: "certify with --probes quick or full",
    QUICK_PROBES: "certify with --probes full",
    NO_PAIR: "certify it together with a known-good node (--limit NODE,PARTNER)",
    MIG: "certify it with MIG off",
    NO_TOOL: "pin a stack that provides CUDA, DCGM and DOCA-OFED (gpuboot_stack)",
    UNPROVEN: "certify the node again",
}
_CUDA_RULES = ("BW-001", "BW-002", "BW-003", "BW-004")  # nvbandwidth, all_reduce_perf
_PAIR_KIND = {"BW-005": "ib_write_bw", "BW-006": "tcp_bw"}
_PAIR_FILE = {"ib_write_bw": re.compile(r"^ib_write_bw_-d_.+?_"), "tcp_bw": re.compile(r"^tcp_bw_")}
# the stack variable that makes node_probes/pair_phase run the rule's tool
_TOOL_VAR = {
    **dict.fromkeys(_CUDA_RULES, "cuda_toolkit_version"),
    "DCG-001": "dcgm_version",
    "BW-005": "doca_ofed_enabled",
}
_RUN = re.compile(r"\.run(\d+)\.")
_DCGM = re.compile(r"^dcgmi_diag_-r_(\d+)\.")


@dataclass(frozen=True)
class Gap:
    check: str  # a rule id, or "probes"
    reason: str
    scope: str  # a GAP_SCOPES name, or UNPROVEN

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "reason": self.reason, "gap": self.scope}


@dataclass(frozen=True)
class Extent:
    """One node's certification extent: what was measured, the gaps, the node's policy."""

    host: str
    measured: Mapping[str, Any]
    required: tuple[str, ...]
    gaps: tuple[Gap, ...]
    accepts: tuple[str, ...] = field(default=())  # its gpuboot_accept_partial

    @property
    def scope(self) -> str:
        return PARTIAL if self.gaps else FULL

    @property
    def unaccepted(self) -> tuple[str, ...]:
        return unaccepted_scopes([g.scope for g in self.gaps], self.accepts)

    @property
    def certifies(self) -> bool:
        """Full, or partial with every gap accepted by the node's policy."""
        return not self.unaccepted

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "certifies": self.certifies,
            "gaps": [g.to_dict() for g in self.gaps],
            "accept_partial": list(self.accepts),
            "not_accepted": list(self.unaccepted),
            "measured": dict(self.measured),
        }


# ------------------------------------------------------------------ policy


def check_policy(value: Any, where: str, host: str) -> tuple[str, ...]:
    """A host's ``gpuboot_accept_partial``: a list of gap scope names (ConfigError else)."""
    names = ", ".join(GAP_SCOPES)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"{ACCEPT_VAR} must be a list of gap names, not {value!r}",
            where=where,
            hint=f"set {ACCEPT_VAR}: [mig] for {host} (or its group); the names: {names}",
        )
    unknown = [v for v in value if v not in GAP_SCOPES]
    if unknown:
        raise ConfigError(
            f"{ACCEPT_VAR} names unknown gap {unknown[0]!r}",
            where=where,
            hint=f"use only these names: {names}; a gap none of them explains is never accepted",
        )
    return tuple(dict.fromkeys(value))


def check_inventory_policies(path: Path, hosts: Mapping[str, Mapping[str, Any]]) -> None:
    """Every host's ``gpuboot_accept_partial`` checked before any host is touched."""
    for host, hostvars in hosts.items():
        check_policy(hostvars.get(ACCEPT_VAR), f"{path}: {host}.{ACCEPT_VAR}", host)


def policy(hostvars: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The gap scopes a host accepts (the inventory was checked when it was loaded)."""
    value = (hostvars or {}).get(ACCEPT_VAR)
    return tuple(v for v in value if v in GAP_SCOPES) if isinstance(value, list) else ()


def policies(inv: Any) -> dict[str, tuple[str, ...]]:
    """host -> its accepted gap scopes, for an Inventory."""
    return {h: policy(v) for h, v in inv.hosts.items()}


def unaccepted_scopes(scopes: Sequence[str], accepts: Sequence[str]) -> tuple[str, ...]:
    """The gap scopes ``accepts`` does not name (UNPROVEN is never accepted)."""
    return tuple(s for s in dict.fromkeys(scopes) if s == UNPROVEN or s not in accepts)


# ------------------------------------------------------------------ a certificate's gaps


def cert_gaps(cert: Mapping[str, Any]) -> list[Gap]:
    """The gaps a certificate names (one without a recorded scope is UNPROVEN)."""
    if cert.get("scope") == FULL and not cert.get("missing"):
        return []
    missing = cert.get("missing")
    if not isinstance(missing, list) or not missing:
        return [Gap("scope", "its scope is not recorded as full", UNPROVEN)]
    out = []
    for m in missing:
        m = m if isinstance(m, Mapping) else {"check": m}
        scope = m.get("gap") if m.get("gap") in GAP_SCOPES else UNPROVEN
        out.append(Gap(str(m.get("check")), str(m.get("reason", "")), str(scope)))
    return out


def partial(cert: Mapping[str, Any]) -> str | None:
    """Why a certificate does not certify its node fully; None for a full one."""
    gaps = cert_gaps(cert)
    if not gaps:
        return None
    if gaps[0].check == "scope":
        return gaps[0].reason
    by_scope: dict[str, list[str]] = {}
    for g in gaps:
        by_scope.setdefault(g.scope, []).append(g.check)
    return "; ".join(f"{', '.join(c)} not proven ({s})" for s, c in by_scope.items())


def refusal(cert: Mapping[str, Any], accepts: Sequence[str], host: str) -> str | None:
    """Why the node's policy does not accept this certificate: None when it is full or
    every gap's scope is accepted."""
    gaps = cert_gaps(cert)
    left = unaccepted_scopes([g.scope for g in gaps], accepts)
    if not left:
        return None
    policy_text = f"[{', '.join(accepts)}]" if accepts else "not set"
    fixes = "; ".join(dict.fromkeys(GAP_FIX[s] for s in left))
    acceptable = [s for s in left if s != UNPROVEN]
    accept = (
        f", or set {ACCEPT_VAR}: [{', '.join([*accepts, *acceptable])}] for {host}'s group"
        if acceptable and len(acceptable) == len(left)
        else ""
    )
    return (
        f"partial certificate: {partial(cert)}; {host}'s {ACCEPT_VAR} is {policy_text}, "
        f"which does not accept {', '.join(left)}: {fixes}{accept}"
    )


# ------------------------------------------------------------------ assessing a run


def read_meta(host_dir: Path) -> dict[str, Any]:
    from gpuboot.bundle.store import parse_meta, read_file_capped

    try:
        return parse_meta(read_file_capped(host_dir / META), str(host_dir))
    except GpubootError:
        return {}


def profile_name(meta: Mapping[str, Any]) -> str | None:
    pins = meta.get("pins") if isinstance(meta.get("pins"), dict) else {}
    name = meta.get("profile") or pins.get("gpuboot_profile")
    return name if isinstance(name, str) else None


def sku(host_dir: Path, name: str | None, listed: Sequence[str]) -> dict[str, Any] | None:
    """The host's profile as evaluate resolves it: a file of the host directory among
    ``listed`` (for a certificate, checked against the run's manifest: a profile slipped in
    later must not lower the requirements) or a shipped profile; None when it cannot be had."""
    from gpuboot.bundle.profile import bundle_profile  # yaml: only when assessing
    from gpuboot.bundle.store import read_file_capped

    own = name is not None and name in listed
    try:
        files = {name: read_file_capped(host_dir / name)} if own and name else {}
    except GpubootError:
        return None
    try:
        return bundle_profile(host_dir.name, {"profile": name}, files)
    except (GpubootError, OSError):
        return None


def required_checks(profile: Mapping[str, Any] | None) -> list[str]:
    """What a full certificate must have measured on this SKU: DCGM diag, host<->device
    copies, the TCP pair probe, and where the hardware has the part, copies between GPUs
    and the collective (two GPUs or more) and ib_write_bw (an RDMA NIC). Without a profile,
    every one of them."""
    hardware = (profile or {}).get("hardware") or {}
    gpus = int((hardware.get("gpu") or {}).get("count", 2))
    checks = ["DCG-001", "BW-001", "BW-002", "BW-006"]
    checks += ["BW-003", "BW-004"] if gpus >= 2 else []
    checks += ["BW-005"] if hardware.get("nics") or not hardware else []
    return sorted(checks)


def _rails(profile: Mapping[str, Any] | None) -> list[str]:
    nics = ((profile or {}).get("hardware") or {}).get("nics") or []
    return [str(n["hca"]) for n in nics if isinstance(n, dict) and n.get("hca")]


def unmeasured_rails(profile: Mapping[str, Any] | None, names: Sequence[str]) -> list[str]:
    """The profile's rails (its NICs' HCAs) without an ib_write_bw run among the host's
    evidence files ``names``: a rail the run did not measure is not proven."""
    rails = _rails(profile)
    ran = {r for r in rails for n in names if n.startswith(ib_write_bw_file(r, "")[:-4])}
    return [r for r in rails if r not in ran]


def _partners(names: Sequence[str], kind: str, rails: Sequence[str]) -> list[str]:
    """The peers a pair probe ran with, from its file names (a re-test counts once)."""
    peers = set()
    for n in names:
        if not _PAIR_FILE[kind].match(n):
            continue
        rest = n.removesuffix(".txt").removesuffix(".retry")
        if kind == "tcp_bw":
            peers.add(rest.removeprefix("tcp_bw_"))
            continue
        for r in rails:
            if rest.startswith(prefix := ib_write_bw_file(r, "")[:-4]):
                peers.add(rest.removeprefix(prefix))
    return sorted(peers)


def measured(
    level: Any,
    profile: Mapping[str, Any] | None,
    names: Sequence[str],
    findings: Sequence[Finding],
) -> dict[str, Any]:
    """What the run measured on the node, from its evidence file names: the probe level,
    the repeats and DCGM diag level it ran, the GPUs the whole-GPU probes covered, the
    rails ib_write_bw measured against the profile's, and the pair partners."""
    hardware = (profile or {}).get("hardware") or {}
    count = (hardware.get("gpu") or {}).get("count")
    runs = {int(m.group(1)) for n in names if (m := _RUN.search(n))}
    dcgm = [int(m.group(1)) for n in names if (m := _DCGM.match(n))]
    by_rule = {f.rule: f.status for f in findings}
    rails = _rails(profile)
    left = set(unmeasured_rails(profile, names))
    # BW-001 is ERROR when a run covered fewer GPUs than the node has: judged, every GPU
    whole = by_rule.get("BW-001") in (Status.PASS, Status.WARN)
    return {
        "probes": level if isinstance(level, str) else None,
        "repeats": max(runs, default=0),
        "dcgm_diag_level": max(dcgm, default=None),
        "gpus": {"measured": count if whole else 0, "profile": count},
        "rails": {"measured": [r for r in rails if r not in left], "profile": rails},
        "pairs": {k: _partners(names, k, rails) for k in ("tcp_bw", "ib_write_bw")},
    }


def _scope_of(rule: str, facts: Mapping[str, Any]) -> str:
    """Why a required probe was not measured, as a gap scope, from the facts that decide
    which probes run (gpuboot.probes.node_probes, checks.pair_phase)."""
    from gpuboot.probes import dcgm_refuses_mig, mig_gpus

    pins, profile = facts["pins"], facts["profile"]
    if facts["level"] not in FULL_PROBE_LEVELS:
        return NO_PROBES
    if rule in _CUDA_RULES and mig_gpus(pins):
        return MIG
    if rule == "DCG-001" and profile and pins.get("nvidia_mig_layout"):
        try:
            if dcgm_refuses_mig(dict(profile), pins):
                return MIG
        except (KeyError, TypeError, ValueError):
            pass
    kind = _PAIR_KIND.get(rule)
    verdict = ((facts["pairs"].get(kind) or {}).get(facts["host"]) or {}) if kind else {}
    if isinstance(verdict, Mapping) and verdict.get("status") == "none":
        return NO_PAIR  # pair_phase found no partner for it
    if (var := _TOOL_VAR.get(rule)) and not pins.get(var):
        return NO_TOOL
    if kind and not verdict and not facts["partners"].get(kind):
        return NO_PAIR  # a bundle without the pair phase's record and no pair file
    return UNPROVEN


def gaps(
    findings: Sequence[Finding],
    level: Any,
    required: Sequence[str],
    rails_missing: Sequence[str] = (),
    facts: Mapping[str, Any] | None = None,
) -> list[Gap]:
    """The probe level, each catalogue rule not judged, each required probe not measured
    (skipped, or not run at all), each rail not measured; each with its scope."""
    from gpuboot.checks.rules import RULES

    facts = facts or {"level": level, "pins": {}, "profile": None, "pairs": {}, "partners": {}}
    out = []
    if level not in FULL_PROBE_LEVELS:
        out.append(
            Gap(
                "probes",
                f"probe level {level if isinstance(level, str) else 'not recorded'}: "
                f"a full certificate needs {' or '.join(FULL_PROBE_LEVELS)}",
                NO_PROBES,
            )
        )
    by_rule = {f.rule: f for f in findings}
    for rule_id in sorted(r.id for r in RULES):
        f = by_rule.get(rule_id)
        if f is None:
            out.append(Gap(rule_id, "not evaluated in this run", UNPROVEN))
        elif rule_id in required and f.status not in (Status.PASS, Status.WARN):
            scope = _scope_of(rule_id, facts) if f.status == Status.SKIPPED else UNPROVEN
            out.append(Gap(rule_id, f"{f.status}: {f.reason}", scope))
        elif rule_id == "BW-005" and rule_id in required and rails_missing:
            out.append(
                Gap(
                    "BW-005",
                    f"rails {', '.join(rails_missing)} not measured (probe level {level} "
                    "measures the first rail only: certify with --probes full)",
                    QUICK_PROBES if level == "quick" else UNPROVEN,
                )
            )
    return out


def assess(
    node: NodeReport,
    host_dir: Path,
    names: Sequence[str],
    accepts: Sequence[str] = (),
) -> Extent:
    """The extent of ``node``'s run from its bundle directory; ``names``: the evidence
    files that speak for it (a certificate's: those the run's manifest lists)."""
    meta = read_meta(host_dir)
    profile = sku(host_dir, profile_name(meta), names)
    required = required_checks(profile)
    level = meta.get("probes")
    findings = sorted(node.findings, key=lambda f: f.rule)
    done = measured(level, profile, names, findings)
    pins = meta.get("pins") if isinstance(meta.get("pins"), dict) else {}
    facts = {
        "host": node.host,
        "level": level,
        "pins": pins,
        "profile": profile,
        "pairs": meta.get("pairs") if isinstance(meta.get("pairs"), dict) else {},
        "partners": done["pairs"],
    }
    found = gaps(findings, level, required, unmeasured_rails(profile, names), facts)
    return Extent(node.host, done, tuple(required), tuple(found), tuple(accepts))


def assess_run(
    nodes: Sequence[NodeReport],
    bundle: Path | None,
    accept: Mapping[str, Sequence[str]],
) -> dict[str, Extent]:
    """host -> extent, for each node of a certify run that passed its checks (PASS or WARN):
    the others are not certified whatever was measured."""
    if bundle is None:
        return {}
    out = {}
    for node in nodes:
        if node.verdict not in (Status.PASS, Status.WARN) or not is_safe_name(node.host):
            continue
        host_dir = Path(bundle) / node.host
        try:
            names = sorted(p.name for p in host_dir.iterdir() if p.is_file())
        except OSError:
            names = []
        out[node.host] = assess(node, host_dir, names, accept.get(node.host, ()))
    return out
