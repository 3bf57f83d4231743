"""gpuboot/components.yaml: the table is checked on load (each fault a ConfigError naming
the file and the key), it agrees with the roles and the install playbook, and what the
stack code, the bundle and the molecule matrix derive from it is what they spelled out
by hand before the table existed.

The ``test_derived_*`` tests are a regression guard: their expected values are the
literals the code held before (gpuboot/stacks/model.py, plan.py, bundle_meta.py and
tests/molecule/test_molecule_roles.py at 878642c); a change to the table that changes
them changes behaviour, and must change these literals on purpose.
"""

from __future__ import annotations

import re

import pytest
import yaml

from gpuboot import paths
from gpuboot.bundle import meta as bundle_meta
from gpuboot.checks.rules import check_table_rules
from gpuboot.components import OS_FAMILIES, TABLE, load
from gpuboot.errors import ConfigError
from gpuboot.stacks import load_stack, model, plan, role_vars, table_vars

ROOT = paths.PACKAGE_DIR.parent


def _write(tmp_path, edit):
    doc = yaml.safe_load(TABLE.read_text())
    edit(doc)
    path = tmp_path / "components.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# (what the edit does, the edit, the key the error must name)
FAULTS = [
    ("unknown top-level key", lambda d: d.update(extra=1), "top level.extra"),
    (
        "unknown component key",
        lambda d: d["components"]["cuda"].update(colour="green"),
        "components.cuda.colour",
    ),
    (
        "unknown role key",
        lambda d: d["roles"]["dcgm"].update(needz=[]),
        "roles.dcgm.needz",
    ),
    (
        "component role that is not a role",
        lambda d: d["components"]["dcgm"].update(role="dcgm_tools"),
        "components.dcgm.role",
    ),
    (
        "prerequisite that is not a role",
        lambda d: d["roles"]["dcgm"]["needs"].__setitem__(1, "nvidia_drivers"),
        "roles.dcgm.needs[1]",
    ),
    (
        "rule id that does not exist",
        lambda d: d["roles"]["cuda_toolkit"]["rules"].append("STK-999"),
        "roles.cuda_toolkit.rules[1]",
    ),
    (
        "undo rule that does not exist",
        lambda d: d["roles"]["roce_qos"]["undo"]["debian"].update(fails="STK-999"),
        "roles.roce_qos.undo.debian.fails",
    ),
    (
        "undo rule that does not judge the role",
        lambda d: d["roles"]["nvidia_mig"]["undo"]["debian"].update(fails="STK-002"),
        "roles.nvidia_mig.undo.debian.fails",
    ),
    (
        "reboot that is not a boolean",
        lambda d: d["components"]["kernel"].update(reboot="yes"),
        "components.kernel.reboot",
    ),
    (
        "component whose role has no roles entry",
        lambda d: d["roles"].pop("nvidia_gds"),
        "components.nvidia_fs.role",
    ),
    (
        "package family of an unknown OS family",
        lambda d: d["components"]["driver"]["families"].update(suse={"^x$": "x"}),
        "components.driver.families.suse",
    ),
    (
        "undo without the EL family",
        lambda d: d["roles"]["cuda_toolkit"]["undo"].pop("redhat"),
        "roles.cuda_toolkit.undo.redhat",
    ),
    (
        "undo of an unknown OS family",
        lambda d: d["roles"]["cuda_toolkit"]["undo"].update(suse={"command": "x", "fails": "x"}),
        "roles.cuda_toolkit.undo.suse",
    ),
    (
        "EL undo rule that does not exist",
        lambda d: d["roles"]["roce_qos"]["undo"]["redhat"].update(fails="STK-999"),
        "roles.roce_qos.undo.redhat.fails",
    ),
    (
        "EL undo rule that does not judge the role",
        lambda d: d["roles"]["nvidia_mig"]["undo"]["redhat"].update(fails="STK-002"),
        "roles.nvidia_mig.undo.redhat.fails",
    ),
    (
        "EL undo command that is empty",
        lambda d: d["roles"]["dcgm"]["undo"]["redhat"].update(command=" "),
        "roles.dcgm.undo.redhat.command",
    ),
    (
        "undo as one command for every family",
        lambda d: d["roles"]["dcgm"].update(undo={"command": "true", "fails": "STK-002"}),
        "roles.dcgm.undo.command",
    ),
]


