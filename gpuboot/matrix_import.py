"""`gpuboot matrix import`: what a running fleet carries, as site stacks gpuboot can pin.

Each node's packages are read as `gpuboot plan` reads them (gpuboot.plan.read_hosts: one
round trip, nothing changed; a hall's nodes by their domain's executor). A node whose
executor was lost is not read and marked unknown. Each component is recognised by the
package names some shipped stack pins for it on the node's OS family, all of them
installed, and takes the versions the node has. Nodes carrying the same combination share
one stack, named after the inventory group they make up exactly when there is one. A node
whose software no stack can pin is refused, naming the component and why: a driver
installed outside packages, a component installed in part, one package of a component at
another version than the rest, a required component missing, a managed kernel that was not
found. Each stack written passes `gpuboot matrix check` (else it is not written: the
violations are reported), so pinning a group to it changes nothing on its nodes.
"""

from __future__ import annotations

import copy
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from gpuboot.errors import BadInput
from gpuboot.inventory import Inventory, load_inventory, select_hosts
from gpuboot.report._util import host_key
from gpuboot.ui import host_ranges


class Refused(Exception):
    """A node's software that no stack can pin: ``component`` and why."""

    def __init__(self, component: str, why: str):
        super().__init__(f"{component}: {why}")
        self.component, self.why = component, why


def check_out_dir(out: str | Path) -> Path:
    """--out: a new or empty directory (never a stack overwritten), checked before any host."""
    path = Path(out).expanduser()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BadInput(
            f"--out {path} is {'not a directory' if not path.is_dir() else 'not empty'}",
            where="gpuboot matrix import --out",
            hint="name a new or empty directory, e.g. --out stacks/site",
        )
    return path


@cache
def _shipped() -> tuple[tuple[str, dict[str, Any]], ...]:
    """(name, raw YAML) of every shipped stack: the package names they pin are the ones
    a component is recognised by, and their layout is the one a site stack takes."""
    from gpuboot.stacks import STACK_DIR, list_stacks

    return tuple(
        (name, yaml.safe_load((STACK_DIR / f"{name}.yaml").read_text())) for name in list_stacks()
    )


def _names(pins: dict[str, Any]) -> list[str]:
    """The package and its depends, as names (a depend may carry its own ``=version``)."""
    return [str(pins["package"])] + [str(d).partition("=")[0] for d in pins.get("depends", ())]


def _component(name: str, family: str, installed: dict[str, Any]) -> dict[str, Any] | None:
    """The component's section with the node's versions, from the shipped stack whose
    packages for it are all installed: one at exactly the node's versions first (its other
    OS family's pins then belong to the same release), else the one with the most packages;
    None when none is installed."""
    best, rank, partial = None, (False, 0), None
    for _stack, raw in _shipped():
        section = raw.get(name)
        if not isinstance(section, dict) or family not in section:
            continue
        names = _names(section[family])
        have = [n for n in names if n in installed]
        if len(have) == len(names):
            exact = installed[section[family]["package"]] == section[family]["version"]
            if best is None or (exact, len(names)) > rank:
                best, rank = section, (exact, len(names))
        elif have and partial is None:
            partial = (names, have)
    if best is None:
        if partial:
            names, have = partial
            missing = [n for n in names if n not in have]
            raise Refused(
                name,
                f"installed in part: {', '.join(have)} without {', '.join(missing)} "
                "(a stack pins all of a component's packages)",
            )
        return None
    return _with_versions(name, copy.deepcopy(best), family, installed)


