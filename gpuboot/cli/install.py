"""`gpuboot install`: converge the nodes to their pinned stack, in batches."""

from __future__ import annotations

import sys

from gpuboot.cli import options
from gpuboot.cli.outcome import EXIT_UNKNOWN, Outcome, err
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK, BadInput


def register(verbs, common) -> None:
    inst = verbs.add_parser(
        "install",
        parents=[
            common,
            options.targets(required=True),
            options.k8s(
                kubeconfig_help="cordon and drain cluster members before their stack changes;"
                " `certify --kubeconfig` readmits them once they pass",
                dry_run=False,
            ),
        ],
        help="install and pin the software stack",
    )
    inst.add_argument("--tags", action="append", help="only tasks with this tag (repeatable)")
    inst.add_argument("--forks", type=int, default=10)
    inst.add_argument(
        "-v", "--verbose", action="store_true", help="stream each task's result per host on stderr"
    )
    inst.add_argument(
        "--strategy",
        default="linear",
        help="linear (Ansible's own, the default) or mitogen (faster controller; "
        "pip install 'gpuboot[fast]')",
    )
    inst.add_argument(
        "--check", action="store_true", help="report what would change; change nothing"
    )
    inst.add_argument("--diff", action="store_true", help="show file and package differences")
    inst.add_argument(
        "--serial", metavar="N|N%", help="roll out in batches of N hosts (or N%% of them)"
    )
    inst.add_argument(
        "--max-fail",
        metavar="N|N%",
        help="stop the rollout once more than N hosts (or N%%) have failed (default: no limit)",
    )
    inst.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="RUN_ID",
        help="redo only the hosts of an earlier install run not known done: failed, unknown"
        " (their executor was lost; what it finished meanwhile is read, not redone) and"
        " never started (default: the latest run of this inventory)",
    )
    inst.add_argument(
        "--allow-reboot",
        action="store_true",
        help="reboot nodes whose new stack needs it (once each, never the controller)",
    )
    inst.add_argument(
        "--full",
        action="store_true",
        help="run every role, also on nodes unchanged since their last converge",
    )
    inst.add_argument(
        "--drain-timeout",
        type=float,
        default=600,
        metavar="SECONDS",
        help="give up on a node whose pods are not evicted by then (default: 600)",
    )
    inst.set_defaults(func=run)


def run(args) -> Outcome:
    from gpuboot import install
    from gpuboot.cli import render
    from gpuboot.cli.gate import limits_from
    from gpuboot.progress import live_install

    if args.drain_timeout <= 0:
        raise BadInput(
            f"--drain-timeout {args.drain_timeout:g} must be a positive number of seconds",
            hint="e.g. --drain-timeout 900",
        )
    drain = None
    if args.kubeconfig:
        drain = install.Drain(
            args.kubeconfig, args.k8s_context, args.drain_timeout, limits_from(args)
        )
    with live_install(sys.stderr, quiet=args.quiet, verbose=args.verbose) as live:
        result = install.install(
            args.inventory,
            limit=args.limit,
            tags=tuple(args.tags or ()),
            forks=args.forks,
            strategy=args.strategy,
            check=args.check,
            diff=args.diff,
            serial=args.serial,
            max_fail=args.max_fail,
            resume=args.resume,
            allow_reboot=args.allow_reboot,
            full=args.full,
            drain=drain,
            progress=live,
            warn=lambda msg: err(f"gpuboot: {msg}"),  # shown even with -q
        )
    rollout = result.rollout
    failed = result.hosts and (rollout.failed or rollout.pending)
    # a host whose executor was lost is not failed: 8 says so, unless a host truly failed
    code = EXIT_NODE_FAILED if failed else EXIT_UNKNOWN if rollout.unknown else EXIT_OK
    return Outcome(code, result.to_dict(), render.install_text(result, args))
