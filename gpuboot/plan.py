"""`gpuboot plan`: what each node has now against what its stack wants (read-only),
and the nodes grouped by identical change set.

One SSH round trip per node (`dpkg-query -W`; `rpm -qa` on EL, and on EL8/EL9 dnf's enabled
module streams from its cache; then what NVIDIA's .run installer left that no package owns),
all nodes in parallel, each reached through the transport certify uses (gpuboot.transport),
or, for a host with a ``gpuboot_domain``, by its domain's executor (the same command
through gpuboot.executor.relay, its answer checked end to end: the same plan); nothing is
changed on any node. A host whose executor was lost is not read: its plan is unknown. A
node that cannot be reached is reported as such (with what ssh said) and the others are
still planned. A node running a driver installed outside
packages is blocked: install refuses it (install.yml runs the same script) until
`nvidia-installer --uninstall` has removed it.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from gpuboot import paths, transport
from gpuboot.bundle.model import MAX_FILE_BYTES
from gpuboot.collect import ended_short, parse_rc
from gpuboot.errors import ParseError
from gpuboot.evidence.packages import (
    DNF_MODULE_LIST,
    DPKG_QUERY,
    RPM_QUERY,
    installed_rpm_versions,
    installed_versions,
)
from gpuboot.executor import shards
from gpuboot.executor.collect_fleet import CONTROLLER, Shard, in_background, plan_shards
from gpuboot.executor.collect_job import AnswerCorrupted, ExecutorLost
from gpuboot.executor.relay import Answer, Command, run_on
from gpuboot.inventory import Inventory, load_inventory, select_hosts
from gpuboot.node_collect import HostUnreachable, check_deadlines, host_deadline
from gpuboot.remote import AnswerTooLarge, RemoteTimeout, run_with_deadline
from gpuboot.report._util import host_key
from gpuboot.runner import failure_reason, last_line
from gpuboot.ui import host_ranges

# dpkg-query answers in about a second; a node holding the session longer than this is
# reported, not waited for (one such node used to hold the whole plan)
READ_TIMEOUT_S = 120
READING = "reading installed packages"
# EL8/EL9 stacks pin the driver's module stream too: dnf's enabled streams (from its cache,
# no network, no key trusted) follow rpm's database in the same round trip, after a line
# carrying rpm's exit status.
_STREAMS_MARK = "--gpuboot-dnf-modules rpm-exit="
EL_STREAM_QUERY = f"{RPM_QUERY}; printf '\\n{_STREAMS_MARK}%s\\n' \"$?\"; {DNF_MODULE_LIST}"


# NVIDIA's .run installer leaves files no package owns (the script says which and why);
# its listing follows the package read in the same round trip. install.yml runs the same
# file before any change.
RUNFILE_SCRIPT = paths.PLAYBOOKS_DIR / "files" / "runfile-driver.sh"
# Each part of the answer (the package read, then the listing) is written to a file on the
# node, then sent with the collection's trailer "<exit> <bytes>" (gpuboot.collect) on a line
# of its own: an answer cut anywhere lacks a trailer or counts other bytes, and is no read
# of the node (ERROR), never packages "not installed" that plan would install.
_END = "--gpuboot-end"
PACKAGES, RUNFILE = "packages", "runfile"
# a node's listing is a few lines; more is not the script's answer
_RUNFILE_MAX_LINES = 64
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+~-]{0,63}")


class CutAnswer(ValueError):
    """The node's answer is not all it wrote: no trailer, or another byte count."""


def _part(name: str, body: str, stderr: str = "") -> str:
    # the body in a subshell: it may end in `exit` (EL_STREAM_QUERY does)
    return (
        f'( {body}\n){stderr} >"$f"; rc=$?; cat "$f"; '
        f'printf \'\\n{_END} {name} %s %s\\n\' "$rc" "$(wc -c <"$f")"'
    )


def with_runfile_read(query: str) -> str:
    """``query`` followed by the .run installer's traces (its stderr, the install's
    refusal text, is not plan's), each part ending in its trailer."""
    return "\n".join(
        (
            "f=$(mktemp) || exit 97",
            "trap 'rm -f \"$f\"' EXIT",
            _part(PACKAGES, query),
            _part(RUNFILE, RUNFILE_SCRIPT.read_text(), " 2>/dev/null"),
        )
    )


