"""What the gate wants a node to look like, from its certify verdict and certificate.

Pure: reads the certificate and the bundle's meta.json named by the report, never the
cluster. ``Target.error`` set means the gate must not touch the node (a PASS whose
certificate is missing, unreadable, for another host, expired or partial, i.e. its run
proved less than the SKU requires, such as no pair partner or no probes: lifting the taint
then would let an unproven node in). A partial certificate is accepted only where the
node's ``gpuboot_accept_partial`` (``accepts``) names the scope of every gap.

A failing node is taken out with gpuboot's keyed taint only (``drain`` False: nothing
evicts its pods, so no cordon). A node the harness could not judge (ERROR, nothing FAILed)
is left as it is: what could not be read says nothing of the hardware; only its conditions
say Unknown. Whether a take-out may happen now is the disruption gate's (gpuboot.k8s.gate).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from gpuboot.errors import GpubootError
from gpuboot.k8s import conditions as C
from gpuboot.k8s import labels as L
from gpuboot.k8s.rdma_labels import rdma_labels
from gpuboot.report.extent import refusal
from gpuboot.results import NodeReport
from gpuboot.verdict import Status

Cordon = Literal["cordon", "uncordon-ours", "leave"]


@dataclass
class Target:
    host: str
    verdict: str
    certified: bool = False
    labels: dict[str, str | None] = field(default_factory=dict)  # None: remove the label
    annotations: dict[str, str | None] = field(default_factory=dict)  # None: remove it
    cordon: Cordon = "leave"
    error: str | None = None  # the gate must not touch the node: why (counts as a gate failure)
    # fails, but held back (disruption budget, breaker, cool-down): why. plan() flags it
    # noncompliant and adds no taint or cordon, nor removes anything of gpuboot's
    held: str | None = None
    state: str | None = None  # the LABEL_STATE value (None: the label is removed)
    # condition type -> (status "True"|"False"|"Unknown", reason, message), written through
    # the status subresource after the node's patch
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    drain: bool = False  # the caller evicts the node's pods: cordon it too, not only the taint
    # nothing could be judged (harness ERROR only): the Node object is left as it is and only
    # its conditions are written (Unknown); why, in words
    leave: str | None = None


CERT_MAX = 1 << 20  # a certificate is a few KB


@dataclass(frozen=True)
class CertInfo:
    sha256: str
    expires: int  # unix seconds
    doc: dict[str, Any]


def read_certificate(path: str | Path, host: str, now: datetime) -> CertInfo:
    """Hash, expiry and content of a certificate file; ValueError says why it is unusable."""
    from gpuboot.errors import ConfigError
    from gpuboot.yamlsafe import loads_json_bounded, read_capped_bytes

    try:  # a regular file within the cap: a FIFO would hang the gate, a link mislead it
        data = read_capped_bytes(path, CERT_MAX, "certificate", hint="certify the node again")
    except ConfigError as exc:
        raise ValueError(f"certificate {path} {exc.message}") from exc
    try:
        doc = loads_json_bounded(data)
        expires = datetime.fromisoformat(str(doc["expires_at"]).replace("Z", "+00:00"))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"certificate {path} is malformed ({exc})") from exc
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=UTC)
    if doc.get("host") != host:
        raise ValueError(f"certificate {path} is for host {doc.get('host')!r}, not {host!r}")
    if expires <= now:
        raise ValueError(f"certificate {path} expired at {doc['expires_at']}")
    return CertInfo(hashlib.sha256(data).hexdigest(), int(expires.timestamp()), doc)


def pins_of(bundle: Path | None, host: str) -> dict[str, Any]:
    """The host's recorded variables (meta.json "pins" in the run's ``bundle``), or {}."""
    pins: Any = {}
    if bundle:
        from gpuboot.bundle.names import META, is_safe_name
        from gpuboot.bundle.store import parse_meta, read_file_capped

        host_dir = Path(bundle) / host
        try:  # a regular file within the cap, never a link or a FIFO
            if is_safe_name(host):
                pins = parse_meta(read_file_capped(host_dir / META), str(host_dir)).get("pins")
        except GpubootError:
            pins = {}
    return pins if isinstance(pins, dict) else {}


def stack_of(bundle: Path | None, host: str, cert: CertInfo | None) -> str | None:
    """The pinned stack name (the host's meta.json in the run's ``bundle``), else the pinned
    driver version, else the driver the certificate's fingerprint saw."""
    pins = pins_of(bundle, host)
    for key in ("gpuboot_stack", "nvidia_driver_version"):
        if pins.get(key):
            return str(pins[key])
    driver = ((cert.doc.get("fingerprint") or {}).get("driver") or {}) if cert else {}
    return str(driver["driver_version"]) if driver.get("driver_version") else None


def _rule_ids(node: NodeReport, statuses: tuple[str, ...]) -> list[str]:
    return sorted({f.rule for f in node.findings if f.status in statuses})


