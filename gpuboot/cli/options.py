"""Option groups several verbs take, each declared once: a verb lists the groups it takes
(argparse parents) and declares only its own options."""

from __future__ import annotations

import argparse

HISTORY_HELP = "scan history (default: $GPUBOOT_HOME/scan-history.jsonl)"


def _group() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def _inventory_arg(value: str) -> str:
    """-i resolved once, here: every verb, the gate and the messages use the absolute path
    (ansible-runner and testinfra run in other directories)."""
    from gpuboot.inventory import inventory_path

    return str(inventory_path(value))


def output() -> argparse.ArgumentParser:
    """--json and -q: every verb (the lab's too) takes them."""
    group = _group()
    group.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    group.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return group


def targets(
    *,
    required: bool,
    inventory_help: str | None = None,
    limit_help: str = "Ansible host pattern",
) -> argparse.ArgumentParser:
    """-i INVENTORY and --limit PATTERN: the hosts a verb works on."""
    group = _group()
    group.add_argument(
        "-i", "--inventory", required=required, type=_inventory_arg, help=inventory_help
    )
    group.add_argument("--limit", help=limit_help)
    return group


def probes(*, default: str | None, help: str) -> argparse.ArgumentParser:
    group = _group()
    group.add_argument("--probes", choices=["none", "quick", "full"], default=default, help=help)
    return group


def k8s(*, kubeconfig_help: str, dry_run: bool = True) -> argparse.ArgumentParser:
    """--kubeconfig and its context; --k8s-dry-run where the verb applies the join gate."""
    group = _group()
    group.add_argument("--kubeconfig", help=kubeconfig_help)
    group.add_argument("--k8s-context", help="kubeconfig context")
    if dry_run:
        group.add_argument(
            "--k8s-dry-run", action="store_true", help="show the gate's changes only"
        )
    return group


def history() -> argparse.ArgumentParser:
    group = _group()
    group.add_argument("--history", help=HISTORY_HELP)
    return group


def os_family() -> argparse.ArgumentParser:
    group = _group()
    group.add_argument("--os-family", default="debian", choices=["debian", "redhat"])
    return group


def verify(*, with_flag: str = "") -> argparse.ArgumentParser:
    """What checking a certificate takes besides the certificate: the signer's public key,
    the node it is presented for and, optionally, a bundle collected since."""
    group = _group()
    group.add_argument("--pubkey", help=f"{with_flag}the signer's public key (KEY.pub)")
    group.add_argument("--host", help=f"{with_flag}the node the certificate is presented for")
    group.add_argument(
        "--bundle",
        metavar="DIR",
        help=f"{with_flag}an evidence bundle collected since; the node's hardware must be "
        "the certified one",
    )
    return group


def allow_partial(*, where: str = "") -> argparse.ArgumentParser:
    group = _group()
    group.add_argument(
        "--allow-partial",
        action="store_true",
        help="accept a partial certificate (its run proved less than the SKU requires, e.g. "
        "no pair partner or no probes)" + (f" {where}" if where else ""),
    )
    return group
