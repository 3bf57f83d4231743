"""`gpuboot scan`: the scheduled compliance scan; drift since the last scan, failing nodes
taken out of service within the disruption budget, recovered ones released, and a breaker
for failures many nodes share (gpuboot.breaker)."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from gpuboot.cli import options
from gpuboot.cli.document import RunDocument
from gpuboot.cli.outcome import EXIT_UNKNOWN, Outcome
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_RUN_BROKE
from gpuboot.verdict import BAD, Status

EPILOG = (
    "exit codes: 0 nothing failing; 1 new drift (a rule newly failing, a first scan's "
    "failures, a new RMA escalation) or a node the Kubernetes gate could not handle; 4 "
    "nothing new, but a node or rule could not be judged (unreachable, harness ERROR); 5 "
    "still failing, nothing new since the last scan; 6 a breaker is open after the scan: "
    "many nodes fail one rule for one reason, none is taken out for it (suspect the rule, "
    "profile, probe or a rollout; `gpuboot breaker status`, then `gpuboot breaker reset`); "
    "6 wins over 1, 4 and 5: while it is open gpuboot holds back on purpose and only a human "
    "can close it; 2 bad input; 3 the run broke; 8 nothing new, but a node was not judged "
    "because its executor was lost (verdict UNKNOWN: never taken out); 1 and 6 win over 8"
)


def register(verbs, common) -> None:
    sc = verbs.add_parser(
        "scan",
        parents=[
            common,
            options.targets(required=True),
            options.probes(
                default="none",
                help="bandwidth probing (default none: a scan must not compete with running jobs)",
            ),
            options.history(),
            options.k8s(
                kubeconfig_help="take failing nodes out (gpuboot's taint, within the "
                "disruption budget) and release recovered ones that hold a valid certificate"
            ),
        ],
        help="scheduled compliance scan: drift since the last scan; failing nodes taken out",
        epilog=EPILOG,
    )
    sc.add_argument("--textfile-dir", help="also write gpuboot-scan.prom there (node_exporter)")
    sc.add_argument(
        "--rma-after-reboots",
        type=int,
        default=2,  # gpuboot.escalation.DEFAULT_REBOOTS; checked before any host
        metavar="N",
        help="a hardware Xid/SXid/row-remap failure back on the same part after N reboots "
        "(boot ids in the scan history) recommends hardware inspection / RMA (default 2)",
    )
    sc.add_argument(
        "--remediate",
        action="store_true",
        help="then remediate the failing nodes on the bounded ladder (reconcile, reset or "
        "reboot, reinstall, quarantine; as `gpuboot remediate`), never a node the breaker "
        "holds back",
    )
    sc.add_argument(
        "--sign-key",
        metavar="KEY",
        help="with --remediate: certificate signing key, so a node that certifies again after "
        "its step is returned to service",
    )
    sc.add_argument(
        "--cert-expiry-days",
        type=int,
        default=7,
        metavar="DAYS",
        help="name the nodes whose certificate expires within DAYS (default 7) or has "
        "expired: an expired certificate lets no node back in",
    )
    sc.set_defaults(func=run)


def run(args) -> Outcome:
    from gpuboot.breaker import BreakerState, state_for
    from gpuboot.cli import gate, preflight
    from gpuboot.inventory import load_inventory
    from gpuboot.locks import hold_inventory

    if args.textfile_dir:  # written after every node was probed: checked before any
        preflight.check_output_dir(args.textfile_dir, "--textfile-dir")
    if args.kubeconfig:  # an unusable kubeconfig is bad input: refused before any host
        preflight.check_kubeconfig(args)
    gate.limits_from(args)  # so are disruption budget options that do not combine
    if args.cert_expiry_days < 0:
        from gpuboot.errors import BadInput

        raise BadInput(
            f"--cert-expiry-days {args.cert_expiry_days} is negative",
            where="--cert-expiry-days",
            hint="a number of days, e.g. --cert-expiry-days 14 (0: only expired ones)",
        )
    if args.sign_key:  # so is a key that cannot sign, or that nothing would sign with
        from gpuboot.errors import BadInput
        from gpuboot.report import certificate

        if not args.remediate:
            raise BadInput(
                "only --remediate certifies nodes again: a scan alone issues no certificate",
                where="--sign-key",
                hint="add --remediate, or leave --sign-key out",
            )
        certificate.load_private_key(args.sign_key)
    # an unreadable breaker state: refused before any host
    BreakerState(state_for(Path(args.history) if args.history else None)).open_rules()
    inv = load_inventory(args.inventory)  # read once: the lock, the run and the gate use it
    with hold_inventory(inv, args.limit, "scan"):
        return _scan_inventory(args, inv)


def _unknown_code(code: int, report) -> int:
    """The scan's code (new drift, not judged, still failing: gpuboot/scan.py), or 8 where
    it would say no more than "not judged" while a node's executor was lost: a lost node is
    not judged, and the operator is told why. New drift still wins."""
    from gpuboot import scan
    from gpuboot.verdict import UNKNOWN

    lost = any(n.verdict == UNKNOWN for n in report.nodes)
    return EXIT_UNKNOWN if lost and code in (scan.EXIT_CLEAN, scan.EXIT_UNJUDGED) else code


def _scan_inventory(args, inv) -> Outcome:
    from gpuboot import breaker, scan
    from gpuboot.cli import render
    from gpuboot.report import prometheus

    result, run = _judge(args, inv)
    report = result.report
    code = _unknown_code(result.exit_code(), report)
    text = render.verdict_text(report, args)
    if not render.wants_markdown(args):  # Markdown shows the drift in each node's block
        text += "".join(f"\n{line}" for line in scan.drift_lines(report.nodes))
    text += f"\nhistory: {result.history_path}; report: {run.written['html']}"
    tripped = _trip(result, run)
    text += "".join(f"\n{line}" for line in tripped.alerts())
    expiry = _certificate_expiry(report, result.history_path, args.cert_expiry_days)
    text += "".join(f"\n{line}" for line in _expiry_lines(expiry, inv, args.cert_expiry_days))
    actions = prometheus.ScanActions(
        breaker_open={
            **{f.rule: False for n in report.nodes for f in n.findings},
            **dict.fromkeys(tripped.open, True),
        }
    )
    if args.kubeconfig:
        actions, gate_ok, more = _to_cluster(args, inv, result, tripped, run, actions)
        text += more
        code = code if gate_ok else EXIT_NODE_FAILED
    remediation = None
    if args.remediate:
        remediation = _remediate(args, inv, report, tripped.held, result.history_path)
        text += "".join(f"\n{line}" for line in _remediation_lines(remediation))
        actions = replace(actions, remediation=_steps(remediation))
        code = EXIT_RUN_BROKE if remediation.exit_code == EXIT_RUN_BROKE else code
    text += _write_metrics(args, report, run, actions, fleet=set(inv.hosts))
    if tripped.open and code != EXIT_RUN_BROKE:
        code = breaker.EXIT_BREAKER_OPEN
    doc = run.to_dict()
    doc["breaker"] = tripped.to_dict()
    doc["certificates"] = expiry
    if remediation is not None:
        doc["remediation"] = remediation.to_dict()
    doc["exit_code"] = code
    return Outcome(code, doc, text)


def _judge(args, inv):
    """The scan itself, each failed rule's fixes linked, its reports and the fleet trend
    page written: (the scan's result, the run's document)."""
    from gpuboot import scan
    from gpuboot.ids import link_report
    from gpuboot.progress import live_run
    from gpuboot.report import prometheus, trend, write_reports

    with live_run(sys.stderr, "scan", quiet=args.quiet) as progress:
        result = scan.scan(
            inv,
            limit=args.limit,
            probes=args.probes,
            history=Path(args.history) if args.history else None,
            progress=progress,
            rma_after_reboots=args.rma_after_reboots,
        )
    result = replace(result, report=link_report(result.report, inv.path))
    report = result.report
    written = write_reports(
        report,
        report.run_dir / "reports",
        key_path=None,
        kind=prometheus.SCAN,
    )
    run = RunDocument(result, dict(written))
    # the fleet trend page beside the report: the history up to this scan, as the scan
    # holds it (not read again)
    page = Path(written["html"]).with_name(trend.NAME)
    run.written["trend"] = trend.write(
        result.history.trend.records(),
        page,
        source=str(result.history_path),
        timelines=_timelines(result.history_path),
    )
    return result, run


def _timelines(history: Path):
    """hosts -> their timelines, for the trend page's node pages (gpuboot.timeline); the
    scan told the history's bad lines already: this second read is quiet."""
    from gpuboot import timeline

    return lambda hosts: timeline.timelines(hosts, history=history)


