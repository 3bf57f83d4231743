"""gpuboot/components.yaml: every role's undo is given per OS family (the molecule matrix
runs each role on a Debian and an EL node of one lab), and a fault in it is a ConfigError
naming the file, the role and the family."""

from __future__ import annotations

import pytest
import yaml

from gpuboot.components import OS_FAMILIES, TABLE, load
from gpuboot.errors import ConfigError


def _write(tmp_path, edit):
    doc = yaml.safe_load(TABLE.read_text())
    edit(doc)
    path = tmp_path / "components.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


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
FAULTS = [
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


@pytest.mark.parametrize(("what", "edit", "key"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_in_an_undo_names_role_and_family(tmp_path, what, edit, key):
    path = _write(tmp_path, edit)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.where == f"components.yaml: {key}", (what, info.value.where)
    assert info.value.hint
