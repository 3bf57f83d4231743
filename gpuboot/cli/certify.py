"""`gpuboot certify -i INVENTORY`: each node checked (and probed) against its profile,
evidence collected, reports and certificates written, the join gate applied."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gpuboot.cli import cert, options
from gpuboot.cli.document import RunDocument
from gpuboot.cli.outcome import EXIT_PARTIAL, EXIT_UNKNOWN, Outcome, deprecated
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK, BadInput
from gpuboot.verdict import Status


def register(verbs, common) -> None:
    p = verbs.add_parser(
        "certify",
        parents=[
            common,
            options.targets(required=False),
            options.probes(
                default=None,
                help="bandwidth probing (default: each host's gpuboot_probes, else quick)",
            ),
            options.k8s(
                kubeconfig_help="apply the join gate: untaint certified nodes, take failing "
                "ones out within the disruption budget"
            ),
            options.retired_allow_partial(),
            # with the old spellings of `gpuboot cert verify|keygen`, kept working
            options.verify(with_flag="with --verify: "),
        ],
        help="check each node against its profile; collect evidence",
        epilog="exit codes: 0 every node passed (with --sign-key: certified, in full or "
        "partially as its gpuboot_accept_partial accepts), 1 a node failed or the join gate "
        "could not act, 2 bad input, 3 the run broke, "
        f"{EXIT_PARTIAL} with --sign-key: no node failed, but a node's certificate is partial "
        f"with a gap its gpuboot_accept_partial does not accept, {EXIT_UNKNOWN} no node failed, "
        "but a node was not judged: its executor was lost (verdict UNKNOWN)",
    )
    p.add_argument("--bundle-dir", help="where evidence bundles go (default: the run dir)")
    p.add_argument("--sign-key", help="Ed25519 key: issue a signed certificate per PASS node")
    p.add_argument(
        "--textfile-dir",
        help="also write gpuboot-certify.prom there (node_exporter; merged: the series of "
        "nodes not in this run stay, those of nodes that left the inventory go)",
    )
    p.add_argument(
        "--cert-validity-days",
        type=int,
        default=30,  # certificate.DEFAULT_VALIDITY_DAYS; MAX_VALIDITY_DAYS is checked
        help="days a certificate is valid (default 30, at most 365)",
    )
    p.add_argument("--allow-warn", action="store_true", help="certify WARN nodes too")
    p.add_argument(
        "--calibrate",
        metavar="FILE",
        help="write a gpuboot_thresholds baseline from the healthy nodes",
    )
    p.add_argument("--calibrate-min-nodes", type=int, default=3)
    p.add_argument("--verify", metavar="CERT", help="deprecated: `gpuboot cert verify CERT`")
    p.add_argument("--gen-key", metavar="PATH", help="deprecated: `gpuboot cert keygen PATH`")
    p.set_defaults(func=run)


def run(args) -> Outcome:
    if args.gen_key:
        deprecated("certify --gen-key PATH", "gpuboot cert keygen PATH")
        return cert.keygen(args.gen_key)
    if args.verify:
        deprecated("certify --verify CERT", "gpuboot cert verify CERT")
        return cert.verify(args.verify, args, label="--verify")
    if not args.inventory:
        raise BadInput(
            "certify needs -i INVENTORY (or --verify CERT, or --gen-key PATH)",
            where="gpuboot certify",
            hint="see `gpuboot certify --help`",
        )
    from gpuboot.cli import preflight
    from gpuboot.report import certificate

    certificate.check_validity_days(args.cert_validity_days)  # before any host is touched
    if args.sign_key:  # a key that cannot sign is found now, not after every node's probes
        certificate.load_private_key(args.sign_key)
    if args.calibrate:
        preflight.check_output_file(args.calibrate, "--calibrate")
    if args.textfile_dir:  # written after every node was probed: checked before any
        preflight.check_output_dir(args.textfile_dir, "--textfile-dir")
    if args.kubeconfig:  # an unusable kubeconfig is bad input: refused before any host
        preflight.check_kubeconfig(args)
    from gpuboot.inventory import load_inventory
    from gpuboot.locks import hold_inventory

    inv = load_inventory(args.inventory)  # read once: the lock, the run and the gate use it
    # The probes need idle GPUs and the gate changes taints: one such run per node.
    with hold_inventory(inv, args.limit, "certify"):
        return _certify_inventory(args, inv)


def _certify_inventory(args, inv) -> Outcome:
    """certify -i: checks and probes, reports, certificates, the gate."""
    from gpuboot import certify
    from gpuboot.cli import gate, render
    from gpuboot.cli.extent_text import certification_text, measured_block
    from gpuboot.ids import link_report
    from gpuboot.progress import live_run
    from gpuboot.report import write_reports

    with live_run(sys.stderr, "certify", quiet=args.quiet) as progress:
        report = certify.certify(
            inv,
            limit=args.limit,
            bundle_root=args.bundle_dir,
            progress=progress,
            probes=args.probes,
        )
    report = link_report(report, inv.path)  # each failed rule -> its fix (JSON, text, HTML)
    extents = _extents(args, inv, report)
    # certification happens with a key only: without one the run is a check, and its
    # reports claim no certification (no PARTIAL, no exit 7); text and --json say the extent
    certifying = extents if args.sign_key else None
    written = write_reports(
        report,
        report.run_dir / "reports",
        key_path=Path(args.sign_key) if args.sign_key else None,
        validity_days=args.cert_validity_days,
        allow_warn=args.allow_warn,
        extents=certifying,
    )
    run = RunDocument(report, written)
    code = _verdicts_code(report)
    refused = {h for h, e in extents.items() if not e.certifies} if args.sign_key else set()
    text = render.verdict_text(report, args, refused) + f"\nreport: {written['html']}"
    certs = [p for name, p in written.items() if name.startswith("certificate:")]
    if certs:
        text += f"\ncertificates: {len(certs)} in {certs[0].parent}"
    text += measured_block(extents)
    text += certification_text(extents, str(inv.path), args.sign_key, list(inv.hosts))
    if args.textfile_dir:
        run.written["textfile"], warning = _textfile(args, inv, report, certs, certifying)
        text += f"\n{warning}" if warning else ""
    if args.calibrate:
        run.calibration = _calibrate(args, report)
        text += render.calibration_text(run.calibration)
    if args.kubeconfig:
        run.gate, _ = gate.apply(args, inv, _known(report), written, allow_warn=args.allow_warn)
        text += render.gate_text(run.gate)
        # a partial certificate the gate refused is told by the exit code for partial
        failed = [
            a for a in run.gate if (a.error or a.missing) and (a.host or a.node) not in refused
        ]
        code = code if not failed else EXIT_NODE_FAILED
    if code == EXIT_OK and refused:
        code = EXIT_PARTIAL
    doc = run.to_dict()
    for node in doc["nodes"]:  # each passing node's extent beside its verdict
        if node["host"] in extents:
            node["certification"] = extents[node["host"]].to_dict()
    return Outcome(code, doc, text)


def _verdicts_code(report) -> int:
    """1 when a node failed (anything but PASS: certify's verdicts), else 8 when a node was
    not judged because its executor was lost, else 0."""
    from gpuboot.verdict import UNKNOWN

    verdicts = {n.verdict for n in report.nodes}
    if verdicts - {Status.PASS, UNKNOWN}:
        return EXIT_NODE_FAILED
    return EXIT_UNKNOWN if UNKNOWN in verdicts else EXIT_OK


def _known(report):
    """The nodes the gate acts on: not one whose executor was lost (not judged, so neither
    released nor taken out)."""
    from dataclasses import replace

    from gpuboot.verdict import UNKNOWN

    return replace(report, nodes=tuple(n for n in report.nodes if n.verdict != UNKNOWN))


def _extents(args, inv, report):
    """host -> what the run measured on it and its gaps, for each node certify would
    certify (PASS; WARN with --allow-warn), with its gpuboot_accept_partial."""
    from gpuboot.report.certificate import eligible
    from gpuboot.report.extent import assess_run, policies

    nodes = [n for n in report.nodes if eligible(n, allow_warn=args.allow_warn)]
    return assess_run(nodes, report.bundle, policies(inv))


def _textfile(args, inv, report, certs: list[Path], extents) -> tuple[Path, str | None]:
    """gpuboot-certify.prom for node_exporter, merged with the nodes not in this run."""
    import json

    from gpuboot.report import prometheus

    issued = {p.stem: json.loads(p.read_bytes()) for p in certs}  # written by this run
    return prometheus.write_merged(
        report,
        Path(args.textfile_dir) / "gpuboot-certify.prom",
        kind=prometheus.CERTIFY,
        fleet=set(inv.hosts),
        certificates=issued,
        extents=extents,
    )


def _calibrate(args, report) -> dict[str, Any]:
    """--calibrate FILE: the healthy nodes' medians written as a thresholds file."""
    from pathlib import Path

    import yaml

    from gpuboot.calibrate import calibrate

    baseline = calibrate(report, min_nodes=args.calibrate_min_nodes)
    Path(args.calibrate).write_text(
        "# gpuboot certify --calibrate: medians of hardware-healthy nodes\n"
        f"# ({', '.join(baseline['healthy_nodes']) or 'none'}); review, then use as\n"
        "# group_vars for these nodes.\n"
        + yaml.safe_dump({"gpuboot_thresholds": baseline["gpuboot_thresholds"]})
    )
    return {**baseline, "file": args.calibrate}