def _trip(result, run):
    """The breakers this scan opens (kept beside its history) and the nodes they hold
    back, recorded with the run's reports too."""
    from gpuboot import breaker
    from gpuboot.report._util import atomic_write

    tripped = breaker.after_run(
        result.report, breaker.BreakerState(breaker.state_for(result.history_path))
    )
    run.written["breaker"] = atomic_write(
        Path(run.written["html"]).with_name(breaker.STATE_NAME),
        (_json(tripped.to_dict()) + "\n").encode(),
    )
    return tripped


def _to_cluster(args, inv, result, tripped, run, actions):
    """The gate: failing nodes taken out within the budget (those the breaker holds only
    flagged), passing ones with a valid certificate released; then the cluster's census
    for the metrics. (actions, every node gated, text)."""
    from gpuboot.cli import gate, render

    report = result.report
    releasable = _releasable(report, result.history_path, inv)
    gated = replace(
        report, nodes=tuple(n for n in report.nodes if n.verdict in BAD or n.host in releasable)
    )
    certificates = {f"{gate.CERTIFICATE}{h}": p for h, p in releasable.items()}
    run.gate, gate_ok = gate.apply(args, inv, gated, certificates, hold=tripped.held)
    text = render.gate_text(run.gate)
    census, warning = _census(args)
    text += f"\n{warning}" if warning else ""
    actions = replace(
        actions,
        gate=_gate_outcomes(run.gate),
        unavailable=Counter(census.unavailable.values()) if census else None,
        takeouts_in_window=len(census.recent_takeouts) if census else None,
    )
    return actions, gate_ok, text