def split_runfile_answer(stdout: str) -> tuple[str, int, str]:
    """with_runfile_read's answer -> (the query's output, its exit, the runfile listing);
    CutAnswer naming the part that did not arrive whole."""
    (out, rc), (listing, _) = _parts(stdout, (PACKAGES, RUNFILE))
    return out, rc, listing


def _parts(answer: str, names: tuple[str, ...]) -> list[tuple[str, int]]:
    """Each part's (output, exit), in order, each checked against its trailer's count."""
    found, rest = [], answer
    for name in names:
        body, marked, tail = rest.partition(f"\n{_END} {name} ")
        trailer, _, rest = tail.partition("\n")
        if why := ended_short(name, len(body.encode()), trailer if marked else None):
            raise CutAnswer(why)
        found.append((body, parse_rc(trailer)))
    return found


def parse_runfile(listing: str) -> dict[str, Any] | None:
    """The script's lines -> {"files": unowned files, "driver": the installer's version or
    None}; None when nothing unowned was found."""
    files, driver = [], None
    for line in listing.splitlines()[:_RUNFILE_MAX_LINES]:
        kind, _, value = line.partition(" ")
        if kind == "unowned" and value.startswith("/"):
            files.append(value[:300])
        elif kind == "installer-version" and _VERSION.fullmatch(value.strip()):
            driver = value.strip()
    return {"files": files, "driver": driver} if files else None


def runfile_fix(inventory: str, hosts: list[str]) -> str:
    """NVIDIA's documented removal of a .run install, then gpuboot's install of the pins."""
    return (
        f"on {', '.join(hosts)}: `nvidia-installer --uninstall` (NVIDIA's removal of a .run "
        f"install), reboot, then `gpuboot install -i {inventory} --limit {','.join(hosts)}`"
    )


def split_stream_answer(stdout: str, rc: int) -> tuple[str, int, str | None, str]:
    """EL_STREAM_QUERY's answer -> (rpm's output, rpm's exit, the module listing or None,
    why it is None). An answer without the marker line is rpm's alone (exit 1)."""
    rpm, found, rest = stdout.rpartition(f"\n{_STREAMS_MARK}")
    if not found:
        return stdout, 1, None, "no module listing in the answer"
    status, _, listing = rest.partition("\n")
    rpm_rc = int(status) if status.strip().isdigit() else 1
    if rc != 0:
        return rpm, rpm_rc, None, last_line(listing) or f"dnf exit {rc}"
    return rpm, rpm_rc, listing, ""


def _driver_only_plan(hostvars: dict[str, Any], installed: dict[str, str]) -> list[dict]:
    """Hosts pinned by nvidia_driver_* alone: the driver role's packages (its vars/main.yml:
    four per branch on Debian, NVIDIA's eight RPM names on EL)."""
    branch, version = hostvars["nvidia_driver_branch"], hostvars["nvidia_driver_version"]
    suffix = "-open" if hostvars.get("nvidia_driver_flavor") == "open" else ""
    names = (
        f"nvidia-driver-{branch}{suffix}",
        f"nvidia-dkms-{branch}{suffix}",
        f"nvidia-utils-{branch}",
        f"nvidia-compute-utils-{branch}",
    )
    if hostvars.get("gpuboot_os_family", "debian") == "redhat":
        kmod = f"kmod-nvidia-{'open' if suffix else 'latest'}-dkms"
        names = (
            "nvidia-driver",
            "nvidia-driver-libs",
            "nvidia-driver-cuda",
            "nvidia-driver-cuda-libs",
            "nvidia-kmod-common",
            kmod,
            "nvidia-persistenced",
            "nvidia-modprobe",
        )
    items = []
    for pkg in names:
        current = installed.get(pkg)
        action = "install" if current is None else ("keep" if current == version else "change")
        items.append(
            {
                "package": pkg,
                "current": current,
                "desired": version,
                "action": action,
                "reboot": action != "keep" and "dkms" in pkg,
                "restarts": [],
            }
        )
    return items


def plan(inventory: str | Path | Inventory, *, limit: str | None = None) -> dict[str, Any]:
    """The plan of the hosts ``limit`` selects (Ansible's host pattern). ``inventory`` is
    a path, loaded and checked here, or an Inventory a caller already loaded."""
    inv = inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
    return plan_hosts(inv, select_hosts(inv, limit))


