"""`gpuboot node explain NODE` and `gpuboot node release NODE --reason TEXT`."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome
from gpuboot.errors import EXIT_OK, BadInput

NODE_HELP = "the node: its Kubernetes name with --kubeconfig, else the inventory host"


def register(verbs, common) -> None:
    node = verbs.add_parser("node", help="who holds a node and how to release it")
    sub = node.add_subparsers(
        dest="node_action", required=True, metavar="{explain,release}", parser_class=type(node)
    )
    kube = options.k8s(kubeconfig_help="the node's cluster", dry_run=False, budget=False)
    history = options.history()
    ex = sub.add_parser(
        "explain",
        parents=[common, kube, history],
        help="who holds the node (gpuboot, another tool, a Lease), why, since when, "
        "and the one command that releases it",
        epilog="exit codes: 0 shown, 2 bad input, 3 the cluster could not be read",
    )
    ex.add_argument("node", help=NODE_HELP)
    ex.set_defaults(func=explain)
    rel = sub.add_parser(
        "release",
        parents=[common, kube, history],
        help="remove gpuboot's marks and quarantine from the node (never another tool's)",
        epilog="exit codes: 0 released, 2 bad input, 3 the cluster could not be written",
    )
    rel.add_argument("node", help=NODE_HELP)
    rel.add_argument("--reason", required=True, help="why it may serve again (recorded)")
    rel.set_defaults(func=release)


def _api(args):
    if not args.kubeconfig:
        return None
    from gpuboot.k8s.client import connect

    return connect(args.kubeconfig, args.k8s_context)


def _cluster_call(api, call):
    """``call()``, with an API failure as the run breaking (exit 3), naming the fix."""
    from gpuboot.errors import RunError

    if api is None:
        return call()
    from gpuboot.k8s.client import describe

    try:
        return call()
    except (api.api_error, *api.transport_errors, ValueError) as exc:
        raise RunError(
            f"the cluster answered: {describe(exc, api)}",
            where="--kubeconfig",
            hint="check the node name (kubectl get nodes) and the API server, then run it again",
        ) from exc


def explain(args) -> Outcome:
    from gpuboot.remediate import hold, record

    api = _api(args)
    doc = _cluster_call(
        api,
        lambda: hold.explain(
            args.node,
            api=api,
            kubeconfig=args.kubeconfig,
            context=args.k8s_context,
            history=record.beside(args.history),
            scan_history=args.history,
        ),
    )
    return Outcome(EXIT_OK, doc, explain_text(doc))


def explain_text(doc: dict) -> str:
    if not doc["held_by"]:
        return f"{doc['node']}: held by nobody; nothing to release"
    since = f" since {doc['since']}" if doc["since"] else ""
    lines = [f"{doc['node']}: held by {doc['held_by']}{since}", f"  why: {doc['why']}"]
    for s in doc.get("steps") or []:
        lines.append(f"  {s['at']} {s['step']}: {s['result']}")
    lines.append(f"  release: {doc['release']}")
    return "\n".join(lines)


def release(args) -> Outcome:
    from pathlib import Path

    from gpuboot import scan
    from gpuboot.remediate import hold, record

    reason = " ".join(args.reason.split())
    if not reason:
        raise BadInput(
            "--reason is empty",
            where="--reason",
            hint="say why it may serve again, e.g. "
            f"gpuboot node release {args.node} --reason 'GPU replaced'",
        )
    api = _api(args)
    doc = _cluster_call(
        api,
        lambda: hold.release(
            args.node,
            reason,
            api=api,
            history=record.beside(args.history),
            scan_history=Path(args.history) if args.history else scan.default_history(),
        ),
    )
    text = f"{doc['node']}: released by {doc['by']} ({reason})\n" + "\n".join(
        f"  {c}" for c in doc["changes"]
    )
    return Outcome(EXIT_OK, doc, text)