def _write_metrics(args, report, run, actions, *, fleet: set[str]) -> str:
    """The run's textfile again, now with what the scan did after judging, and the
    node_exporter copy; a warning to show, if any."""
    from gpuboot.report import prometheus

    prometheus.write(report, run.written["prometheus"], kind=prometheus.SCAN, actions=actions)
    if not args.textfile_dir:
        return ""
    # merged: under --limit the other nodes' series (and their alerts) stay; a node that
    # left the inventory goes
    prom, warning = prometheus.write_merged(
        report, Path(args.textfile_dir) / "gpuboot-scan.prom", actions=actions, fleet=fleet
    )
    run.written["textfile"] = prom
    return f"\n{warning}" if warning else ""


def _json(doc) -> str:
    import json

    return json.dumps(doc, indent=2)


def _remediate(args, inv, report, held, history):
    """K4's ladder on the failing nodes the breaker does not hold: a shared cause is not
    fixed by rebooting every node it shows on."""
    from gpuboot.cli import gate
    from gpuboot.cli.outcome import progress
    from gpuboot.remediate.run import run_ladder

    return run_ladder(
        inv,
        limit=args.limit,
        report=replace(report, nodes=tuple(n for n in report.nodes if n.host not in held)),
        kubeconfig=args.kubeconfig,
        context=args.k8s_context,
        limits=gate.limits_from(args),
        dry_run=args.k8s_dry_run,
        progress=progress(args),
        sign_key=Path(args.sign_key) if args.sign_key else None,
        scan_history=history,
        cooldown_s=args.cooldown,
    )


def _remediation_lines(result) -> list[str]:
    lines = []
    for node in result.to_dict()["nodes"]:
        steps = ", ".join(f"{s['step']} {s['result']}" for s in node["steps"])
        why = f" ({node['skipped']})" if node["skipped"] else f": {steps}" if steps else ""
        lines.append(f"remediate {node['host']}: {node['outcome']}{why}")
    return lines