def test_the_shipped_table_loads():
    table = load()
    check_table_rules(table)
    assert [c.name for c in table.components][:2] == ["kernel", "driver"]
    assert {r.name for r in table.roles} >= _ROLES_THEN


def test_every_role_has_an_undo_for_each_os_family():
    for role in load().roles:
        assert set(role.undo) == set(OS_FAMILIES), role.name
        for family, undo in role.undo.items():
            assert undo.command.strip() and undo.fails in role.rules, (role.name, family)


def test_el_undo_of_a_pin_drops_its_versionlock_entry():
    """On EL a hold is a versionlock entry: dropping one is what makes STK-002 fail there
    (apt-mark is Debian's, and would not even exist on a real EL node)."""
    table = load()
    for role in table.roles:
        el = role.undo["redhat"]
        assert "apt" not in el.command.split()[0], (role.name, el.command)
        if el.fails == "STK-002":
            assert el.command.startswith("dnf -y versionlock delete "), (role.name, el.command)
    assert table.role("gpuboot_baseline").undo["redhat"].fails == "STK-003"
    assert "dnf-automatic" in table.role("gpuboot_baseline").undo["redhat"].command


# (what the edit does, the edit, the key the error must name)


@pytest.mark.parametrize(("what", "edit", "key"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_in_the_table_names_file_and_key(tmp_path, what, edit, key):
    path = _write(tmp_path, edit)
    with pytest.raises(ConfigError) as info:
        check_table_rules(load(path))  # the loader, then the rule ids against the registry
    assert info.value.where == f"components.yaml: {key}", (what, info.value.where)
    assert info.value.hint


def test_every_role_in_the_table_exists():
    table = load()
    named = {c.role for c in table.components} | {r.name for r in table.roles}
    named |= {n for r in table.roles for n in r.needs}
    missing = {n for n in named if not (paths.ROLES_DIR / n / "tasks" / "main.yml").is_file()}
    assert not missing, missing


# Roles that pin packages a site names in its inventory (site-built probe binaries), not
# the stack's: no component of the stack, so not in the table.
SITE_PACKAGES = {"gpuboot_probe_tools"}


def test_every_role_that_installs_pinned_packages_is_in_the_table():
    installs = {
        task.relative_to(paths.ROLES_DIR).parts[0]
        for task in paths.ROLES_DIR.glob("*/tasks/*.yml")
        if "gpuboot.node.pinned_packages:" in task.read_text()
    }
    assert installs, "no role calls gpuboot.node.pinned_packages: the scan is broken"
    assert installs - SITE_PACKAGES <= {c.role for c in load().components if c.pinned}, installs
    # ... and the exceptions read none of the stack's pins
    stack_vars = set(role_vars(load_stack("lts-550-cuda12.4")))
    for role in SITE_PACKAGES:
        text = "".join(f.read_text() for f in (paths.ROLES_DIR / role).rglob("*.yml"))
        assert not {v for v in stack_vars if re.search(rf"\b{v}\b", text)}, role


def _install_order() -> list[str]:
    play = yaml.safe_load((paths.PLAYBOOKS_DIR / "install.yml").read_text())[0]
    # the roles sit in the block whose always gives the node's lease back
    tasks = [t for task in play["tasks"] for t in task.get("block", [task])]
    imports = [t.get("ansible.builtin.import_role") for t in tasks]
    return [entry["name"] for entry in imports if entry]


def test_prerequisites_precede_their_role_in_the_install_playbook():
    order = _install_order()
    for role in load().roles:
        assert role.name in order, f"{role.name} is not in install.yml"
        positions = [order.index(n) for n in (*role.needs, role.name)]
        assert positions == sorted(positions), (role.name, role.needs, order)


def test_the_roles_table_follows_the_install_playbook():
    order = _install_order()
    roles = [r.name for r in load().roles]
    assert roles == sorted(roles, key=order.index)


def test_the_role_scenario_takes_the_role_from_the_environment():
    scenario = yaml.safe_load((ROOT / "molecule" / "role" / "molecule.yml").read_text())
    env = scenario["provisioner"]["env"]
    assert env == {
        "GPUBOOT_ROLE": "${GPUBOOT_ROLE}",
        "GPUBOOT_ROLE_NEEDS": "${GPUBOOT_ROLE_NEEDS}",
    }
    assert scenario["verifier"]["options"] == {"k": "${GPUBOOT_RULES}"}
    copies = [r.name for r in load().roles if (ROOT / "molecule" / r.name).exists()]
    assert not copies, f"per-role scenarios beside molecule/role: {copies}"


# ---------------------------------------------------------------- regression guard
# What the table held when the literals below were taken: a component or role added since
# (one more row) leaves what they say about these unchanged.
_COMPONENTS_THEN = {
    "kernel",
    "driver",
    "fabricmanager",
    "nscq",
    "cuda",
    "doca_ofed",
    "nvidia_fs",
    "nvidia_peermem",
    "container_toolkit",
    "dcgm",
}
_ROLES_THEN = {
    "gpuboot_baseline",
    "doca_ofed",
    "nvidia_driver",
    "nvidia_fabricmanager",
    "nvidia_peermem",
    "nvidia_mig",
    "cuda_toolkit",
    "nvidia_gds",
    "nvidia_container_toolkit",
    "dcgm",
    "roce_qos",
}


def _then(names, known):
    """``names`` (a tuple, set or mapping) restricted to the entries named in ``known``."""
    if isinstance(names, dict):
        return {k: v for k, v in names.items() if k in known}
    kept = [n for n in names if n in known]
    return set(kept) if isinstance(names, set | frozenset) else tuple(kept)


def test_derived_stack_components():
    assert _then(model.COMPONENTS, _COMPONENTS_THEN) == (
        "kernel",
        "driver",
        "fabricmanager",
        "nscq",
        "cuda",
        "doca_ofed",
        "nvidia_fs",
        "container_toolkit",
        "dcgm",
    )
    assert _then(model.OPTIONAL_COMPONENTS, _COMPONENTS_THEN) == (
        "fabricmanager",
        "nscq",
        "doca_ofed",
        "nvidia_fs",
    )
    assert model.OS_FAMILIES == ("debian", "redhat")


def test_derived_reboot_and_restarts():
    reboot = _then(plan.REBOOT_COMPONENTS, _COMPONENTS_THEN)
    assert reboot == {"kernel", "driver", "doca_ofed", "nvidia_fs"}
    assert _then(plan.RESTARTS, _COMPONENTS_THEN) == {
        "fabricmanager": ("nvidia-fabricmanager.service",),
        "nscq": ("nvidia-dcgm.service",),
        "dcgm": ("nvidia-dcgm.service",),
    }


def test_derived_role_variable_prefixes():
    assert _then(plan.ROLE_VAR_PREFIXES, _COMPONENTS_THEN) == {
        "fabricmanager": "nvidia_fabricmanager",
        "nscq": "nvidia_nscq",
        "cuda": "cuda_toolkit",
        "doca_ofed": "doca_ofed",
        "nvidia_fs": "nvidia_fs",
        "container_toolkit": "nvidia_container_toolkit",
        "dcgm": "dcgm",
    }
    assert list(plan.ROLE_VAR_PREFIXES) == [
        c for c in model.COMPONENTS if c not in ("kernel", "driver")
    ]
    prefixes_then = {c.prefix for c in load().components if c.name in _COMPONENTS_THEN}
    assert _then(bundle_meta._COMPONENTS, prefixes_then) == (
        "nvidia_fabricmanager",
        "nvidia_nscq",
        "cuda_toolkit",
        "doca_ofed",
        "nvidia_fs",
        "nvidia_container_toolkit",
        "dcgm",
    )
    # every stack variable role_vars writes is one a bundle may record (the table's
    # patterns, modules and units are no node's state: the rules read the table itself)
    stack_vars = set(role_vars(load_stack("lts-550-cuda12.4"))) - set(table_vars("debian"))
    assert stack_vars <= bundle_meta.BUNDLE_VARS


# The slot table as plan.py spelled it before components.yaml.
_OLD_SLOTS = (
    (
        re.compile(
            r"^(nvidia-driver|nvidia-dkms|nvidia-utils|nvidia-compute-utils)-\d{3}(-open)?$"
        ),
        r"\1",
    ),
    (
        re.compile(r"^(nvidia-fabricmanager|nvidia-fabric-manager)(-\d{3})?$"),
        "nvidia-fabricmanager",
    ),
    (re.compile(r"^libnvidia-nscq(-\d{3})?$"), "libnvidia-nscq"),
    (re.compile(r"^kmod-nvidia-(open|latest)-dkms$"), "kmod-nvidia-dkms"),
    (re.compile(r"^(cuda-toolkit|nvidia-gds)-\d+-\d+$"), r"\1"),
    (re.compile(r"^datacenter-gpu-manager(-4-core)?$"), "datacenter-gpu-manager"),
    (re.compile(r"^datacenter-gpu-manager-4-cuda\d+$"), "datacenter-gpu-manager-4-cuda"),
    (re.compile(r"^linux-(image|headers|modules)-\d+\.\d+\.\d+-\d+-([a-z0-9]+)$"), r"linux-\1-\2"),
)


def _old_slot(name: str) -> str | None:
    for pattern, repl in _OLD_SLOTS:
        if pattern.match(name):
            return pattern.sub(repl, name)
    return None


def _package_names() -> set[str]:
    """Every package a shipped stack pins, plus the rivals an upgrade meets."""
    from gpuboot.stacks import list_stacks, mirror_packages

    names = {
        name
        for stack in list_stacks()
        for family in model.OS_FAMILIES
        for name, _ in mirror_packages(load_stack(stack), family)
    }
    return names | {
        "nvidia-driver-535",
        "nvidia-dkms-570-open",
        "nvidia-fabricmanager",
        "nvidia-fabric-manager-570",
        "libnvidia-nscq",
        "kmod-nvidia-latest-dkms",
        "nvidia-gds-13-0",
        "cuda-toolkit-13-0",
        "datacenter-gpu-manager-4-core",
        "datacenter-gpu-manager-4-cuda13",
        "linux-modules-6.8.0-45-generic",
        "linux-image-6.8.0-45-lowlatency",
        "nvidia-fs",
        "doca-ofed",
    }


def test_derived_slots_place_every_package_as_before():
    names = _package_names()
    assert {n: plan._slot(n) for n in names} == {n: _old_slot(n) for n in names}


def test_derived_molecule_matrix():
    table = load()
    assert _then(table.part_prefixes(), _ROLES_THEN) == {
        "doca_ofed": ("doca_ofed",),
        "nvidia_driver": ("nvidia_driver",),
        "nvidia_fabricmanager": ("nvidia_fabricmanager", "nvidia_nscq"),
        "nvidia_peermem": ("nvidia_peermem",),
        "cuda_toolkit": ("cuda_toolkit",),
        "nvidia_gds": ("nvidia_fs",),
        "nvidia_container_toolkit": ("nvidia_container_toolkit",),
        "dcgm": ("dcgm",),
    }
    assert {r.name for r in table.roles if r.whole_stack} == {"gpuboot_baseline"}
    debian = {r.name: r.undo["debian"] for r in table.roles if r.name in _ROLES_THEN}
    assert {name: (u.command, u.fails) for name, u in debian.items()} == {
        "gpuboot_baseline": ("rm /etc/apt/apt.conf.d/51gpuboot-unattended-upgrades", "STK-003"),
        "doca_ofed": ("apt-mark unhold doca-ofed", "STK-002"),
        "nvidia_driver": ("apt-mark unhold nvidia-utils-550", "STK-002"),
        "nvidia_fabricmanager": ("systemctl stop nvidia-fabricmanager", "FAB-001"),
        "nvidia_peermem": ("modprobe -r nvidia_peermem", "MOD-001"),
        "cuda_toolkit": ("apt-mark unhold cuda-toolkit-12-4", "STK-002"),
        "nvidia_gds": ("modprobe -r nvidia_fs", "MOD-001"),
        "nvidia_container_toolkit": ("apt-mark unhold nvidia-container-toolkit", "STK-002"),
        "dcgm": ("apt-mark unhold datacenter-gpu-manager", "STK-002"),
        "roce_qos": ("mlnx_qos -i enp26s0np0 --trust pcp", "NIC-002"),
        "nvidia_mig": ("nvidia-smi mig -i 0 -dci && nvidia-smi mig -i 0 -dgi", "MIG-001"),
    }
    # GPUBOOT_ROLE_NEEDS and the verifier's -k of the eleven molecule/<role>/molecule.yml
    then = [r for r in table.roles if r.name in _ROLES_THEN]
    assert {r.name: (" ".join(r.needs), " or ".join(r.rules)) for r in then} == {
        "cuda_toolkit": ("gpuboot_apt_repo", "STK-002"),
        "dcgm": ("gpuboot_apt_repo nvidia_driver nvidia_fabricmanager", "STK-002 or DCG-001"),
        "doca_ofed": ("gpuboot_apt_repo", "STK-002 or NIC-001"),
        "gpuboot_baseline": ("", "STK-003"),
        "nvidia_container_toolkit": ("gpuboot_apt_repo", "STK-002"),
        "nvidia_driver": (
            "gpuboot_apt_repo",
            "STK-001 or STK-002 or GPU-001 or GPU-002 or MOD-001",
        ),
        "nvidia_fabricmanager": ("gpuboot_apt_repo nvidia_driver", "STK-002 or FAB-001"),
        "nvidia_gds": ("gpuboot_apt_repo doca_ofed nvidia_driver", "STK-002 or MOD-001"),
        "nvidia_mig": ("gpuboot_apt_repo nvidia_driver", "MIG-001"),
        "nvidia_peermem": ("gpuboot_apt_repo doca_ofed nvidia_driver", "MOD-001"),
        "roce_qos": ("gpuboot_apt_repo doca_ofed", "NIC-002 or NIC-003"),
    }


# The supersede lists the roles spelled by hand before the table's families reached them
# (roles/*/vars|tasks at 564ca3f): role -> OS family -> patterns (re.fullmatch).
_OLD_SUPERSEDE = {
    "nvidia_driver": {
        "debian": ["(nvidia-driver|nvidia-dkms|nvidia-utils|nvidia-compute-utils)-[0-9]+(-open)?"],
        "redhat": ["kmod-nvidia-(open|latest)-dkms"],
    },
    "nvidia_driver_fm_profile": {
        "redhat": [
            "kmod-nvidia-(open|latest)-dkms",
            "nvidia-fabric-?manager(-[0-9]+)?",
            "libnvidia-nscq(-[0-9]+)?",
        ],
    },
    "nvidia_fabricmanager": {
        "debian": ["(nvidia-fabricmanager|libnvidia-nscq)-[0-9]+", "nvidia-fabric-manager"],
        "redhat": ["nvidia-fabric-?manager(-[0-9]+)?", "libnvidia-nscq(-[0-9]+)?"],
    },
    "cuda_toolkit": {f: ["cuda-toolkit-[0-9]+-[0-9]+"] for f in ("debian", "redhat")},
    "nvidia_gds": {f: ["nvidia-gds-[0-9]+-[0-9]+"] for f in ("debian", "redhat")},
    "dcgm": {f: ["datacenter-gpu-manager(-4-core|-4-cuda[0-9]+)?"] for f in ("debian", "redhat")},
}


def _new_supersede(role: str, family: str) -> list[str]:
    v = table_vars(family)
    return {
        "nvidia_driver": v["nvidia_driver_supersede"],
        "nvidia_driver_fm_profile": v["nvidia_driver_supersede"]
        + v["nvidia_fabricmanager_supersede"]
        + v["nvidia_nscq_supersede"],
        "nvidia_fabricmanager": v["nvidia_fabricmanager_supersede"] + v["nvidia_nscq_supersede"],
        "cuda_toolkit": v["cuda_toolkit_supersede"],
        "nvidia_gds": v["nvidia_fs_supersede"],
        "dcgm": v["dcgm_supersede"],
    }[role]


def test_derived_supersede_patterns_remove_what_the_roles_removed():
    names = _package_names() | {"nvidia-fabric-manager", "libnvidia-nscq-570", "linux-generic"}
    for role, families in _OLD_SUPERSEDE.items():
        for family, old in families.items():
            new = _new_supersede(role, family)
            matched = {n for n in names if any(re.fullmatch(p, n) for p in new)}
            assert matched == {n for n in names if any(re.fullmatch(p, n) for p in old)}, (
                role,
                family,
            )
    assert "kernel_supersede" not in table_vars("debian")  # old kernels stay installed


def test_derived_required_modules():
    from types import SimpleNamespace

    from gpuboot.checks.stack_rules import required_modules

    def ctx(nics, **enabled):
        return SimpleNamespace(enabled=lambda var: enabled.get(var, False), hardware={"nics": nics})

    every = ctx(
        ["mlx5_0"], nvidia_peermem_enabled=True, nvidia_fs_enabled=True, doca_ofed_enabled=True
    )
    assert set(required_modules(every)) == {"nvidia", "nvidia_peermem", "nvidia_fs", "mlx5_ib"}
    assert required_modules(ctx([], doca_ofed_enabled=True)) == ["nvidia"]
    assert required_modules(ctx(["mlx5_0"], nvidia_fs_enabled=True)) == ["nvidia", "nvidia_fs"]
