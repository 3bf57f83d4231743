"""`gpuboot scan`: the scheduled compliance scan; drift since the last scan, failing nodes
taken out of service."""

from __future__ import annotations

import sys
from dataclasses import replace

from gpuboot.cli import options
from gpuboot.cli.document import RunDocument
from gpuboot.cli.outcome import Outcome
from gpuboot.errors import EXIT_NODE_FAILED
from gpuboot.verdict import BAD


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
            options.k8s(kubeconfig_help="take failing nodes out: cordon, taint uncertified"),
        ],
        help="scheduled compliance scan: drift since the last scan; failing nodes taken out",
        epilog="exit codes: 0 nothing failing; 1 new drift (a rule newly failing, a first "
        "scan's failures, a new RMA escalation); 4 nothing new, but a node or rule could not "
        "be judged (unreachable, harness ERROR); 5 still failing, nothing new since the last "
        "scan; 2 bad input; 3 the run broke",
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
    sc.set_defaults(func=run)


def run(args) -> Outcome:
    from gpuboot.cli import preflight
    from gpuboot.inventory import load_inventory
    from gpuboot.locks import hold_inventory

    if args.textfile_dir:  # written after every node was probed: checked before any
        preflight.check_output_dir(args.textfile_dir, "--textfile-dir")
    if args.kubeconfig:  # an unusable kubeconfig is bad input: refused before any host
        preflight.check_kubeconfig(args)
    inv = load_inventory(args.inventory)  # read once: the lock, the run and the gate use it
    with hold_inventory(inv, args.limit, "scan"):
        return _scan_inventory(args, inv)


def _scan_inventory(args, inv) -> Outcome:
    from pathlib import Path

    from gpuboot import scan
    from gpuboot.cli import gate, render
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
    result = replace(result, report=link_report(result.report))
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
        result.history.trend.records(), page, source=str(result.history_path)
    )
    warning = None
    if args.textfile_dir:  # node_exporter's textfile collector reads every *.prom there
        # merged: under --limit the other nodes' series (and their alerts) stay
        prom, warning = prometheus.write_merged(
            report, Path(args.textfile_dir) / "gpuboot-scan.prom"
        )
        run.written["textfile"] = prom
    code = result.exit_code()  # new drift, not judged, still failing (gpuboot/scan.py)
    text = render.verdict_text(report) + (f"\n{warning}" if warning else "")
    text += "".join(f"\n{line}" for line in scan.drift_lines(report.nodes))
    text += f"\nhistory: {result.history_path}; report: {written['html']}"
    if args.kubeconfig:
        # Only failing nodes go to the gate (taken out of service); a node that passes a
        # scan stays as it is: certify, with its bandwidth probes, lets nodes back in.
        failed = replace(report, nodes=tuple(n for n in report.nodes if n.verdict in BAD))
        run.gate, gate_ok = gate.apply(args, inv, failed, written)
        text += render.gate_text(run.gate)
        code = code if gate_ok else EXIT_NODE_FAILED
    return Outcome(code, run.to_dict(), text)
