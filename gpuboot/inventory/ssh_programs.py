"""ssh, scp and sftp settings that would run a program on the controller (a ProxyCommand,
a LocalCommand, a config file given with -F, another ssh executable, ...) or let the node
reach into it (a forwarding, the agent, a log file: sshopts.EFFECTS), refused wherever
Ansible or gpuboot would read them: the inventory (its group_vars too), the environment and
the ansible.cfg Ansible reads; unless the host's ``gpuboot_allow_ssh_options`` names them.
ProxyJump runs no local program: allowed."""

from __future__ import annotations

import configparser
import functools
import os
from pathlib import Path
from typing import Any

from gpuboot import sshopts
from gpuboot.errors import ConfigError
from gpuboot.yamlsafe import read_capped_bytes

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
            refused, strays = list(options.refused), options.strays
        for name in (n for n in refused if n not in allowed):
            raise ConfigError(
                f"{setting} {sshopts.effect(name)} ({name}: {value!r}); it applies to host {host}",
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
        "-E": "remove -E: ssh's messages go to its stderr, which the run reports",
    }.get(name, f"remove {name}")
    return (
        f"{instead}; or, if the controller must do it, allow it by name in the "
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
    # Ansible follows a linked ansible.cfg: so does this, to the file itself, which is then
    # read as a regular file only (a FIFO swapped in after the search never blocks) in caps
    data = read_capped_bytes(
        os.path.realpath(path), CFG_MAX_BYTES, "Ansible's configuration", hint=hint
    )
    ini = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    try:
        ini.read_string(data.decode(errors="replace"), source=where)
    except configparser.Error as exc:
        raise ConfigError(
            f"Ansible's configuration cannot be read: {exc}", where=where, hint=hint
        ) from None
    return ini