def _with_versions(
    name: str, section: dict[str, Any], family: str, installed: dict[str, Any]
) -> dict[str, Any]:
    from gpuboot.stacks.versions import upstream_of

    pins = section[family]
    main = installed[pins["package"]]
    if not isinstance(main, str):
        raise Refused(name, f"{pins['package']} is installed in several versions: {main}")
    depends, mixed = [], []
    for dep in pins.get("depends", ()):
        dep_name, explicit, _ = str(dep).partition("=")
        version = installed[dep_name]
        if explicit:  # a package of its own version (another product's, e.g. GDS's)
            depends.append(f"{dep_name}={version}")
            continue
        if version != main:
            mixed.append(f"{dep_name} {version}")
        depends.append(dep_name)
    if mixed:
        raise Refused(
            name,
            f"mixed versions within the node: {pins['package']} {main}, {', '.join(mixed)} "
            "(a stack pins one version for them)",
        )
    pins["version"] = main
    if pins.get("depends") is not None:
        pins["depends"] = depends
    if "version" in section:
        section["version"] = upstream_of(main)
    if "enabled" in section:
        section["enabled"] = True
    return section


def _kernel(family: str, installed: dict[str, Any], manage: bool) -> dict[str, Any] | None:
    """The kernel's section where gpuboot manages the kernel: a shipped stack's kernel
    whose packages are all installed. None where it does not (its section is then the
    template's, pinning nothing on these nodes)."""
    if not manage:
        return None
    found = _component("kernel", family, installed)
    if found is None:
        raise Refused(
            "kernel",
            "no shipped stack's kernel packages are installed, and the package list does not "
            "say which kernel runs: pin it by hand in the written stack, or set "
            "gpuboot_baseline_manage_kernel: false for these hosts",
        )
    return found


