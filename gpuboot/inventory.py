"""Read and check an Ansible inventory before any host is touched."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuboot.errors import ConfigError

PROFILE_FIX = "set a SKU profile from gpuboot/profiles/ (`gpuboot lab up` writes one)"
# A host names its software either as a whole stack or, for the driver alone, as pins.
PIN_VARS = ("nvidia_driver_branch", "nvidia_driver_version")
PIN_FIX = (
    "set gpuboot_stack to a stack (`gpuboot matrix list`), or pin the driver alone with "
    'nvidia_driver_branch (e.g. "550") and nvidia_driver_version (e.g. "550.54.15-1")'
)

# The OS families gpuboot can converge and certify. A stack's redhat pins feed
# `gpuboot mirror --os-family redhat`; the roles, plan and checks read apt/dpkg only.
NODE_OS_FAMILIES = ("debian",)


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: dict[str, dict[str, Any]]  # host -> merged variables (group + host)
    # host -> role variables gpuboot derives: the stack's pins and the profile's facts
    derived_vars: dict[str, dict[str, Any]] = field(default_factory=dict)

    def resolved(self, host: str) -> dict[str, Any]:
        """The host's variables with the derived role variables applied."""
        return {**self.hosts[host], **self.derived_vars.get(host, {})}

    def k8s_node_names(self) -> dict[str, str]:
        """Inventory host -> Kubernetes node name, where ``gpuboot_k8s_node_name`` says so."""
        return {
            h: str(v["gpuboot_k8s_node_name"])
            for h, v in self.hosts.items()
            if "gpuboot_k8s_node_name" in v
        }


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
    return Inventory(path=path, hosts=hosts, derived_vars=_check_hosts(path, hosts))


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


def match_hosts(path: Path, pattern: str) -> list[str]:
    """The hosts an Ansible ``--limit`` pattern selects, in inventory order."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    manager = InventoryManager(loader=DataLoader(), sources=[str(path)])
    manager.subset(pattern)
    return [h.name for h in manager.get_hosts()]


def profile_vars(profile: dict[str, Any], hostvars: dict[str, Any]) -> dict[str, Any]:
    """Role variables that follow from the SKU's hardware, unless the inventory sets them."""
    nics = profile.get("hardware", {}).get("nics", [])
    derived = {
        "gpuboot_roce_interfaces": [n["netdev"] for n in nics if n.get("link_layer") == "Ethernet"]
    }
    return {k: v for k, v in derived.items() if k not in hostvars}


def with_derived(hostvars: dict[str, Any]) -> dict[str, Any]:
    """A host's variables with what gpuboot derives from them applied, as install passes
    them to the roles: its gpuboot_stack's role variables (the stack wins) and its
    gpuboot_mig layout. The inventory was checked before, so nothing here fails."""
    out = dict(hostvars)
    if name := hostvars.get("gpuboot_stack"):
        from gpuboot.stacks import load_stack, role_vars

        out.update(role_vars(load_stack(name), hostvars.get("gpuboot_os_family", "debian")))
    if hostvars.get("gpuboot_mig") is not None and "gpuboot_profile" in hostvars:
        from gpuboot.mig import layout_vars
        from gpuboot.profiles import load_profile

        profile = load_profile(hostvars["gpuboot_profile"])
        out.update(layout_vars(hostvars["gpuboot_mig"], profile, "gpuboot_mig"))
    return out


def _check_os_families(path: Path, hosts: dict[str, dict[str, Any]]) -> None:
    """Refuse, before any host is touched, nodes whose package manager the roles lack:
    on a RHEL/Rocky node every apt task would fail one host at a time instead."""
    other = {h: str(v.get("gpuboot_os_family", "debian")) for h, v in hosts.items()}
    other = {h: fam for h, fam in other.items() if fam not in NODE_OS_FAMILIES}
    if not other:
        return
    host, family = next(iter(other.items()))
    named = ", ".join(f"{h} ({fam})" for h, fam in other.items())
    raise ConfigError(
        f"gpuboot_os_family {family!r} is not supported on nodes ({named}): the roles "
        "install and pin with apt/dpkg and the checks read dpkg; the dnf/versionlock path "
        "for RHEL/Rocky is not built",
        where=f"{path}: {host}.gpuboot_os_family",
        hint="run these hosts from a Debian/Ubuntu image (gpuboot_os_family: debian, the "
        "default); `gpuboot mirror --os-family redhat` still lists a stack's RHEL packages",
    )


def _check_hosts(path: Path, hosts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every host's profile and software choice, checked before any host is touched;
    every broken compatibility rule of every host is reported at once."""
    from gpuboot.profiles import load_profile
    from gpuboot.stacks import check_stack, load_stack, role_vars

    _check_os_families(path, hosts)
    problems: list[str] = []
    fixes: list[str] = []
    derived: dict[str, dict[str, Any]] = {}
    for host, hostvars in hosts.items():
        if "gpuboot_profile" not in hostvars:
            raise ConfigError(
                f"host {host} has no gpuboot_profile",
                where=f"{path}: {host}.gpuboot_profile",
                hint=PROFILE_FIX,
            )
        try:
            profile = load_profile(hostvars["gpuboot_profile"])
        except ConfigError as exc:
            raise ConfigError(
                exc.message, where=f"{path}: {host}.gpuboot_profile", hint=exc.hint
            ) from exc
        derived[host] = profile_vars(profile, hostvars)
        if hostvars.get("gpuboot_mig") is not None:
            from gpuboot.mig import layout_vars

            where = f"{path}: {host}.gpuboot_mig"
            derived[host].update(layout_vars(hostvars["gpuboot_mig"], profile, where))
        stack_name = hostvars.get("gpuboot_stack")
        if stack_name is None:
            missing = [v for v in PIN_VARS if v not in hostvars]
            if missing:
                raise ConfigError(
                    f"host {host} names neither gpuboot_stack nor {missing[0]}",
                    where=f"{path}: {host}.{missing[0]}",
                    hint=PIN_FIX,
                )
            continue
        clash = [v for v in PIN_VARS if v in hostvars]
        if clash:
            raise ConfigError(
                f"host {host} sets both gpuboot_stack and {clash[0]}",
                where=f"{path}: {host}.{clash[0]}",
                hint="the stack pins the driver: remove the separate pin",
            )
        try:
            stack = load_stack(stack_name)
        except ConfigError as exc:
            raise ConfigError(
                exc.message, where=f"{path}: {host}.gpuboot_stack", hint=exc.hint
            ) from exc
        for v in check_stack(stack, profile, where=f"{path}: {host}.gpuboot_stack"):
            problems.append(f"{v.rule_id} {v.where}: {v.message}")
            fixes.append(v.fix)
        derived[host].update(role_vars(stack, hostvars.get("gpuboot_os_family", "debian")))
    if problems:
        raise ConfigError(
            f"{len(problems)} compatibility rule(s) broken: " + "; ".join(problems),
            where=str(path),
            hint="; ".join(dict.fromkeys(fixes)),
        )
    return derived
