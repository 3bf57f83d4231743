"""What reaches ssh on the controller, checked: a host name becomes a bundle directory, a
--limit pattern and an ssh argument; ansible_host, the user, the port and the ssh
arguments become ssh's argument vector (gpuboot.transport, Ansible's ssh plugin); a
password would reach `sshpass -p`; an ssh setting that runs a program is refused
(ssh_programs.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpuboot.errors import ConfigError
from gpuboot.inventory.ssh_programs import SSH_ARG_VARS, check_ssh_options

# A host name becomes a bundle directory, a --limit pattern and a testinfra host spec.
HOST_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")
HOST_NAME_FIX = (
    "name hosts with letters, digits, '.', '-' and '_' (starting with a letter, digit or "
    "'_'), and put the node's address in ansible_host"
)
# ansible_host reaches ssh as an argument: never an option, never a template.
ADDRESS_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:%-]{0,252}")
USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
PORT_VARS = ("ansible_port", "ansible_ssh_port")
USER_VARS = ("ansible_user", "ansible_ssh_user", "ansible_become_user")
# sshpass would take the connection password as `sshpass -p`, readable in `ps` by anyone.
PASSWORD_VARS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")
# A GPU node is reached over SSH: `local` (or a container or chroot plugin) would run the
# probes and the roles on the controller itself and certify the controller as the node.
SSH_CONNECTIONS = ("ssh", "smart", "paramiko", "paramiko_ssh")
PASSWORD_FIX = (
    "use SSH keys (ansible_ssh_private_key_file, or keys loaded in ssh-agent) and remove "
    "the password: gpuboot's checks would pass it to `sshpass -p`, visible in `ps`"
)
# Outside quotes a POSIX shell expands or acts on these; inside double quotes on these.
SHELL_ACTIVE = frozenset(";&|<>()$`\\#*?[]{}")
SHELL_ACTIVE_IN_DOUBLE_QUOTES = frozenset("$`\\")


def check_host_names(path: Path, hosts: dict[str, Any], groups: set[str]) -> None:
    """A host name becomes a directory, a --limit pattern and a testinfra host spec."""
    for name in hosts:
        if not HOST_NAME_RE.fullmatch(name):
            raise ConfigError(
                "not an allowed host name: it becomes a directory, a host pattern and an "
                "ssh argument",
                where=f"{path}: host {name!r}",
                hint=HOST_NAME_FIX,
            )
        if name in groups:
            raise ConfigError(
                "host name is also a group name: a pattern naming the host would select "
                "the whole group",
                where=f"{path}: host {name!r}",
                hint="rename the host or the group",
            )


def check_connection(path: Path, host: str, hostvars: dict[str, Any]) -> None:
    """What reaches ssh on the controller: checked, since testinfra builds a shell line."""

    def bad(var: str, message: str, hint: str) -> ConfigError:
        return ConfigError(message, where=f"{path}: {host}.{var}", hint=hint)

    connection = str(hostvars.get("ansible_connection", "ssh")).removeprefix("ansible.builtin.")
    if connection not in SSH_CONNECTIONS:
        raise bad(
            "ansible_connection",
            f"ansible_connection {hostvars['ansible_connection']!r} does not reach a node over "
            "SSH: the probes and roles would run on the controller (or elsewhere) and certify it "
            "as this node",
            f"use one of {', '.join(SSH_CONNECTIONS)} (or leave ansible_connection unset)",
        )
    for var in PASSWORD_VARS:
        if hostvars.get(var) not in (None, ""):
            raise bad(
                var, f"{var} is set: gpuboot puts no password on a command line", PASSWORD_FIX
            )
    for var in (v for v in ADDRESS_VARS if v in hostvars):
        if not ADDRESS_RE.fullmatch(str(hostvars[var])):
            raise bad(
                var,
                f"{var} {hostvars[var]!r} is not a host name or IP address (no leading '-', "
                "spaces, quotes, shell characters or templates)",
                "write the node's address literally, e.g. 10.0.0.5 or gpu1.example.internal",
            )
    for var in (v for v in PORT_VARS if v in hostvars):
        if not _is_port(hostvars[var]):
            raise bad(var, f"{var} {hostvars[var]!r} is not a TCP port", "write a number 1-65535")
    for var in (v for v in USER_VARS if v in hostvars):
        if not USER_RE.fullmatch(str(hostvars[var])):
            raise bad(
                var,
                f"{var} {hostvars[var]!r} is not a user name",
                "letters, digits, '.', '-' and '_', starting with a letter, digit or '_'",
            )
    for var in (v for v in SSH_ARG_VARS if v in hostvars):
        problem = _shell_problem(hostvars[var])
        if problem:
            raise bad(
                var,
                f"{var} {hostvars[var]!r} {problem}: ssh arguments are split into words and "
                "never run by a shell, so this would reach ssh as it stands",
                "write plain ssh options, e.g. -o StrictHostKeyChecking=yes (quote a value "
                "holding spaces), or move them to ~/.ssh/config",
            )
    check_ssh_options(path, host, hostvars)


def _is_port(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str) and re.fullmatch(r"\d{1,5}", value):
        value = int(value)
    return isinstance(value, int) and 1 <= value <= 65535


def _shell_problem(value: Any) -> str | None:
    """Why a POSIX shell would do more than split this string into words, or None."""
    if not isinstance(value, str):
        return "is not a string"
    quote = None
    for ch in value:
        if (ch < " " and ch != "\t") or ch == "\x7f":
            return "holds a control character (a line break?)"
        if quote == "'":
            quote = None if ch == "'" else quote
        elif quote == '"':
            if ch == '"':
                quote = None
            elif ch in SHELL_ACTIVE_IN_DOUBLE_QUOTES:
                return f"holds {ch!r}, which a shell expands even inside double quotes"
        elif ch in "'\"":
            quote = ch
        elif ch in SHELL_ACTIVE:
            return f"holds {ch!r} outside quotes, which a shell acts on"
    return "has an unbalanced quote" if quote else None