def combination(read: dict[str, Any], hostvars: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The node's components as stack sections (kernel included where managed); Refused
    for what no stack can pin."""
    from gpuboot.stacks.model import COMPONENTS, OPTIONAL_COMPONENTS

    if read.get("outside_packages"):
        out = read["outside_packages"]
        raise Refused(
            "driver",
            f"installed outside packages ({', '.join(out['files'])}"
            f"{', installer ' + out['driver'] if out['driver'] else ''}): remove it with "
            "`nvidia-installer --uninstall` first",
        )
    family, installed = read["family"], read["installed"]
    manage = hostvars.get("gpuboot_baseline_manage_kernel") is not False
    found: dict[str, dict[str, Any]] = {}
    for name in COMPONENTS:
        if name == "kernel":
            section = _kernel(family, installed, manage)
        else:
            section = _component(name, family, installed)
        if section is None and name != "kernel":
            if name not in OPTIONAL_COMPONENTS:
                raise Refused(name, "not installed (every stack pins it)")
            continue
        if section is not None:
            found[name] = section
    return found


def _template(combo: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The shipped stack sharing the most sections with the combination: the layout, and
    the parts the nodes did not say (the other OS family's pins, an unmanaged kernel)."""

    def shared(raw: dict[str, Any]) -> int:
        return sum(1 for name, section in combo.items() if raw.get(name) == section)

    return max(_shipped(), key=lambda item: shared(item[1]))


def _stack_doc(
    name: str, combo: dict[str, dict[str, Any]], hosts: list[str], profiles: list[str], family: str
) -> dict[str, Any]:
    from gpuboot.stacks.model import COMPONENTS, OPTIONAL_COMPONENTS

    template_name, template = _template(combo)
    doc = copy.deepcopy(template)
    others = [f for f in ("debian", "redhat") if f != family]
    doc["name"] = name
    doc["description"] = (
        f"imported by gpuboot matrix import from {host_ranges(hosts)} ({family}); "
        f"{'/'.join(others)} pins are those of the shipped stack each component matched, "
        f"parts not read {template_name}'s"
    )
    doc["profiles"] = profiles
    for comp in COMPONENTS:
        if comp in combo:
            doc[comp] = combo[comp]  # with the other family's pins of the stack it came from
        elif comp in OPTIONAL_COMPONENTS and isinstance(doc.get(comp), dict):
            doc[comp]["enabled"] = False
    return doc


def _stack_name(hosts: list[str], inv: Inventory, index: int) -> str:
    """site-<group> for an inventory group whose hosts are exactly these (every one read
    and alike: a group only partly read is not known to be uniform); else site-<index>."""
    import re

    chosen = set(hosts)
    groups: dict[str, set[str]] = {}
    for host in inv.views:
        for g in inv.views[host].vars.get("group_names") or ():
            groups.setdefault(str(g), set()).add(host)
    exact = sorted(g for g, members in groups.items() if members == chosen)
    for g in exact:
        name = "site-" + re.sub(r"[^a-z0-9.-]+", "-", g.lower()).strip("-")
        if re.fullmatch(r"site-[a-z0-9][a-z0-9.-]*", name):
            return name
    return f"site-{index}"


def import_stacks(
    inventory: str | Path | Inventory, out: str | Path, *, limit: str | None = None
) -> dict[str, Any]:
    """Read the hosts ``limit`` selects, write one stack per distinct combination into
    ``out``; what was written, what was refused and why."""
    from gpuboot import matrix
    from gpuboot.plan import read_hosts

    out_dir = check_out_dir(out)
    inv = inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
    hosts = select_hosts(inv, limit)
    reads = read_hosts(inv, hosts)
    refused, unread = [], []
    combos: dict[str, dict[str, Any]] = {}
    for read in sorted(reads, key=lambda r: host_key(r["host"])):
        host = read["host"]
        if "error" in read:
            unread.append(
                {k: read[k] for k in ("host", "executor", "error", "unknown") if k in read}
            )
            continue
        hostvars = inv.views[host].vars
        try:
            combo = combination(read, hostvars)
        except Refused as exc:
            refused.append({"host": host, "component": exc.component, "why": exc.why})
            continue
        profile = str(hostvars.get("gpuboot_profile"))
        key = json.dumps([read["family"], combo], sort_keys=True)
        entry = combos.setdefault(
            key, {"family": read["family"], "combo": combo, "hosts": [], "profiles": set()}
        )
        entry["hosts"].append(host)
        entry["profiles"].add(profile)
    stacks, failing = [], []
    staging = out_dir.parent / f".{out_dir.name}.importing-{os.getpid()}"
    for index, entry in enumerate(combos.values(), start=1):
        name = _stack_name(entry["hosts"], inv, index)
        doc = _stack_doc(
            name, entry["combo"], entry["hosts"], sorted(entry["profiles"]), entry["family"]
        )
        staging.mkdir(parents=True, exist_ok=True)
        trial = staging / f"{name}.yaml"
        trial.write_text(_render(doc))
        checked = matrix.check(str(trial))
        row = {"stack": name, "hosts": entry["hosts"], "label": host_ranges(entry["hosts"])}
        if checked["violations"]:
            trial.unlink()
            failing.append({**row, "violations": checked["violations"]})
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        trial.replace(out_dir / trial.name)
        stacks.append({**row, "file": str(out_dir / trial.name)})
    if staging.exists():
        staging.rmdir()
    return {
        "inventory": str(inv.path),
        "out": str(out_dir),
        "stacks": stacks,
        "refused": refused,
        "not_checked": failing,
        "unread": unread,
    }


def _render(doc: dict[str, Any]) -> str:
    head = (
        "# Written by `gpuboot matrix import`: the versions these nodes run, pinned.\n"
        "# Check it (`gpuboot matrix check FILE`), then point the group's gpuboot_stack at it.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


def render(doc: dict[str, Any]) -> str:
    """The import for a terminal: each stack written with its nodes, each refusal."""
    lines = [f"wrote {s['file']}: {s['label']}" for s in doc["stacks"]]
    lines += [f"{r['host']}: REFUSED {r['component']}: {r['why']}" for r in doc["refused"]]
    for f in doc["not_checked"]:
        first = f["violations"][0]
        lines.append(
            f"{f['label']}: NOT WRITTEN {f['stack']} fails matrix check "
            f"({len(f['violations'])} violation(s); first: {first['rule']} {first['message']})"
        )
    lines += [f"{u['host']}: ERROR {u['error']}" for u in doc["unread"]]
    lines.append(
        f"{len(doc['stacks'])} stack(s) written to {doc['out']}; {len(doc['refused'])} node(s) "
        f"refused, {len(doc['unread'])} not read"
    )
    return "\n".join(lines)
