"""SKU profiles: every shipped one loads; bad names and files raise ConfigError with a hint."""

from __future__ import annotations

import pytest
import yaml

from gpuboot.errors import ConfigError
from gpuboot.profiles import PROFILE_DIR, list_profiles, load_profile

SHIPPED = ["a100-sxm4-8gpu", "hgx-h100-sxm-8gpu", "hgx-h200-sxm-8gpu", "l40s-pcie-4gpu"]


def test_list_profiles():
    assert list_profiles() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_are_consistent(name):
    p = load_profile(name)
    assert p["name"] == name
    gpu, nvl = p["hardware"]["gpu"], p["hardware"]["nvlink"]
    assert len(gpu["pci_bus_ids"]) == gpu["count"]
    assert len({n["hca"] for n in p["hardware"]["nics"]}) == len(p["hardware"]["nics"])
    assert 0 < p["bandwidth"]["fail_below"] < p["bandwidth"]["warn_below"] < 1
    if nvl["links_per_gpu"]:
        assert nvl["nvswitch_count"] > 0 and nvl["link_speed_gbps"] > 0


def test_real_names_and_link_speeds():
    assert load_profile("a100-sxm4-8gpu")["hardware"]["nvlink"]["link_speed_gbps"] == 25
    assert load_profile("a100-sxm4-8gpu")["hardware"]["nvlink"]["links_per_gpu"] == 12
    assert load_profile("hgx-h100-sxm-8gpu")["hardware"]["nvlink"]["link_speed_gbps"] == 26.562
    l40s = load_profile("l40s-pcie-4gpu")["hardware"]
    assert l40s["nvlink"]["links_per_gpu"] == 0 and l40s["mig"]["supported"] is False


def test_unknown_name_lists_known_ones():
    with pytest.raises(ConfigError) as exc:
        load_profile("dgx-b300")
    assert "hgx-h100-sxm-8gpu" in exc.value.hint
    assert exc.value.exit_code == 2


def test_missing_key_names_file_and_key(tmp_path):
    p = load_profile("hgx-h100-sxm-8gpu")
    del p["hardware"]["gpu"]["vbios"]
    f = tmp_path / "x.yaml"
    f.write_text(yaml.safe_dump(p))
    with pytest.raises(ConfigError) as exc:
        load_profile(f)
    assert exc.value.where == f"{f}: hardware.gpu.vbios"


def test_wrong_type_and_bad_yaml(tmp_path):
    p = load_profile("l40s-pcie-4gpu")
    p["hardware"]["gpu"]["count"] = "four"
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(p))
    with pytest.raises(ConfigError, match=r"hardware\.gpu\.count must be an integer"):
        load_profile(f)
    f.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_profile(f)


def test_mig_profiles_required_when_supported(tmp_path):
    p = load_profile("a100-sxm4-8gpu")
    p["hardware"]["mig"]["profiles"] = []
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(p))
    with pytest.raises(ConfigError) as exc:
        load_profile(f)
    assert exc.value.where.endswith("hardware.mig.profiles")


def test_missing_file_path():
    with pytest.raises(ConfigError, match="does not exist"):
        load_profile("/nonexistent/p.yaml")


def test_a_loaded_profile_is_the_callers_own_and_follows_the_file(tmp_path):
    # load_profile keeps what it parsed (evaluate reads one profile per node): a caller's
    # change must not reach the next caller, and an edited file must be read again.
    first = load_profile("hgx-h100-sxm-8gpu")
    first["hardware"]["gpu"]["count"] = 0
    assert load_profile("hgx-h100-sxm-8gpu")["hardware"]["gpu"]["count"] == 8
    f = tmp_path / "edited.yaml"
    doc = yaml.safe_load((PROFILE_DIR / "hgx-h100-sxm-8gpu.yaml").read_text())
    f.write_text(yaml.safe_dump(doc))
    assert load_profile(f)["hardware"]["gpu"]["model"] == "NVIDIA H100 80GB HBM3"
    doc["hardware"]["gpu"]["model"] = "NVIDIA H100 edited"
    f.write_text(yaml.safe_dump(doc) + "# edited\n")  # another size, whatever the mtime
    assert load_profile(f)["hardware"]["gpu"]["model"] == "NVIDIA H100 edited"