def plan_hosts(inv: Inventory, hosts: list[str]) -> dict[str, Any]:
    """The plan of ``hosts`` of the loaded inventory, each reached through certify's
    transport (gpuboot.transport), all in parallel."""
    nodes = [_plan_node(read, inv) for read in read_hosts(inv, hosts)]
    nodes.sort(key=lambda n: host_key(n["host"]))
    groups = group(nodes)
    for g in groups:
        if "blocked" in g:
            g["fix"] = runfile_fix(str(inv.path), g["hosts"])
    return {"inventory": str(inv.path), "nodes": nodes, "groups": groups}


def _unreachable(name: str, exc: BaseException, executor: str = CONTROLLER) -> dict[str, Any]:
    return {
        "host": name,
        "executor": executor,
        "unreachable": True,
        "error": f"unreachable: {failure_reason(exc)}",
    }


def read_hosts(inv: Inventory, hosts: list[str]) -> list[dict[str, Any]]:
    """Each host's installed packages, all in parallel, deadlines checked and executors
    asked their versions before any host: what plan compares, install's drain asks and
    `matrix import` turns into stacks. A host with a ``gpuboot_domain`` is read by its
    domain's executor (the same command, its answer checked end to end), others from the
    controller; a host whose executor was lost or never answered is not read, and marked
    ``unknown`` (never read from the controller across management networks)."""
    for name in hosts:  # a bad deadline is bad input: refused before any host
        check_deadlines(name, inv.views[name].vars, str(inv.path))
    direct, planned = plan_shards(inv, hosts)
    connect = transport.connector(inv)
    with tempfile.TemporaryDirectory(prefix="gpuboot-read-") as where:
        relayed = [
            in_background(partial(_read_shard, inv, name, shard, Path(where)))
            for name, shard in planned.items()
        ]
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(direct)))) as pool:
            found = {r["host"]: r for r in pool.map(lambda n: read_node(inv, n, connect), direct)}
        for result in relayed:
            found.update((r["host"], r) for r in result())
    return [found[name] for name in hosts]


def _query(inv: Inventory, name: str) -> tuple[str, bool]:
    """The host's read (one round trip) and whether it asks dnf's module streams too."""
    view = inv.views[name]
    el = view.vars.get("gpuboot_os_family", "debian") == "redhat"
    streams = (
        el and view.stack is not None and bool(view.stack.driver.pins_for("redhat").module_stream)
    )
    return with_runfile_read(
        EL_STREAM_QUERY if streams else (RPM_QUERY if el else DPKG_QUERY)
    ), streams


def _deadline(inv: Inventory, name: str) -> float:
    # the host's own collection deadline applies: a slow node an operator knows of
    return host_deadline(inv.views[name].vars, "gpuboot_collect_timeout", READ_TIMEOUT_S)


def read_node(inv: Inventory, name: str, connect: Callable[[str], Any]) -> dict[str, Any]:
    """One node's package database in one round trip from the controller: {"host",
    "executor", "family", "installed" (package -> version), "outside_packages" (a .run
    driver, or None)}, with "streams" (the EL8/EL9 module listing, None when dnf did not
    answer: "unread" says why) where the host's stack pins a stream; or {"host",
    "executor", "error"} (and "unreachable")."""
    try:
        host = connect(name)
    except Exception as exc:  # a transport that cannot be built: this node's error only
        return _unreachable(name, exc)
    query, _ = _query(inv, name)
    try:
        cmd = run_with_deadline(
            host, query, _deadline(inv, name), READING, max_bytes=MAX_FILE_BYTES
        )
    except (RemoteTimeout, AnswerTooLarge) as exc:
        return {"host": name, "executor": CONTROLLER, "error": exc.message}
    except Exception as exc:  # testinfra raises when ssh itself fails (exit 255)
        return _unreachable(name, exc)
    return read_answer(inv, name, cmd, CONTROLLER)


