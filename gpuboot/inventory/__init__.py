"""Read and check an Ansible inventory before any host is touched, once per run: the
loaded Inventory (each host's view, gpuboot.inventory.hosts) is handed down to every verb.

The inventory is the operator's, but its values become paths, --limit patterns, ssh's
argument vector and package pins: each is checked against the
form it must have before anything uses it (connection.py, hosts.py), and every file
Ansible would read is checked first for what would crash or exhaust Ansible (files.py).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from gpuboot.errors import BadInput, ConfigError
from gpuboot.inventory.connection import check_connection, check_host_names
from gpuboot.inventory.executors import ExecutorEntry, check_served, split_executors
from gpuboot.inventory.files import check_files
from gpuboot.inventory.hosts import HostView, check_hosts

__all__ = [
    "HostView",
    "Inventory",
    "inventory_path",
    "load_inventory",
    "select_hosts",
]


class _HostPatterns:
    """Ansible's parsed inventory, kept from the load: a ``--limit`` pattern is read by
    Ansible's own rules without parsing the inventory (or running its scripts) again."""

    def __init__(self, manager: Any):
        self._manager = manager
        self._lock = threading.Lock()  # subset() is state on the manager

    def match(self, pattern: str) -> list[str]:
        from ansible.errors import AnsibleError

        with self._lock:
            try:
                self._manager.subset(pattern)
                return [str(h.name) for h in self._manager.get_hosts()]
            except AnsibleError as exc:
                raise BadInput(
                    f"--limit {pattern!r} is not a host pattern Ansible can read: {exc.message}",
                    where="--limit",
                    hint="e.g. --limit node1,node3 or --limit 'gpu:!node2'",
                ) from exc
            finally:
                self._manager.subset(None)


@dataclass(frozen=True)
class Inventory:
    """The loaded, checked inventory: read once, then handed down to every verb."""

    path: Path  # absolute: ansible-runner and testinfra read it from other directories
    views: dict[str, HostView]  # host -> its view, in inventory order
    patterns: _HostPatterns = field(compare=False, repr=False)
    # execution nodes (group gpuboot_executors): never targets, never in ``views``
    executors: dict[str, ExecutorEntry] = field(default_factory=dict)

    @cached_property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """Host -> its inventory variables (group + host), without derived ones."""
        return {name: view.inventory_vars for name, view in self.views.items()}

    def resolved(self, host: str) -> dict[str, Any]:
        """The host's variables with the derived role variables applied."""
        return self.views[host].vars

    def k8s_node_names(self) -> dict[str, str]:
        """Inventory host -> Kubernetes node name, where ``gpuboot_k8s_node_name`` says so."""
        return {
            h: str(v["gpuboot_k8s_node_name"])
            for h, v in self.hosts.items()
            if "gpuboot_k8s_node_name" in v
        }


def inventory_path(path: str | Path) -> Path:
    """``-i`` made absolute once, as Ansible reads it (``~`` expanded, no link followed:
    group_vars/ beside a linked file are the ones beside the link). ansible-runner runs
    in its private data dir and testinfra in its own: a relative path loads nothing."""
    text = str(path)
    if not text.strip():
        raise ConfigError(
            "no inventory given (-i is empty)",
            where="-i",
            hint="pass -i with an inventory file or directory",
        )
    return Path(os.path.abspath(os.path.expanduser(text)))


def load_inventory(path: str | Path) -> Inventory:
    """Return the hosts and their variables, or raise ConfigError naming file, key and fix."""
    path = inventory_path(path)
    if not path.exists():
        raise ConfigError(
            "inventory file does not exist",
            where=str(path),
            hint="pass -i with an existing inventory (`gpuboot lab up` prints one)",
        )
    check_files(path)  # before Ansible reads any of them
    hosts, groups, manager = _ansible_hosts(path)
    if not hosts:
        raise ConfigError(
            "inventory defines no hosts",
            where=str(path),
            hint="list hosts under `all: hosts:` or a group's `hosts:`",
        )
    check_host_names(path, hosts, groups)
    for host, hostvars in hosts.items():
        check_connection(path, host, hostvars)
    hosts, executors = split_executors(path, hosts)
    if not hosts:
        raise ConfigError(
            "inventory defines no hosts besides its executors",
            where=str(path),
            hint="list the GPU hosts under `all: hosts:` or a group other than gpuboot_executors",
        )
    return Inventory(
        path=path,
        views=check_hosts(path, hosts),
        patterns=_HostPatterns(manager),
        executors=executors,
    )


def _ansible_hosts(path: Path) -> tuple[dict[str, dict[str, Any]], set[str], Any]:
    """Ansible's own inventory parser, so group_vars, INI and plugins behave as in a
    play: the hosts with their variables, the group names and the parsed inventory."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.utils.display import Display
    from ansible.vars.manager import VariableManager

    class FreshLoader(DataLoader):
        """Ansible's loader, without the deep copy of a file it has just parsed for a
        caller that keeps it nowhere else (the inventory plugins' ``cache='none'``):
        the copy guards a cache there is none of, and costs ~0.4 ms per host (the
        auto and yaml plugins each read the file)."""

        def load_from_file(
            self, file_name: str, cache: Any = "all", unsafe: bool = False, **kw: Any
        ) -> Any:
            fresh = cache in ("none", False)
            return super().load_from_file(file_name, cache=cache, unsafe=unsafe or fresh, **kw)

    Display().verbosity = -1  # keep Ansible's parser warnings off our stdout
    loader = FreshLoader()
    try:
        manager = InventoryManager(loader=loader, sources=[str(path)])
        variables = VariableManager(loader=loader, inventory=manager)
        hosts = {}
        for host in manager.get_hosts():
            hv = variables.get_vars(host=host, include_hostvars=False)
            hosts[str(host.name)] = _variables(path, str(host.name), hv)
    except AnsibleError as exc:  # what the checks above cannot foresee
        raise ConfigError(
            f"Ansible cannot read the inventory: {exc.message}",
            where=str(path),
            hint="fix the inventory; see inventory/sample.yml",
        ) from exc
    return hosts, {str(g) for g in manager.groups}, manager


def _variables(path: Path, host: str, hv: dict[Any, Any]) -> dict[str, Any]:
    """A host's variables without Ansible's play-time ones; a name that is not a string
    (``1: x``) is refused: Ansible only warns, and nothing can refer to it."""
    for k in hv:
        if not isinstance(k, str):
            raise ConfigError(
                f"variable name {k!r} is not a string",
                where=f"{path}: {host}.{k!r}",
                hint="name variables with letters, digits and '_', starting with a letter",
            )
    return {
        k: v
        for k, v in hv.items()
        if not k.startswith(("ansible_play", "groups", "omit", "playbook_dir"))
    }


def select_hosts(inv: Inventory, limit: str | None) -> list[str]:
    """The exact hosts a verb works on: ``--limit`` read once, by Ansible's own rules
    (groups, wildcards, ``a:b``/``a,b`` lists, ``!`` and ``&``). Every verb hands these
    names on as they are, so testinfra never re-reads the pattern its own way. Executors
    are never selected, and every domain of a selected host must have one."""
    if not limit:
        hosts = list(inv.hosts)
    else:
        hosts = [h for h in inv.patterns.match(limit) if h in inv.views]
    if not hosts:
        raise BadInput(
            f"--limit {limit!r} matches no host of the inventory",
            where=str(inv.path),
            hint="use a host or group name the inventory defines",
        )
    check_served(inv.path, inv.hosts, inv.executors, hosts)
    return hosts
