"""One id space: the tasks of the shipped roles and playbooks, their tags, and the tasks that
make each certify rule true.

A task is named ``"<ID> | AUDIT | text"`` (reads, changes nothing) or ``"<ID> | PATCH | text"``
(changes the node); ID is the role's prefix and three digits, unique across every role and
playbook, and never a certify rule's id. A PATCH task is tagged with its own id and with the
certify rule ids it makes true, so ``gpuboot install --tags STK-002`` runs that remediation;
the AUDIT tasks it reads, and dynamic include wrappers (whose tags reach the include only),
are tagged ``always``. Handlers carry an id too but ignore tags (Ansible runs a notified
handler whatever --tags says). Blocks are containers: their tasks carry the ids. An import
passes its tags to every task it imports, so it never carries ``always``.

The rule's tag is the remediation contract: a task that reads another task's result runs
with it under every rule it is tagged with (test_ids checks it), not under the other task's
own id, so ``--tags <TASK-ID>`` is for one task that reads only AUDIT results. Under --tags
the install play's converged check and record (tag ``converged``) do not run: a remediation
runs even on a node that matches its last record, and never vouches for the whole state.

Read from the package's own YAML with ``yaml.compose`` (Ansible's ``!unsafe``/``!vault`` need
no constructor); cached: the files ship with the package and do not change under a run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from gpuboot import paths
from gpuboot.verdict import Status

if TYPE_CHECKING:  # the results module is imported where a report is linked, not by install
    from gpuboot.results import BundleReport, RunReport

ID = r"[A-Z][A-Z0-9]{1,5}-\d{3}"  # K8S-001 and REBOOT-010 are ids too
ID_RE = re.compile(rf"\b{ID}\b")
NAME_RE = re.compile(rf"^(?P<id>{ID}) \| (?P<kind>AUDIT|PATCH) \| \S")
WRAPPERS = ("include_tasks", "import_tasks", "include_role", "import_role")
AUDIT, PATCH = "AUDIT", "PATCH"

# Certify rules no role can make true: the hardware, the fabric or a measurement judges them.
# A failed one is fixed by hands (reseat, RMA, reset), not by `gpuboot install`.
JUDGED_ONLY: dict[str, str] = {
    "GPU-001": "GPUs present and of the profile's model: hardware",
    "GPU-003": "GPU PCI device ids: hardware",
    "XID-001": "Xids in the kernel log: the GPU's own faults",
    "XID-002": "NVSwitch SXids: the fabric's own faults",
    "PCI-001": "PCIe link generation and width: slot, riser, BIOS",
    "PCI-002": "parts on the PCI bus and seen by their driver: hardware",
    "ECC-001": "ECC mode and uncorrectable errors: no role switches ECC (needs a GPU reset)",
    "ECC-002": "row remap or page retirement pending: a GPU reset",
    "ECC-003": "row remapping failure: RMA",
    "THR-001": "thermal slowdown: cooling",
    "NVL-001": "NVLinks up: the fabric",
    "NVL-002": "NVLink error counters: the fabric",
    "TOP-001": "GPU/NIC topology and NUMA affinity: slots, risers, BIOS",
    "NIC-001": "RDMA ports active at rate: cables, transceivers, switch",
    "NIC-004": "a RoCE v2 GID on each rail: the netdev's address (the network's, not a role's)",
    "NIC-005": "RoCE counters recorded for the scan history: nothing to make true",
    "DCG-001": "DCGM diagnostics: the GPU under test",
    "BW-001": "host-to-device bandwidth: measured",
    "BW-002": "device-to-host bandwidth: measured",
    "BW-003": "device-to-device bandwidth: measured",
    "BW-004": "NCCL all_reduce bandwidth: measured",
    "BW-005": "ib_write_bw to a partner: measured",
    "BW-006": "TCP throughput to a partner: measured",
    # scan's trend rules (gpuboot.trends): the node's own counters over its scan history
    "TRD-001": "NVLink error counters growing: the fabric",
    "TRD-002": "corrected ECC errors growing: the GPU's memory",
    "TRD-003": "PCIe replays growing: slot, riser, link",
    "TRD-004": "RoCE pause / out-of-buffer counters growing: the fabric or the host",
    "TRD-005": "bandwidth drifting down: measured",
}

# PATCH tasks no certify rule judges (so no rule id to tag them with): they carry their own id
# and their role's tag.
OUTSIDE_CERTIFY: dict[str, str] = {
    "PRB-010": "probe tools: they make the bandwidth rules measurable (missing is ERROR), "
    "never a bandwidth within band",
    "K8S-003": "the kubelet's registration taint: the Kubernetes join gate lifts it, no rule",
    "DCGM-020": "the DCGM host engine (restarted after an NSCQ change): it makes DCG-001 "
    "(judged only) runnable (down is ERROR)",
    "EXE-001": "an execution node's venv directory (executor setup; executors are not certified)",
    "EXE-002": "the controller's wheelhouse on an execution node (executor setup)",
    "EXE-003": "an execution node's venv made from that wheelhouse (executor setup)",
    "EXE-004": "an execution node's unit that removes dead jobs (executor setup)",
    "EXE-005": "an execution node's hourly timer for it (executor setup)",
    "EXE-006": "that timer started (executor setup)",
    "REM-002": "remediation's GPU reset: the GPUs' compute processes stopped (the ladder's step)",
    "REM-004": "remediation's GPU reset: the daemons holding the GPUs stopped for it",
    "REM-005": "remediation's GPU reset itself (nvidia-smi -r); a fresh certify judges after it",
    "REM-006": "remediation's GPU reset: the daemons it stopped started again",
    "REM-011": "remediation's reboot request (the reboot role acts on it; certify judges after)",
}


@dataclass(frozen=True)
class Task:
    """One task, handler or wrapper as written (tags its own plus those of enclosing blocks)."""

    name: str
    id: str | None  # None: the name does not follow the convention
    kind: str | None  # AUDIT or PATCH
    tags: tuple[str, ...]
    where: str  # file (relative to the package's ansible/) and line
    role: str | None  # None: a playbook's task
    handler: bool = False
    wrapper: str | None = None  # include_tasks/import_role...: the task only brings in others
    registers: tuple[str, ...] = ()  # `register` and set_fact names: what later tasks read
    text: str = ""  # every value of the task but its name: what it reads

    @property
    def always(self) -> bool:
        return "always" in self.tags

    @property
    def rules(self) -> tuple[str, ...]:
        """The ids among its tags that are not its own: the rules it makes true."""
        return tuple(t for t in self.tags if ID_RE.fullmatch(t) and t != self.id)


# ---------------------------------------------------------------- the one walker
def yaml_files() -> list[Path]:
    """Every YAML file of the shipped playbooks and roles."""
    return [
        p
        for base in (paths.PLAYBOOKS_DIR, paths.ROLES_DIR)
        for p in sorted(base.rglob("*.y*ml"))
        if p.is_file()
    ]


@cache
def documents() -> tuple[tuple[Path, Any], ...]:
    """(file, its YAML as plain values: every scalar a string) for every shipped YAML file."""
    return tuple(
        (p, _plain(yaml.compose(p.read_text(), Loader=yaml.CSafeLoader))) for p in yaml_files()
    )


def _plain(node: yaml.Node | None) -> Any:
    if isinstance(node, yaml.MappingNode):
        out = {str(_plain(k)): _plain(v) for k, v in node.value}
        out["__line__"] = node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(v) for v in node.value]
    return None if node is None else str(node.value)


def tag_names(value: Any) -> list[str]:
    """A ``tags`` value (list, or comma-separated string) as names."""
    items = value if isinstance(value, list) else [value]
    return [t.strip() for i in items if isinstance(i, str) for t in i.split(",") if t.strip()]


@cache
def all_tags() -> frozenset[str]:
    """Every tag written anywhere in the shipped playbooks and roles (plays, roles, tasks)."""
    found: set[str] = set()
    stack = [doc for _p, doc in documents()]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.update(tag_names(node.get("tags")))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(found)


@cache
def tasks() -> tuple[Task, ...]:
    """Every task, handler and wrapper of the shipped roles and playbooks, in file order."""
    out: list[Task] = []
    for path, doc in documents():
        rel = path.relative_to(paths.ANSIBLE_DIR)
        if rel.parts[0] == "playbooks":
            for play in doc if isinstance(doc, list) else []:
                if not isinstance(play, dict):
                    continue
                for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                    out += _tasks(play.get(section), rel, None, section == "handlers", ())
        elif len(rel.parts) > 3 and rel.parts[2] in ("tasks", "handlers"):
            out += _tasks(doc, rel, rel.parts[1], rel.parts[2] == "handlers", ())
    return tuple(out)


def _tasks(
    items: Any, rel: Path, role: str | None, handler: bool, inherited: tuple[str, ...]
) -> Iterator[Task]:
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        tags = inherited + tuple(tag_names(item.get("tags")))
        if "block" in item:
            for part in ("block", "rescue", "always"):
                yield from _tasks(item.get(part), rel, role, handler, tags)
            continue
        name = str(item.get("name", ""))
        m = NAME_RE.match(name)
        wrapper = next((w for w in WRAPPERS if w in item or f"ansible.builtin.{w}" in item), None)
        body = {k: v for k, v in item.items() if k not in ("name", "__line__")}
        registers = [str(item["register"])] if "register" in item else []
        facts = item.get("ansible.builtin.set_fact", item.get("set_fact"))
        if isinstance(facts, dict):
            registers += [k for k in facts if k not in ("cacheable", "__line__")]
        yield Task(
            name=name,
            id=m["id"] if m else None,
            kind=m["kind"] if m else None,
            tags=tags,
            where=f"{rel}:{item['__line__']}",
            role=role,
            handler=handler,
            wrapper=wrapper,
            registers=tuple(registers),
            text=" ".join(_scalars(body)),
        )


def _scalars(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key != "__line__":
                yield key
                yield from _scalars(value)
    elif isinstance(node, list):
        for value in node:
            yield from _scalars(value)
    elif node is not None:
        yield node


# ---------------------------------------------------------------- ids and rules
def rule_ids() -> frozenset[str]:
    """The certify rules' ids, and scan's trend rules'."""
    from gpuboot.checks.rules import RULES
    from gpuboot.trends import TITLES  # scan's trend rules judge the history, not a bundle

    return frozenset(r.id for r in RULES) | frozenset(TITLES)


