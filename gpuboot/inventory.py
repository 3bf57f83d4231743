"""Read and check an Ansible inventory before any host is touched."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuboot.errors import ConfigError

# Variables every gpuboot host must have, with the fix to suggest when missing.
REQUIRED_VARS = {
    "gpuboot_profile": "set a SKU profile from gpuboot/profiles/ (`gpuboot lab up` writes one)",
    "nvidia_driver_branch": 'set the driver branch the node must carry, e.g. "550"',
    "nvidia_driver_version": 'set the exact driver package version, e.g. "550.54.15-1"',
}


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: dict[str, dict[str, Any]]  # host -> merged variables (group + host)


def _check_yaml(path: Path, text: str) -> None:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"inventory is not valid YAML ({problem})",
            where=where,
            hint="fix the YAML; inventory/sample.yml shows the expected layout",
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            "inventory must be a mapping of groups (e.g. `all:` with `hosts:`)",
            where=str(path),
            hint="see inventory/sample.yml",
        )


def load_inventory(path: str | Path) -> Inventory:
    """Return the hosts and their variables, or raise ConfigError naming file, key and fix."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(
            "inventory file does not exist",
            where=str(path),
            hint="pass -i with an existing inventory (`gpuboot lab up` prints one)",
        )
    if path.is_file():
        text = path.read_text(errors="replace")
        if not text.strip():
            raise ConfigError(
                "inventory file is empty",
                where=str(path),
                hint="list hosts under `all: hosts:`; see inventory/sample.yml",
            )
        if path.suffix in (".yml", ".yaml"):
            _check_yaml(path, text)
    hosts = _ansible_hosts(path)
    if not hosts:
        raise ConfigError(
            "inventory defines no hosts",
            where=str(path),
            hint="list hosts under `all: hosts:` or a group's `hosts:`",
        )
    for host, hostvars in hosts.items():
        for var, fix in REQUIRED_VARS.items():
            if var not in hostvars:
                raise ConfigError(
                    f"host {host} has no {var}", where=f"{path}: {host}.{var}", hint=fix
                )
    return Inventory(path=path, hosts=hosts)


def _ansible_hosts(path: Path) -> dict[str, dict[str, Any]]:
    """Ansible's own inventory parser, so group_vars, INI and plugins behave as in a play."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.utils.display import Display
    from ansible.vars.manager import VariableManager

    Display().verbosity = -1  # keep Ansible's parser warnings off our stdout
    loader = DataLoader()
    try:
        manager = InventoryManager(loader=loader, sources=[str(path)])
    except AnsibleError as exc:
        raise ConfigError(
            f"Ansible cannot read the inventory: {exc.message}",
            where=str(path),
            hint="fix the inventory; see inventory/sample.yml",
        ) from exc
    variables = VariableManager(loader=loader, inventory=manager)
    hosts = {}
    for host in manager.get_hosts():
        hv = variables.get_vars(host=host, include_hostvars=False)
        hosts[host.name] = {
            k: v
            for k, v in hv.items()
            if not k.startswith(("ansible_play", "groups", "omit", "playbook_dir"))
        }
    return hosts