def _conditions(node: NodeReport, *, allow_warn: bool) -> dict[str, tuple[str, str, str]]:
    """Certified as this run judges it; compliant unless a rule FAILed (a WARN is degraded
    but compliant), Unknown for both when nothing could be judged."""
    return {
        L.CONDITION_CERTIFIED: C.judged(
            node, passed_reason=C.REASON_CERTIFIED, allow_warn=allow_warn
        ),
        L.CONDITION_COMPLIANT: C.judged(node, passed_reason=C.REASON_COMPLIANT, allow_warn=True),
    }


def _uncertified(node: NodeReport, statuses: tuple[str, ...], *, allow_warn: bool) -> Target:
    failed = L.rules_value(_rule_ids(node, statuses))
    target = Target(
        host=node.host,
        verdict=node.verdict,
        labels={
            L.LABEL_CERTIFIED: "false",
            L.LABEL_FAILED_RULES: failed or None,
            # a stale certificate hash/expiry would vouch for a node that no longer passes
            L.LABEL_STACK: None,
            L.LABEL_CERT_SHA: None,
            L.LABEL_CERT_EXPIRY: None,
            **rdma_labels(node, {}),  # no RDMA offered by a node taken out
        },
        state=L.STATE_TAKEN_OUT,
        conditions=_conditions(node, allow_warn=allow_warn),
    )
    if node.escalations is not None:  # a scan's node (certify keeps no history: leaves it)
        target.labels[L.LABEL_RECOMMENDED_ACTION] = L.ACTION_RMA if node.escalations else None
    return target


def decide(
    node: NodeReport,
    *,
    bundle: Path | None,
    certificate: str | Path | None,
    allow_warn: bool,
    now: datetime,
    accepts: tuple[str, ...] = (),
) -> Target:
    """``node`` of a run whose evidence is in ``bundle``; ``certificate``: the file issued
    for it, if any; ``accepts``: the gap scopes its ``gpuboot_accept_partial`` names."""
    host, verdict = node.host, node.verdict
    if verdict == Status.FAIL:
        return _uncertified(node, (Status.FAIL, Status.ERROR), allow_warn=allow_warn)
    if verdict == Status.ERROR:
        could_not = ", ".join(_rule_ids(node, (Status.ERROR,))) or "the node's evidence"
        return Target(
            host,
            verdict,
            leave=f"could not judge {could_not} (harness ERROR): node left as it is",
            conditions=_conditions(node, allow_warn=allow_warn),
        )
    if verdict == Status.WARN and not allow_warn:
        # degraded but working: kept out of new scheduling by the taint
        return _uncertified(node, (Status.WARN,), allow_warn=allow_warn)
    if verdict not in (Status.PASS, Status.WARN):
        return Target(host, verdict, error=f"unknown verdict {verdict!r}: node left untouched")
    if node.escalations:  # the reboot that cleared the Xid did not mend the part
        faults = ", ".join(e.fault for e in node.escalations)
        return Target(
            host,
            verdict,
            leave=f"RMA escalation open ({faults}): not let back in; after the hardware is "
            f"fixed: gpuboot node release {host} --reason '...'",
        )
    path = certificate
    if not path:
        return Target(
            host,
            verdict,
            error="no certificate was issued (certify with --sign-key): node left "
            "untouched, its uncertified taint stays",
        )
    try:
        cert = read_certificate(path, host, now)
    except ValueError as exc:
        return Target(host, verdict, error=f"{exc}: node left untouched")
    if why := refusal(cert.doc, accepts, host):
        return Target(
            host,
            verdict,
            error=f"certificate {path}: {why}; node left untouched, its uncertified taint stays",
        )
    stack = stack_of(bundle, host, cert)
    return Target(
        host=host,
        verdict=verdict,
        certified=True,
        labels={
            L.LABEL_CERTIFIED: "true",
            L.LABEL_STACK: (L.label_value(stack) or None) if stack else None,
            L.LABEL_CERT_SHA: cert.sha256[:16],
            L.LABEL_CERT_EXPIRY: str(cert.expires),
            L.LABEL_FAILED_RULES: None,
            L.LABEL_RECOMMENDED_ACTION: None,
            **rdma_labels(node, pins_of(bundle, host)),
        },
        cordon="uncordon-ours",
        state=None,
        conditions={
            L.CONDITION_CERTIFIED: (
                C.TRUE,
                C.REASON_CERTIFIED,
                f"certificate sha256 {cert.sha256[:16]} valid until "
                f"{datetime.fromtimestamp(cert.expires, UTC):%Y-%m-%dT%H:%M:%SZ}",
            ),
            L.CONDITION_COMPLIANT: C.judged(
                node, passed_reason=C.REASON_COMPLIANT, allow_warn=True
            ),
        },
    )
