"""What reaches ssh on the controller, checked: a host name becomes a bundle directory, a
--limit pattern and an ssh argument; ansible_host, the user, the port and the ssh
arguments become ssh's argument vector (gpuboot.transport, Ansible's ssh plugin); a
password would reach `sshpass -p`.

ssh, scp and sftp settings that would run a program on the controller (a ProxyCommand,
a LocalCommand, a config file given with -F, another ssh executable, ...) are refused
wherever Ansible or gpuboot would read them: the inventory, the environment and the
ansible.cfg Ansible reads; unless the host's ``gpuboot_allow_ssh_options`` names them."""

from __future__ import annotations

import configparser
import functools
import os
import re
from pathlib import Path
from typing import Any

from gpuboot import sshopts
from gpuboot.errors import ConfigError

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
# Ansible splits these into words for ssh, scp and sftp (gpuboot's transport: the ssh ones).
SSH_ARG_VARS = {
    "ansible_ssh_args": sshopts.SSH,
    "ansible_ssh_common_args": sshopts.SSH,
    "ansible_ssh_extra_args": sshopts.SSH,
    "ansible_scp_extra_args": sshopts.SCP,
    "ansible_sftp_extra_args": sshopts.SFTP,
}
# The same settings as Ansible reads them from the environment and from its ansible.cfg,
# and the two that are a program themselves.
SSH_ARG_ENV = {
    "ANSIBLE_SSH_ARGS": sshopts.SSH,
    "ANSIBLE_SSH_COMMON_ARGS": sshopts.SSH,
    "ANSIBLE_SSH_EXTRA_ARGS": sshopts.SSH,
    "ANSIBLE_SCP_EXTRA_ARGS": sshopts.SCP,
    "ANSIBLE_SFTP_EXTRA_ARGS": sshopts.SFTP,
}
SSH_ARG_INI = {
    ("ssh_connection", "ssh_args"): sshopts.SSH,
    ("ssh_connection", "ssh_common_args"): sshopts.SSH,
    ("ssh_connection", "ssh_extra_args"): sshopts.SSH,
    ("ssh_connection", "scp_extra_args"): sshopts.SCP,
    ("ssh_connection", "sftp_extra_args"): sshopts.SFTP,
}
# setting -> the allow-list name of the program it is (ssh's default: "ssh" from PATH)
PROGRAM_VARS = {
    "ansible_ssh_executable": "ssh_executable",
    "ansible_paramiko_proxy_command": "ProxyCommand",
}
PROGRAM_ENV = {
    "ANSIBLE_SSH_EXECUTABLE": "ssh_executable",
    "ANSIBLE_PARAMIKO_PROXY_COMMAND": "ProxyCommand",
}
PROGRAM_INI = {
    ("ssh_connection", "ssh_executable"): "ssh_executable",
    ("paramiko_connection", "proxy_command"): "ProxyCommand",
}
ALLOW_VAR = "gpuboot_allow_ssh_options"
CFG_MAX_BYTES = 1 << 20
# testinfra hands the connection password to `sshpass -p`, readable in `ps` by anyone.
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


def check_ssh_options(path: Path, host: str, hostvars: dict[str, Any]) -> None:
    """No ssh, scp or sftp setting for this host runs a program on the controller, from
    the inventory, the environment or Ansible's ansible.cfg, unless allowed by name."""
    allowed = _allowed(path, host, hostvars.get(ALLOW_VAR, []))
    inventory = [
        (f"{path}: {host}.{var}", var, hostvars[var], tool)
        for var, tool in SSH_ARG_VARS.items()
        if var in hostvars
    ] + [
        (f"{path}: {host}.{var}", var, hostvars[var], name)
        for var, name in PROGRAM_VARS.items()
        if var in hostvars
    ]
    for where, setting, value, reads in (*inventory, *ambient_ssh_settings()):
        if isinstance(reads, str):  # a program
            refused, strays = ([reads] if _is_program(setting, value) else []), ()
        else:
            try:
                options = sshopts.read(str(value), reads)
            except sshopts.NotOptions as exc:
                raise _not_options(where, setting, reads, str(exc)) from None
            refused, strays = list(options.runs_commands), options.strays
        for name in (n for n in refused if n not in allowed):
            raise ConfigError(
                f"{setting} would run a program on the controller ({name}: {value!r}); "
                f"it applies to host {host}",
                where=where,
                hint=_refusal_hint(name),
            )
        if strays:
            raise _not_options(
                where,
                setting,
                reads,
                f"{strays[0]!r} is not an option: {reads.name} would take it as the host",
            )