def _read_shard(inv: Inventory, executor: str, shard: Shard, where: Path) -> list[dict[str, Any]]:
    """The shard's hosts read through their executor (none answered the pre-flight: each
    host not read, unknown)."""
    if shard.executor is None:
        return [_lost(h, executor, shard.refused) for h in shard.hosts]
    commands = {
        name: Command(
            connection, _query(inv, name)[0], _deadline(inv, name), READING, MAX_FILE_BYTES
        )
        for name, (connection, _) in shard.hosts.items()
    }
    answers = run_on(shard.executor, commands, shards.shard_dir(where, executor))
    found = []
    for name, answer in answers.items():
        if isinstance(answer, Answer):
            found.append(read_answer(inv, name, answer, executor))
        elif isinstance(answer, ExecutorLost):
            found.append(_lost(name, executor, answer.message))
        elif isinstance(answer, HostUnreachable):
            found.append(_unreachable(name, answer, executor))
        elif isinstance(answer, AnswerCorrupted):
            error = f"cannot read installed packages: {answer.message}"
            found.append({"host": name, "executor": executor, "error": error})
        else:  # the deadline, the cap: said as a direct read says them
            found.append({"host": name, "executor": executor, "error": answer.message})
    return found


def _lost(name: str, executor: str, why: str) -> dict[str, Any]:
    """A host its executor did not read: its packages are unknown, not the node's fault."""
    return {"host": name, "executor": executor, "unknown": True, "error": f"not read: {why}"}


def read_answer(inv: Inventory, name: str, cmd: Any, executor: str) -> dict[str, Any]:
    """The host's read from its answer (``cmd``: rc, stdout, stderr), wherever it ran."""
    hostvars = inv.views[name].vars
    family = hostvars.get("gpuboot_os_family", "debian")
    el = family == "redhat"  # RHEL/Rocky/Alma: rpm's database, the same one round trip
    _, streams = _query(inv, name)
    who = {"host": name, "executor": executor}
    try:
        out, rc, runfile = split_runfile_answer(cmd.stdout)
    except CutAnswer as exc:
        # a shell that failed says why on stderr; one that ended well sent less than it wrote
        why = (last_line(cmd.stderr) or f"exit {cmd.rc}") if cmd.rc else str(exc)
        return {**who, "error": f"cannot read installed packages: {why}"}
    listing, unread = None, ""
    if streams:
        out, rc, listing, unread = split_stream_answer(out, rc)
    if rc != 0:
        why = last_line(cmd.stderr) or f"exit {rc}"
        return {**who, "error": f"cannot read installed packages: {why}"}
    try:
        installed = (installed_rpm_versions if el else installed_versions)(out)
    except ParseError as exc:
        return {**who, "error": f"cannot read installed packages: {exc}"}
    return {
        **who,
        "family": family,
        "installed": installed,
        **({"streams": listing, "unread": unread} if streams else {}),
        "outside_packages": parse_runfile(runfile),
    }


def _plan_node(read: dict[str, Any], inv: Inventory) -> dict[str, Any]:
    """One node's plan: what read_node found, against its stack (or its driver pins)."""
    from gpuboot.stacks import compare
    from gpuboot.stacks.plan import stream_item

    if "error" in read:
        return read
    name, family, installed = read["host"], read["family"], read["installed"]
    view = inv.views[name]
    hostvars, stack = view.vars, view.stack
    # EL8/EL9 stacks with a module stream: read_node asked dnf (None: it did not answer)
    streams, listing, unread = "streams" in read, read.get("streams"), read.get("unread", "")
    if stack is not None:
        # Where gpuboot does not manage the kernel (the lab's is the host's), its
        # packages are not part of the plan.
        skip = set()
        # EL8/EL9: the driver's module stream is part of the plan (Debian has none)
        stream = [stream_item(stack, listing, unread)] if streams else []
        if hostvars.get("gpuboot_baseline_manage_kernel") is False:
            skip = {p.name for p in stack.kernel_pins(family).packages}
        items = [
            {
                "package": i.package,
                "current": i.current,
                "desired": i.desired,
                "action": i.action,
                "reboot": i.reboot,
                "restarts": list(i.restarts),
                "replaces": i.replaces,
            }
            for i in [*compare(installed, stack, family), *stream]
            if i.package not in skip
        ]
    else:
        items = _driver_only_plan(hostvars, installed)
    changes = [i for i in items if i["action"] != "keep"]
    doc = {
        "host": name,
        "executor": read["executor"],
        "stack": hostvars.get("gpuboot_stack"),
        "items": items,
        "changes": len(changes),
        "reboot": any(i["reboot"] for i in changes),
        "restarts": sorted({s for i in changes for s in i["restarts"]}),
    }
    if read["outside_packages"]:
        doc["outside_packages"] = read["outside_packages"]
    return doc


