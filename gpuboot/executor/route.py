"""Which executor runs which host, how the controller reaches it, and whether it may.

A host with a ``gpuboot_domain`` runs on an executor serving that domain (the first, in
inventory order, that answered the pre-flight); a host without one runs from the
controller. An executor is reached over ssh with the inventory's connection variables for
it, as an argument vector: its address, user, port, key and ssh arguments were checked
when the inventory was loaded, and its venv path is plain words (inventory.executors).
"""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from gpuboot import sshopts
from gpuboot.errors import BadInput, RunError
from gpuboot.executor import mux
from gpuboot.executor.stream import Executor
from gpuboot.executor.versions import check_executor, local_versions
from gpuboot.inventory.executors import check_served, domain_of, serving
from gpuboot.inventory.ssh_programs import SSH_ARG_VARS

if TYPE_CHECKING:
    from gpuboot.inventory import Inventory

CONTROLLER = "controller"
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
# How many executors are asked their versions at once.
PREFLIGHT_THREADS = 16


def _first(hostvars: dict, names: tuple[str, ...]) -> str | None:
    found = next((hostvars[n] for n in names if hostvars.get(n) not in (None, "")), None)
    return None if found is None else str(found)


def routing(
    inv: Inventory, hosts: list[str], answered: Collection[str] | None = None
) -> dict[str, list[str]]:
    """Executor name (or ``"controller"``) -> its hosts, in ``hosts``' order. With
    ``answered`` (the executors whose pre-flight passed), a domain's first answering
    executor is chosen; a domain none of whose executors answered keeps its first one,
    whose hosts the caller reports unknown (never run from the controller)."""
    check_served(inv.path, inv.hosts, inv.executors, hosts)
    routes: dict[str, list[str]] = {}
    for host in hosts:
        domain = domain_of(inv.hosts[host])
        if domain is None:
            key = CONTROLLER
        else:
            names = serving(inv.executors, domain)
            usable = [n for n in names if answered is None or n in answered]
            key = (usable or names)[0]
        routes.setdefault(key, []).append(host)
    return routes


def candidates(inv: Inventory, hosts: list[str]) -> list[str]:
    """Every executor serving a domain of ``hosts``: the ones the pre-flight asks."""
    domains = {domain_of(inv.hosts[h]) for h in hosts} - {None}
    return [n for n, e in inv.executors.items() if domains & set(e.domains)]


def executor(inv: Inventory, name: str) -> Executor:
    """The executor ``name`` reached over ssh as the inventory says (no shell on this side;
    on the executor's side only the checked venv path and gpuboot's own words)."""
    entry = inv.executors[name]
    hostvars = entry.hostvars
    options: list[str] = []
    if user := _first(hostvars, ("ansible_user", "ansible_ssh_user")):
        options += ["-l", user]
    if port := _first(hostvars, ("ansible_port", "ansible_ssh_port")):
        options += ["-p", port]
    if key := _first(hostvars, KEY_VARS):
        options += ["-i", key]
    args = " ".join(str(hostvars.get(v) or "") for v in SSH_ARG_VARS if v.startswith("ansible_ssh"))
    options += sshopts.read(args).words
    options += mux.options(name)  # after the operator's: theirs win
    address = _first(hostvars, ("ansible_host", "ansible_ssh_host")) or name
    return Executor.over_ssh(name, address, tuple(options), command=entry.worker)


def preflight(inv: Inventory, names: list[str]) -> dict[str, str | None]:
    """Ask each executor its versions, in parallel: name -> None (it runs the controller's
    versions) or why it did not answer. A skewed executor is bad input (exit 2), raised
    before any GPU host is touched."""

    def ask(name: str) -> str | None:
        try:
            check_executor(executor(inv, name), inv.path, local)
        except RunError as exc:
            return exc.message
        return None

    if not names:
        return {}
    local = local_versions()  # once for all: it digests gpuboot's files (about 20 ms)
    results: dict[str, str | None] = {}
    skewed: list[BadInput] = []
    with ThreadPoolExecutor(min(PREFLIGHT_THREADS, len(names))) as pool:
        futures = {name: pool.submit(ask, name) for name in names}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except BadInput as exc:
                skewed.append(exc)
    if skewed:
        first = skewed[0]
        others = "; ".join(e.message for e in skewed[1:])
        raise BadInput(
            first.message + (f"; also {others}" if others else ""),
            where=first.where,
            hint=first.hint,
        )
    return results