def _not_options(where: str, setting: str, tool: sshopts.Tool, why: str) -> ConfigError:
    return ConfigError(
        f"{setting} holds more than {tool.name} options: {why}",
        where=where,
        hint="write options only, e.g. -o StrictHostKeyChecking=yes -o "
        "ProxyJump=jump.example.internal (the host comes from the inventory)",
    )


def _is_program(setting: str, value: Any) -> bool:
    if setting.lower().endswith("ssh_executable"):
        return str(value).strip() not in ("", "ssh")
    return str(value).strip() not in ("", "None")


def _refusal_hint(name: str) -> str:
    instead = {
        "ProxyCommand": "reach the node through a jump host with -o ProxyJump=user@jump "
        "(no local command) instead",
        "-F": "put the options themselves in the inventory's ansible_ssh_common_args",
        "ssh_executable": "leave the ssh executable unset (ssh from PATH)",
    }.get(name, f"remove {name}")
    return (
        f"{instead}; or, if the controller must run it, allow it by name in the "
        f"inventory's group_vars/all.yml: {ALLOW_VAR}: [{name}]"
    )


def _allowed(path: Path, host: str, value: Any) -> frozenset[str]:
    names = {n.lower(): n for n in sshopts.ALLOWABLE}
    items = value if isinstance(value, list) else [value]
    unknown = [i for i in items if not isinstance(i, str) or i.lower() not in names]
    if unknown:
        raise ConfigError(
            f"{ALLOW_VAR} names {unknown[0]!r}, not an ssh setting that runs a program",
            where=f"{path}: {host}.{ALLOW_VAR}",
            hint=f"a list of names from: {', '.join(sorted(sshopts.ALLOWABLE))}",
        )
    return frozenset(names[i.lower()] for i in items)


def ambient_ssh_settings() -> tuple[tuple[str, str, str, Any], ...]:
    """(where, setting, value, tool or program name) for each ssh setting the environment
    and the ansible.cfg Ansible would read (its own search, which skips a world-writable
    working directory) give every host."""
    from ansible.config.manager import find_ini_config_file

    cfg = find_ini_config_file()
    try:
        stamp = os.stat(cfg) if cfg else None
    except OSError:
        stamp = None
    env = tuple((v, os.environ[v]) for v in (*SSH_ARG_ENV, *PROGRAM_ENV) if v in os.environ)
    key = (cfg, stamp.st_mtime_ns, stamp.st_size, stamp.st_ino) if stamp else None
    return _ambient(env, key)


@functools.lru_cache(maxsize=8)
def _ambient(
    env: tuple[tuple[str, str], ...], cfg: tuple[str, int, int, int] | None
) -> tuple[tuple[str, str, str, Any], ...]:
    kinds: dict[str, Any] = {**SSH_ARG_ENV, **PROGRAM_ENV}
    found = [(f"environment: {var}", var, value, kinds[var]) for var, value in env]
    if cfg:
        ini = _read_cfg(Path(cfg[0]))
        for (section, key), kind in (*SSH_ARG_INI.items(), *PROGRAM_INI.items()):
            if ini.has_option(section, key):
                value = ini.get(section, key)
                found.append((f"{cfg[0]}: [{section}] {key}", key, value, kind))
    return tuple(found)


def _read_cfg(path: Path) -> configparser.ConfigParser:
    """The file as Ansible parses it (';' starts a comment), no bigger than a config."""
    where = str(path)
    hint = "fix or move that ansible.cfg (Ansible reads it from ANSIBLE_CONFIG, ./, ~/)"
    if not path.is_file() or path.stat().st_size > CFG_MAX_BYTES:
        raise ConfigError(
            f"Ansible's configuration is not a regular file of at most {CFG_MAX_BYTES} bytes",
            where=where,
            hint=hint,
        )
    ini = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    try:
        ini.read_string(path.read_text(errors="replace"), source=where)
    except configparser.Error as exc:
        raise ConfigError(
            f"Ansible's configuration cannot be read: {exc}", where=where, hint=hint
        ) from None
    return ini


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