_CHANGE_KEYS = ("package", "current", "desired", "action", "reboot", "restarts", "replaces")


def group(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes with the same change set (same stack, same packages from the same versions
    to the same versions), or the same error, as one group: at 300 nodes a plan is a few
    tables, not 300 identical ones. Failures first, then changes, then nodes up to date;
    within each, the larger group first."""
    found: dict[Any, dict[str, Any]] = {}
    for node in nodes:
        if "error" in node:
            key: Any = ("error", node["error"])
            doc = {"error": node["error"]}
        elif "outside_packages" in node:
            outside = node["outside_packages"]
            key = ("blocked", outside["driver"], tuple(sorted(outside["files"])))
            doc = {"blocked": outside}
        else:
            changed = [i for i in node["items"] if i["action"] != "keep"]
            key = (
                "plan",
                node["stack"],
                len(node["items"]),
                tuple(tuple(str(i.get(k)) for k in _CHANGE_KEYS) for i in changed),
            )
            doc = {
                "stack": node["stack"],
                "changes": node["changes"],
                "pinned": len(node["items"]),
                "reboot": node["reboot"],
                "restarts": node["restarts"],
                "items": changed,
            }
        found.setdefault(key, {"hosts": [], **doc})["hosts"].append(node["host"])
    groups = list(found.values())
    for g in groups:
        g["hosts"] = sorted(g["hosts"], key=host_key)
        g["label"] = host_ranges(g["hosts"])
    groups.sort(
        key=lambda g: (
            0 if "error" in g or "blocked" in g else (1 if g["changes"] else 2),
            -len(g["hosts"]),
            host_key(g["hosts"][0]),
        )
    )
    return groups


def render(doc: dict[str, Any]) -> str:
    """The plan for a terminal: one table per change set, naming its nodes compactly,
    and a last line saying what was counted."""
    from gpuboot.ui import table

    parts = []
    for g in doc["groups"]:
        n = len(g["hosts"])
        if "error" in g:
            parts.append(f"{g['label']}{f' ({n} nodes)' if n > 1 else ''}: ERROR {g['error']}")
            continue
        if "blocked" in g:
            driver = g["blocked"]["driver"]
            parts.append(
                f"{g['label']}{f' ({n} nodes)' if n > 1 else ''}: BLOCKED an NVIDIA driver"
                f"{f' {driver}' if driver else ''} installed outside packages "
                f"({', '.join(g['blocked']['files'])}); install refuses it. Way out: {g['fix']}"
            )
            continue
        count = f"{n} nodes, " if n > 1 else ""
        who = f"{g['label']} ({count}{g['stack'] or 'driver pin'})"
        if not g["changes"]:
            parts.append(f"{who}: up to date ({g['pinned']} pinned packages at their versions)")
            continue
        head = (
            f"{who}: {g['changes']} of {g['pinned']} pinned packages change"
            + (", reboot needed" if g["reboot"] else "")
            + (f", restarts {', '.join(g['restarts'])}" if g["restarts"] else "")
        )
        rows = [
            (
                i["package"],
                i["current"] or "-",
                i["desired"],
                i["action"],
                "yes" if i["reboot"] else "",
            )
            for i in g["items"]
        ]
        parts.append(
            head + "\n" + table(("package", "current", "desired", "action", "reboot"), rows)
        )
    nodes = doc["nodes"]
    failed = sum(1 for n in nodes if "error" in n)
    unknown = sum(1 for n in nodes if n.get("unknown"))
    blocked = sum(1 for n in nodes if "outside_packages" in n)
    changing = sum(1 for n in nodes if n.get("changes") and "outside_packages" not in n)
    sets = sum(1 for g in doc["groups"] if g.get("changes"))
    parts.append(
        f"{len(nodes)} node(s): {changing} with package changes ({sets} distinct change "
        f"set(s)), {len(nodes) - changing - failed - blocked} up to date, {failed} not read"
        + (f" ({unknown} of them: their executor was lost)" if unknown else "")
        + (f", {blocked} blocked by a driver installed outside packages" if blocked else "")
    )
    return "\n\n".join(parts)
