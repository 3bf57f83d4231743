"""The documented sample inventory stays valid as the schema grows."""

from gpuboot.inventory import load_inventory
from gpuboot.profiles import load_profile
from tests.paths import REPO

SAMPLE = REPO / "inventory" / "sample.yml"


def test_sample_inventory_loads_and_names_known_profiles():
    inv = load_inventory(SAMPLE)
    assert sorted(inv.hosts) == ["gpu-h100-001", "gpu-h100-002", "gpu-l40s-001"]
    for hostvars in inv.hosts.values():
        load_profile(hostvars["gpuboot_profile"])
    assert inv.hosts["gpu-l40s-001"]["nvidia_driver_version"] == "570.133.20-1"
    # The MIG example is checked against the H100 profile and derived for the role.
    layout = inv.resolved("gpu-h100-002")["nvidia_mig_layout"]
    assert layout[:4] == [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]] * 4
    assert layout[4:] == [[]] * 4
    assert "nvidia_mig_layout" not in inv.resolved("gpu-h100-001")
