"""Option groups several verbs take, each declared once: a verb lists the groups it takes
(argparse parents) and declares only its own options."""

from __future__ import annotations

import argparse
from argparse import SUPPRESS

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


# What each probe level measures (gpuboot.probes, checks.pair_phase): the certificate
# records the level, and a partial one names what its run did not prove.
PROBE_LEVELS = (
    "none: state checks only, no bandwidth; quick: nvbandwidth host<->device and "
    "device<->device copies and all_reduce_perf over every GPU, 3 runs each (median), "
    "dcgmi diag -r 1, and between node pairs TCP for 1 s and ib_write_bw on the first rail "
    "only; full: 5 runs each, dcgmi diag -r 3, TCP for 3 s and ib_write_bw on every rail"
)


def probes(*, default: str | None, help: str) -> argparse.ArgumentParser:
    group = _group()
    group.add_argument(
        "--probes",
        choices=["none", "quick", "full"],
        default=default,
        help=f"{help}. Levels: {PROBE_LEVELS}",
    )
    return group


def k8s(
    *, kubeconfig_help: str, dry_run: bool = True, budget: bool = True
) -> argparse.ArgumentParser:
    """--kubeconfig and its context; with ``budget`` the disruption budget every verb that
    takes nodes out of service obeys; --k8s-dry-run where the verb applies the join gate.
    The values are checked as they are parsed, how they combine before any host is touched
    (gpuboot.cli.gate.limits_from): bad ones exit 2 naming the option and the fix."""
    group = _group()
    group.add_argument("--kubeconfig", help=kubeconfig_help)
    group.add_argument("--k8s-context", help="kubeconfig context")
    if dry_run:
        group.add_argument(
            "--k8s-dry-run", action="store_true", help="show the gate's changes only"
        )
    if budget:
        _budget(group)
    return group


def _budget(group: argparse.ArgumentParser) -> None:
    from gpuboot.k8s.budget import DEDICATED_TAINTS

    budget = group.add_argument_group(
        "disruption budget",
        "every node gpuboot takes out counts against these, with every node already out "
        "(cordoned, NoSchedule/NoExecute-tainted, NotReady) whoever made it so",
    )
    budget.add_argument(
        "--max-unavailable",
        default="10%",
        metavar="N|P%",
        help="at most N nodes (or P%% of the pool, rounded down, at least 1) unavailable "
        "(default 10%%)",
    )
    budget.add_argument(
        "--max-unavailable-per-domain",
        type=_whole("--max-unavailable-per-domain", minimum=1),
        metavar="N",
        help="at most N unavailable nodes per failure domain (default 1 with --domain-label)",
    )
    budget.add_argument(
        "--domain-label",
        metavar="KEY",
        help="the node label naming a node's failure domain, e.g. nvidia.com/gpu.clique or "
        "topology.kubernetes.io/rack",
    )
    budget.add_argument(
        "--pool-label", metavar="KEY", help="count each value of this node label as its own pool"
    )
    budget.add_argument(
        "--max-new-takeouts",
        default="5%",
        metavar="N|P%",
        help="at most N (or P%% of the pool) new take-outs by gpuboot per window (default 5%%)",
    )
    budget.add_argument(
        "--takeout-window",
        type=_whole("--takeout-window", minimum=1),
        default=600,
        metavar="SECONDS",
        help="the window of --max-new-takeouts (default 600)",
    )
    budget.add_argument(
        "--ignore-taint",
        action="append",
        metavar="KEY",
        help="a NoSchedule/NoExecute taint that dedicates nodes rather than takes them out "
        f"(repeatable; always: {', '.join(DEDICATED_TAINTS)})",
    )
    budget.add_argument(
        "--cooldown",
        type=_whole("--cooldown", minimum=0),
        default=3600,
        metavar="SECONDS",
        help="after a human undoes gpuboot's take-out, no new take-out of that node for so "
        "long unless its fault is critical (a lost GPU, Xid 79) (default 3600)",
    )


def _whole(flag: str, *, minimum: int):
    """An argparse type: a whole number >= ``minimum``, else bad input naming ``flag``."""

    def parse(text: str) -> int:
        from gpuboot.errors import BadInput

        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise BadInput(
                f"{text!r} is not a whole number >= {minimum}",
                where=flag,
                hint=f"e.g. {flag} {max(minimum, 1)}",
            )
        return value

    return parse


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


class _RetiredAllowPartial(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        from gpuboot.errors import BadInput
        from gpuboot.report.extent import ACCEPT_VAR, GAP_SCOPES

        raise BadInput(
            "--allow-partial was removed: which gaps of a partial certificate a node may "
            "have is its group's policy now, not one switch for the whole run",
            where=option_string,
            hint=f"set {ACCEPT_VAR} in the inventory for the hosts or group (e.g. {ACCEPT_VAR}: "
            f"[mig]; names: {', '.join(GAP_SCOPES)}), then run the command without "
            f"{option_string}",
        )


def retired_allow_partial() -> argparse.ArgumentParser:
    """--allow-partial, refused with the inventory variable that replaced it (exit 2)."""
    group = _group()
    group.add_argument("--allow-partial", nargs=0, action=_RetiredAllowPartial, help=SUPPRESS)
    return group


# The verbs whose summary an operator pastes into a ticket (gpuboot.cli.render).
FORMAT_VERBS = ("certify", "evaluate", "scan", "status")


def add_text_format(verbs) -> None:
    """--format text|markdown on FORMAT_VERBS (--json stays the machine's document)."""
    for name in FORMAT_VERBS:
        verbs.choices[name].add_argument(
            "--format",
            choices=("text", "markdown"),
            default="text",
            help="text: a table fitted to the terminal; markdown: the summary to paste into "
            "a ticket (fleet line, table, a block per node not passed, fix commands)",
        )