def compat_rule_ids() -> frozenset[str]:
    """The stack compatibility rules' ids (`gpuboot matrix check`)."""
    from gpuboot.stacks.rules import RULES

    return frozenset(r.id for r in RULES)


def task_ids() -> frozenset[str]:
    return frozenset(t.id for t in tasks() if t.id)


@cache
def fixes() -> dict[str, tuple[str, ...]]:
    """Certify rule id -> the PATCH tasks tagged with it (the ones `--tags <rule>` runs)."""
    out: dict[str, list[str]] = {}
    for t in tasks():
        if t.kind == PATCH and t.id and not t.handler and not t.wrapper:
            for rule in t.rules:
                if t.id not in out.setdefault(rule, []):
                    out[rule].append(t.id)
    return {rule: tuple(ids) for rule, ids in out.items()}


def remediation(rule: str, host: str | None = None, inventory: str | None = None) -> dict[str, Any]:
    """What fixes a rule's finding: ``fix_tasks`` (task ids, empty for a rule no role makes
    true) and, when there are some, the ``remediate`` command that runs them alone: complete,
    with ``-i`` (INVENTORY where the run knew none: evaluate) and ``--limit`` the node."""
    import shlex

    ids = list(fixes().get(rule, ()))
    if not ids:
        return {"fix_tasks": []}
    inv = shlex.quote(str(inventory)) if inventory else "INVENTORY"
    limit = f" --limit {shlex.quote(host)}" if host else ""
    return {"fix_tasks": ids, "remediate": f"gpuboot install -i {inv}{limit} --tags {rule}"}


R = TypeVar("R", "RunReport", "BundleReport")


def link_report(report: R, inventory: str | Path | None = None) -> R:
    """``report`` (a certify or evaluate report, or a scan's) with ``fix_tasks`` (and
    ``remediate``, run on ``inventory``) for every FAIL or WARN finding of its nodes. ERROR
    and SKIPPED findings get none: the harness, not the node's configuration, is what needs
    fixing there."""
    from gpuboot.results import NodeReport

    def linked(node: NodeReport) -> NodeReport:
        fixes = {
            f.rule: remediation(f.rule, node.host, None if inventory is None else str(inventory))
            for f in node.findings
            if f.status in (Status.FAIL, Status.WARN)
        }
        return replace(node, remedies=fixes)

    return replace(report, nodes=tuple(linked(n) for n in report.nodes))