def _steps(result) -> Counter[tuple[str, str]]:
    """(step, result) -> how many, for the metrics."""
    return Counter((s["step"], s["result"]) for n in result.to_dict()["nodes"] for s in n["steps"])


def _gate_outcomes(actions) -> Counter[str]:
    """The gate's actions by outcome (gpuboot.report.prometheus.GATE_OUTCOMES)."""
    out: Counter[str] = Counter()
    for a in actions:
        if a.error or a.missing:
            out["error"] += 1
        elif a.held:
            out["held"] += 1
        elif a.verdict == Status.ERROR:
            out["unjudged"] += 1
        elif a.verdict == Status.PASS:
            out["in_service"] += 1
        else:
            out["out"] += 1
    return out


def _census(args):
    """The cluster's unavailable nodes after the gate, for the metrics: (census, None), or
    (None, a warning) when the API server cannot say (the gate has already reported it)."""
    import time

    from gpuboot.cli import gate
    from gpuboot.k8s import budget
    from gpuboot.k8s.client import connect, describe

    limits = gate.limits_from(args)
    api = connect(args.kubeconfig, args.k8s_context)
    try:
        nodes = budget.list_nodes(api)
    except (api.api_error, *api.transport_errors, ValueError) as exc:
        return None, f"warning: unavailable nodes not counted in the metrics: {describe(exc, api)}"
    census = budget.census(
        nodes, now=time.time(), window_s=limits.window_s, ignore_taints=limits.ignore_taints
    )
    return census, None


def _certificate_expiry(report, history, days: int) -> dict[str, dict]:
    """Per node of the scan whose last certificate expires within ``days`` or has expired:
    its expiry and days left (negative: expired), as `gpuboot status` reads them."""
    from gpuboot import status

    hosts = [n.host for n in report.nodes]
    out = {}
    for node in status.fleet_status(hosts, history=history)["nodes"]:
        cert = (node["certify"] or {}).get("certificate")
        if cert and cert["days_left"] < days:
            out[node["host"]] = cert
    return out


def _expiry_lines(expiry: dict[str, dict], inv, days: int) -> list[str]:
    if not expiry:
        return []
    from gpuboot.ui import host_ranges

    expired = sorted(h for h, c in expiry.items() if c["days_left"] < 0)
    soon = sorted(h for h in expiry if h not in expired)
    lines = []
    if soon:
        left = ", ".join(f"{h} ({expiry[h]['days_left']} d)" for h in soon)
        lines.append(f"certificates expiring within {days} days: {left}")
    if expired:
        lines.append(
            f"certificates expired (not let back in until certified again): {host_ranges(expired)}"
        )
    names = ",".join([*expired, *soon])
    lines.append(
        f"certify them again: gpuboot certify -i {inv.path} --limit {names} --sign-key KEY"
    )
    return lines


def _releasable(report, history, inv) -> dict[str, Path]:
    """host -> its certificate, for each node that passes this scan and whose last certify
    issued it a certificate still valid, full or partial with every gap its
    gpuboot_accept_partial accepts (as certify's gate): the gate releases it (lifts
    gpuboot's taint), the breaker open or not. Read from the controller's kept runs as
    `gpuboot status` reads them; a node without one stays as it is (certify, with its
    probes, lets it in)."""
    from datetime import UTC, datetime

    from gpuboot import paths, status
    from gpuboot.k8s.decision import read_certificate
    from gpuboot.report.extent import policy, refusal

    passing = [n.host for n in report.nodes if n.verdict == Status.PASS]
    if not passing:
        return {}
    now = datetime.now(UTC)
    out = {}
    for node in status.fleet_status(passing, history=history, now=now)["nodes"]:
        last = node["certify"]
        if not last or last["verdict"] != Status.PASS or not last["certificate"]:
            continue
        path = paths.runs_dir() / last["run_id"] / status.CERT_DIR / f"{node['host']}.json"
        try:
            cert = read_certificate(path, node["host"], now)
        except ValueError:
            continue
        if not refusal(cert.doc, policy(inv.hosts.get(node["host"])), node["host"]):
            out[node["host"]] = path
    return out
