"""A node's transport: a testinfra host built from the inventory gpuboot already loaded
and checked (gpuboot.inventory), so nothing re-reads the inventory its own way.

ssh (and Ansible's `smart`): testinfra's ssh backend, with the host, user, port, key and
ssh arguments mapped as testinfra maps an Ansible host (its get_ansible_host, fed our
validated variables instead of a second `ansible-inventory --list`). The ssh arguments
reach ssh through testinfra's shell line; the inventory check refused any that a shell
would do more with than split into words. Host keys are checked as the operator's ssh
options and ssh config say (the lab: its known_hosts, StrictHostKeyChecking=yes).

paramiko: Ansible's own paramiko connection (testinfra's ansible backend, one `ansible -m
shell` per command), which checks host keys as Ansible does; testinfra's paramiko backend
would accept any unknown host key.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot import paths

if TYPE_CHECKING:
    from gpuboot.inventory import Inventory

SSH = ("ssh", "smart")


def connector(inv: Inventory) -> Callable[[str], Any]:
    """connect() for the hosts of an inventory already loaded: each with its checked
    variables, nothing read again. The paramiko path runs `ansible` by name: the venv's
    bin goes on PATH first, once, before any thread connects."""
    paths.put_venv_on_path()
    return lambda name: connect(name, inv.hosts[name], inv.path)


def connect(name: str, hostvars: dict[str, Any], inventory_path: Path) -> Any:
    """A testinfra Host for inventory host ``name`` (``hostvars``: its checked variables)."""
    import testinfra
    from testinfra.utils.ansible_runner import get_ansible_config, get_ansible_host

    connection = str(hostvars.get("ansible_connection", "ssh")).removeprefix("ansible.builtin.")
    if connection in SSH:
        one = {k: v for k, v in hostvars.items() if k.startswith("ansible_")}
        one["ansible_connection"] = "ssh"
        inventory = {"_meta": {"hostvars": {name: one}}, "all": {"hosts": [name]}}
        # ansible.cfg read as testinfra reads it: its ssh_args and control_path apply
        host = get_ansible_host(get_ansible_config(), inventory, name)
        if host is not None:
            return host
    return testinfra.get_host(
        f"ansible://{name}", ansible_inventory=str(inventory_path), force_ansible=True
    )
