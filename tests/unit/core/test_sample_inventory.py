"""The documented sample inventory stays valid as the schema grows."""

from pathlib import Path

from gpuboot.inventory import load_inventory
from gpuboot.profiles import load_profile

SAMPLE = Path(__file__).parents[3] / "inventory" / "sample.yml"


def test_sample_inventory_loads_and_names_known_profiles():
    inv = load_inventory(SAMPLE)
    assert sorted(inv.hosts) == ["gpu-h100-001", "gpu-h100-002", "gpu-l40s-001"]
    for hostvars in inv.hosts.values():
        load_profile(hostvars["gpuboot_profile"])
    assert inv.hosts["gpu-l40s-001"]["nvidia_driver_version"] == "570.133.20-1"
