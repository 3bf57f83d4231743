"""Domains and executors in the inventory, checked before any host is touched.

A GPU host may carry ``gpuboot_domain`` (the hall or management network it sits in); the
hosts of group ``gpuboot_executors`` are execution nodes, each serving the domains in its
``gpuboot_executor_domains``, with gpuboot's venv at ``gpuboot_executor_venv``. A host of a
domain runs on an executor of that domain, never from the controller. An executor is no
GPU host: it is never a target of a verb, and a host in both roles is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuboot.errors import ConfigError

EXECUTORS_GROUP = "gpuboot_executors"
DOMAIN_VAR = "gpuboot_domain"
DOMAINS_VAR = "gpuboot_executor_domains"
VENV_VAR = "gpuboot_executor_venv"
DEFAULT_VENV = "/opt/gpuboot/venv"
DOMAIN_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
# The venv reaches the executor's shell as part of ssh's remote command: plain path words only.
VENV_RE = re.compile(r"/[A-Za-z0-9_.+/-]{0,254}")
DOMAIN_FIX = "a domain is lower-case letters, digits and '-', e.g. hall-a"


@dataclass(frozen=True)
class ExecutorEntry:
    """One execution node as the inventory describes it (its variables already checked by
    the connection checks every host goes through)."""

    name: str
    domains: tuple[str, ...]
    venv: str
    hostvars: dict[str, Any]

    @property
    def worker(self) -> str:
        """The supervisor's command on the executor."""
        return f"{self.venv.rstrip('/')}/bin/gpuboot-executor-worker"


def _is_executor(hostvars: dict[str, Any]) -> bool:
    return EXECUTORS_GROUP in (hostvars.get("group_names") or ())


def _check_domain(path: Path, host: str, value: Any, var: str) -> str:
    if not isinstance(value, str) or not DOMAIN_RE.fullmatch(value):
        raise ConfigError(
            f"{var} {value!r} is not a domain name",
            where=f"{path}: {host}.{var}",
            hint=DOMAIN_FIX,
        )
    return value


def _entry(path: Path, name: str, hostvars: dict[str, Any]) -> ExecutorEntry:
    if DOMAIN_VAR in hostvars:
        raise ConfigError(
            f"executor {name} is in group {EXECUTORS_GROUP} and has {DOMAIN_VAR}: a host is "
            "either an execution node or a GPU host, never both",
            where=f"{path}: {name}.{DOMAIN_VAR}",
            hint=f"list the domains it serves in {DOMAINS_VAR}, or take it out of "
            f"{EXECUTORS_GROUP}",
        )
    domains = hostvars.get(DOMAINS_VAR)
    if not isinstance(domains, list) or not domains:
        raise ConfigError(
            f"executor {name} has no {DOMAINS_VAR} list: it would serve no host",
            where=f"{path}: {name}.{DOMAINS_VAR}",
            hint=f"set {DOMAINS_VAR}: [hall-a] (the gpuboot_domain of the hosts it runs)",
        )
    checked = tuple(dict.fromkeys(_check_domain(path, name, d, DOMAINS_VAR) for d in domains))
    venv = hostvars.get(VENV_VAR, DEFAULT_VENV)
    if not isinstance(venv, str) or not VENV_RE.fullmatch(venv) or ".." in venv.split("/"):
        raise ConfigError(
            f"{VENV_VAR} {venv!r} is not an absolute path of plain words (it reaches the "
            "executor's shell in ssh's command)",
            where=f"{path}: {name}.{VENV_VAR}",
            hint=f"e.g. {VENV_VAR}: {DEFAULT_VENV} (letters, digits, '_', '.', '+', '-', '/')",
        )
    return ExecutorEntry(name, checked, venv, hostvars)


def split_executors(
    path: Path, hosts: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, ExecutorEntry]]:
    """The GPU hosts and the executors of the inventory, each checked; every domain a GPU
    host names is checked for its form here, for an executor where the verb selects it
    (``unserved``)."""
    executors = {n: _entry(path, n, v) for n, v in hosts.items() if _is_executor(v)}
    gpu_hosts = {n: v for n, v in hosts.items() if n not in executors}
    for name, hostvars in gpu_hosts.items():
        if DOMAIN_VAR in hostvars:
            _check_domain(path, name, hostvars[DOMAIN_VAR], DOMAIN_VAR)
    return gpu_hosts, executors


def domain_of(hostvars: dict[str, Any]) -> str | None:
    return hostvars.get(DOMAIN_VAR)


def serving(executors: dict[str, ExecutorEntry], domain: str) -> list[str]:
    """The executors of ``domain``, in inventory order."""
    return [n for n, e in executors.items() if domain in e.domains]


def check_served(
    path: Path,
    hosts: dict[str, dict[str, Any]],
    executors: dict[str, ExecutorEntry],
    selected: list[str],
) -> None:
    """Every domain of a selected host has an executor; ConfigError naming the hosts."""
    unserved: dict[str, list[str]] = {}
    for host in selected:
        domain = domain_of(hosts[host])
        if domain is not None and not serving(executors, domain):
            unserved.setdefault(domain, []).append(host)
    if unserved:
        domain, names = next(iter(unserved.items()))
        raise ConfigError(
            f"domain {domain} has no executor, and its hosts never run from the controller: "
            + ", ".join(names[:5])
            + (f" and {len(names) - 5} more" if len(names) > 5 else ""),
            where=f"{path}: {names[0]}.{DOMAIN_VAR}",
            hint=f"add a host to group {EXECUTORS_GROUP} with {DOMAINS_VAR}: [{domain}] "
            f"(then `gpuboot executor setup -i {path}`), or fix the hosts' {DOMAIN_VAR}",
        )
