"""`gpuboot remediate`: the bounded ladder on the selection's failing nodes."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome, progress

EPILOG = (
    "exit codes: 0 every failing node certified again (or none failed; --dry-run), "
    "1 a node still fails, was quarantined or held back, 2 bad input, "
    "3 a certify could not judge a node (the harness broke)"
)


def register(verbs, common) -> None:
    p = verbs.add_parser(
        "remediate",
        parents=[
            common,
            options.targets(required=True),
            options.k8s(
                kubeconfig_help="cluster of the nodes: gate, Lease, drain and labels per step",
                dry_run=False,
            ),
            options.history(),
            options.retired_allow_partial(),
        ],
        help="reconcile, reset or reboot, reinstall, quarantine the failing nodes",
        epilog=EPILOG,
    )
    p.add_argument("--dry-run", action="store_true", help="print the steps it would take")
    p.add_argument(
        "--sign-key",
        help="certificate signing key: a node that certifies again is returned to service",
    )
    p.set_defaults(func=run)


def run(args) -> Outcome:
    from pathlib import Path

    from gpuboot.cli import gate, preflight
    from gpuboot.remediate.run import run_ladder

    limits = gate.limits_from(args)  # bad budget values: exit 2 before any host
    if args.kubeconfig:  # an unusable kubeconfig is bad input: refused before any host
        preflight.check_kubeconfig(args)
    if args.sign_key:
        from gpuboot.report import certificate

        certificate.load_private_key(args.sign_key)
    result = run_ladder(
        args.inventory,
        limit=args.limit,
        kubeconfig=args.kubeconfig,
        context=args.k8s_context,
        limits=limits,
        cooldown_s=args.cooldown,
        dry_run=args.dry_run,
        progress=progress(args),
        sign_key=Path(args.sign_key) if args.sign_key else None,
        scan_history=Path(args.history) if args.history else None,
    )
    return Outcome(result.exit_code, result.to_dict(), text(result.to_dict()))


def text(doc: dict) -> str:
    if not doc["nodes"]:
        return "remediate: no failing node"
    lines = []
    would = " (dry run: each step shown as if the one before failed)" if doc["dry_run"] else ""
    for n in doc["nodes"]:
        name = n["host"] if n["node"] == n["host"] else f"{n['host']} (node {n['node']})"
        lines.append(f"{name}: {n['fault']['key']}{would}")
        if n["skipped"]:
            lines.append(f"  skipped: {n['skipped']}")
        for s in n["steps"]:
            detail = f": {s['detail']}" if s["detail"] else ""
            lines.append(f"  {s['step']}: {s['result']}{detail}")
    return "\n".join(lines)
