"""`gpuboot lab ...`: the lab's verbs, added to the gpuboot CLI through the entry point
group ``gpuboot.verbs`` (lab/pyproject.toml), so the product never imports the lab.

The verbs follow gpuboot.cli's contract: they return an Outcome and raise GpubootError;
only gpuboot.cli prints or exits. Lab modules are imported inside the verbs (quick --help).
"""

from __future__ import annotations

import argparse

from gpuboot.cli import Outcome, _progress
from gpuboot.errors import EXIT_OK


def register(verbs: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add `gpuboot lab` and its sub-verbs to the CLI's verb parsers."""
    lab = verbs.add_parser("lab", help="a simulated GPU fleet of podman nodes")
    lab_verbs = lab.add_subparsers(dest="lab_verb", required=True, parser_class=type(lab))
    name = argparse.ArgumentParser(add_help=False)
    name.add_argument("--name", default="lab", help="lab name (several labs may coexist)")
    up = lab_verbs.add_parser("up", parents=[common, name], help="create a lab")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--profile", default="hgx-h100-sxm-8gpu", help="SKU profile of every node")
    up.add_argument("--stack", help="gpuboot_stack for every node (default: driver pin only)")
    up.add_argument(
        "--os",
        default="debian",
        help="node OS: debian, el8, el9 or el10 (real dnf/rpm, emulated EL identity); "
        "a comma list (debian,el9) gives the nodes these OSes in turn",
    )
    up.add_argument(
        "--halls",
        type=int,
        default=0,
        help="split the nodes over this many halls: each an internal network the controller "
        "cannot reach, served by an executor on the management network (default 0: none)",
    )
    up.set_defaults(func=cmd_lab_up)
    image = lab_verbs.add_parser("image", parents=[common], help="build the node image (cached)")
    image.add_argument(
        "--os", default="debian", help="debian, el8, el9, el10 or a comma list (as lab up)"
    )
    image.set_defaults(func=cmd_lab_image)
    st = lab_verbs.add_parser("status", parents=[common], help="list labs and their nodes")
    st.add_argument("--name", default=None)
    st.set_defaults(func=cmd_lab_status)
    lab_verbs.add_parser("down", parents=[common, name], help="remove a lab entirely").set_defaults(
        func=cmd_lab_down
    )
    fault = lab_verbs.add_parser("fault", parents=[common, name], help="inject a hardware fault")
    fault.add_argument("node")
    fault.add_argument("kind", help="e.g. xid, driver-mismatch, nvlink-down, pcie-downtrain")
    fault.add_argument("args", nargs="*", help="fault arguments, e.g. the Xid code")
    fault.add_argument("--survive-reboot", action="store_true")
    fault.set_defaults(func=cmd_lab_fault)
    clear = lab_verbs.add_parser("clear", parents=[common, name], help="clear a node's faults")
    clear.add_argument("node")
    clear.add_argument("kind", nargs="?")
    clear.add_argument(
        "--reboot",
        action="store_true",
        help="also reboot: the kernel log keeps a fault's Xid lines until then",
    )
    clear.set_defaults(func=cmd_lab_clear)
    rb = lab_verbs.add_parser("reboot", parents=[common, name], help="power-cycle a node")
    rb.add_argument("node")
    rb.set_defaults(func=cmd_lab_reboot)


def cmd_lab_up(args) -> Outcome:
    from gpuboot_lab import lab

    created = lab.up(
        args.name,
        args.nodes,
        args.profile,
        progress=_progress(args),
        stack=args.stack,
        os_spec=args.os,
        halls=args.halls,
    )
    doc = {
        "lab": created.name,
        "profile": created.profile,
        "inventory": str(created.inventory),
        "nodes": [
            {"name": n.name, "ip": n.ip, "os": n.os, **({"domain": n.domain} if n.domain else {})}
            for n in created.nodes
        ],
        "halls": [
            {"domain": h.domain, "subnet": h.subnet, "executor": h.executor, "ip": h.executor_ip}
            for h in created.halls
        ],
    }
    oses = ", ".join(sorted({n.os for n in created.nodes}))
    halls = "".join(
        f"{h.domain}: {h.subnet}, executor {h.executor} at {h.executor_ip}\n" for h in created.halls
    )
    setup = f"gpuboot executor setup -i {created.inventory} && " if created.halls else ""
    text = (
        f"lab {created.name}: {len(created.nodes)} x {created.profile} ({oses}) up\n"
        f"{halls}inventory: {created.inventory}\n"
        f"next: {setup}gpuboot install -i {created.inventory}"
    )
    return Outcome(EXIT_OK, doc, text)


def cmd_lab_image(args) -> Outcome:
    from gpuboot_lab.image import ensure_el_image, ensure_image, image_tag
    from gpuboot_lab.lab import parse_os
    from gpuboot_lab.podman import exists

    oses = parse_os(args.os)
    if not exists("image", image_tag()):
        _progress(args)("building the lab node image from Debian's archive (about 90 s, once)")
    tags = {"debian": ensure_image()}
    for os_name in oses:
        if os_name != "debian":
            tags[os_name] = ensure_el_image(os_name.removeprefix("el"))
    shown = {o: tags[o] for o in oses}
    text = "\n".join(f"lab node image ({o}): {t}" for o, t in shown.items())
    return Outcome(EXIT_OK, {"image": shown[oses[0]], "images": shown}, text)


def cmd_lab_status(args) -> Outcome:
    from gpuboot.ui import table
    from gpuboot_lab import lab

    labs = lab.status(args.name)
    rows = [
        (entry["lab"], entry["profile"], n["name"], n["os"], n["ip"], n["state"])
        for entry in labs
        for n in entry["nodes"]
    ] + [
        (
            entry["lab"],
            entry["profile"],
            e["name"],
            f"executor of {e['domain']}",
            e["ip"],
            e["state"],
        )
        for entry in labs
        for e in entry.get("executors", ())
    ]
    text = table(("lab", "profile", "node", "os", "ip", "state"), rows) if rows else "no labs"
    return Outcome(EXIT_OK, {"labs": labs}, text)


def cmd_lab_down(args) -> Outcome:
    from gpuboot_lab import lab

    doc = lab.down(args.name)
    return Outcome(EXIT_OK, doc, f"lab {args.name}: removed {len(doc['removed'])} podman objects")


def cmd_lab_fault(args) -> Outcome:
    from gpuboot_lab import lab

    extra = ["--survive-reboot"] if args.survive_reboot else []
    out = lab.emulator_ctl(args.name, args.node, "fault", "add", args.kind, *args.args, *extra)
    doc = {"lab": args.name, "node": args.node, "fault": args.kind, "args": args.args}
    return Outcome(EXIT_OK, doc, out.strip() or f"{args.node}: fault {args.kind} injected")


def cmd_lab_clear(args) -> Outcome:
    from gpuboot_lab import lab

    out = lab.emulator_ctl(
        args.name, args.node, "fault", "clear", *([args.kind] if args.kind else [])
    )
    if args.reboot:
        lab.reboot(args.name, args.node)
    doc = {
        "lab": args.name,
        "node": args.node,
        "cleared": args.kind or "all",
        "rebooted": args.reboot,
    }
    text = out.strip() or f"{args.node}: faults cleared"
    return Outcome(EXIT_OK, doc, text + (" and node rebooted" if args.reboot else ""))


def cmd_lab_reboot(args) -> Outcome:
    from gpuboot_lab import lab

    lab.reboot(args.name, args.node)
    return Outcome(
        EXIT_OK, {"lab": args.name, "node": args.node, "rebooted": True}, f"{args.node}: rebooted"
    )
