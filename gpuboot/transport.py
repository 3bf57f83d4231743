"""A node's transport: a testinfra host built from the inventory gpuboot already loaded
and checked (gpuboot.inventory), so nothing re-reads the inventory its own way.

ssh (and Ansible's `smart`): testinfra's ssh backend, but ssh is started from an argument
vector, never a shell line, built from the host's checked variables only: its address,
user, port, key, `become` and ssh arguments (ansible_ssh_args, ansible_ssh_common_args,
ansible_ssh_extra_args). An ansible.cfg's [ssh_connection] and the ANSIBLE_SSH_*
variables do not reach it: an ssh option for certify, scan and plan goes in the
inventory, where Ansible's plays read it too. The user, port, key and `become` fall back
to Ansible's own settings (its environment variables and the ansible.cfg it reads), as
in a play. Host keys are checked as the operator's ssh options and ~/.ssh/config say
(the lab: its known_hosts, StrictHostKeyChecking=yes).

paramiko: Ansible's own paramiko connection (testinfra's ansible backend, one `ansible -m
shell` per command), which checks host keys as Ansible does; testinfra's paramiko backend
would accept any unknown host key.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testinfra.backend.base import HostSpec
from testinfra.backend.ssh import SshBackend

from gpuboot import paths, remote, sshopts

if TYPE_CHECKING:
    from gpuboot.inventory import Inventory

SSH = ("ssh", "smart")
SSH_ARG_VARS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
CONNECT_TIMEOUT_S = 10  # testinfra's
CONTROL_PERSIST_S = 60  # testinfra's: where ~/.ssh/config sets a ControlPath, one master


class ArgvSshBackend(SshBackend):
    """testinfra's ssh backend with ssh started from an argument vector: no shell sees
    the address, the options or the command."""

    def __init__(
        self,
        address: str,
        user: str | None,
        port: str | None,
        options: sshopts.Options,
        executable: str = "ssh",
        **kwargs: Any,
    ):
        super().__init__(f"[{address}]", **kwargs)  # testinfra's parse, replaced just below
        self.host = HostSpec(address, port, user, None)
        self.hostname = address
        self.options = options
        self.executable = executable

    def argv(self, command: str) -> list[str]:
        argv = [self.executable, *self.options.words]
        if self.host.user:
            argv += ["-o", f"User={self.host.user}"]
        if self.host.port:
            argv += ["-o", f"Port={self.host.port}"]
        if self.ssh_identity_file:
            argv += ["-i", self.ssh_identity_file]
        if "connecttimeout" not in self.options.keywords:
            argv += ["-o", f"ConnectTimeout={self.timeout}"]
        if "controlmaster" not in self.options.keywords:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPersist={self.controlpersist}s"]
        # "--": ssh reads options after the host too, unless told they have ended
        return [*argv, "--", self.host.name, command]

    def run_ssh(self, command: str) -> Any:
        proc = subprocess.Popen(
            self.argv(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        stdout, stderr = remote.communicate(proc)  # the answer read within the call's cap
        out = self.result(proc.returncode, self.encode(command), stdout, stderr)
        if out.rc == 255:  # ssh's own failure, not the command's (as testinfra)
            raise RuntimeError(out)
        return out


def connector(inv: Inventory) -> Callable[[str], Any]:
    """connect() for the hosts of an inventory already loaded: each with its checked
    variables, nothing read again. The paramiko path runs `ansible` by name: the venv's
    bin goes on PATH first, once, before any thread connects."""
    paths.put_venv_on_path()
    return lambda name: connect(name, inv.hosts[name], inv.path)


def connect(name: str, hostvars: dict[str, Any], inventory_path: Path) -> Any:
    """A testinfra Host for inventory host ``name`` (``hostvars``: its checked variables)."""
    import testinfra

    connection = str(hostvars.get("ansible_connection", "ssh")).removeprefix("ansible.builtin.")
    if connection in SSH:
        return ssh_host(name, hostvars)
    return testinfra.get_host(
        f"ansible://{name}", ansible_inventory=str(inventory_path), force_ansible=True
    )


def ssh_host(name: str, hostvars: dict[str, Any]) -> Any:
    """The testinfra Host reaching ``name`` over ssh, from its checked variables."""
    from ansible import constants
    from ansible.module_utils.parsing.convert_bool import boolean
    from testinfra.host import Host

    def first(names: tuple[str, ...], default: Any) -> Any:
        return next((hostvars[n] for n in names if hostvars.get(n) not in (None, "")), default)

    user = first(("ansible_user", "ansible_ssh_user"), constants.DEFAULT_REMOTE_USER)
    port = first(("ansible_port", "ansible_ssh_port"), constants.DEFAULT_REMOTE_PORT)
    become = boolean(first(("ansible_become",), constants.DEFAULT_BECOME), strict=False)
    backend = ArgvSshBackend(
        str(first(("ansible_host", "ansible_ssh_host"), name)),
        user=str(user) if user else None,
        port=str(port) if port else None,
        options=sshopts.read(" ".join(str(hostvars.get(v) or "") for v in SSH_ARG_VARS)),
        executable=str(hostvars.get("ansible_ssh_executable") or "ssh"),
        ssh_identity_file=first(KEY_VARS, constants.DEFAULT_PRIVATE_KEY_FILE),
        timeout=CONNECT_TIMEOUT_S,
        controlpersist=CONTROL_PERSIST_S,
        sudo=become,
        sudo_user=first(("ansible_become_user",), constants.DEFAULT_BECOME_USER),
    )
    host = Host(backend)
    backend.set_host(host)
    return host
