"""MIG layouts are checked against the SKU before any host is touched: unknown profiles,
too many instances, overlapping placements and bad GPU indexes are refused by name."""

from __future__ import annotations

import pytest

from gpuboot.errors import ConfigError
from gpuboot.mig import layout_vars
from gpuboot.profiles import load_profile

H100 = load_profile("hgx-h100-sxm-8gpu")
L40S = load_profile("l40s-pcie-4gpu")


def _layout(value, profile=H100):
    return layout_vars(value, profile, "inv.yml: n1.gpuboot_mig")["nvidia_mig_layout"]


def test_every_gpu_gets_the_instances_largest_first():
    got = _layout({"instances": ["1g.10gb", "3g.40gb", "1g.10gb", "2g.20gb"]})
    assert got == [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]] * 8


def test_gpus_not_selected_get_mig_off():
    got = _layout({"instances": ["7g.80gb"], "gpus": [1, 3]})
    assert got == [[], ["7g.80gb"], [], ["7g.80gb"], [], [], [], []]
    assert _layout({"instances": []}) == [[]] * 8
    assert _layout({"instances": []}, L40S) == [[]] * 4  # MIG off is fine anywhere


def test_the_most_constrained_profile_of_a_size_is_created_first():
    # 4g.40gb has one placement (0): created after 3g.40gb (which may take 0), it would not fit.
    assert _layout({"instances": ["3g.40gb", "4g.40gb"]})[0] == ["4g.40gb", "3g.40gb"]


@pytest.mark.parametrize(
    ("value", "profile", "expect"),
    [
        ({"instances": ["2g.99gb"]}, H100, "unknown MIG profile(s) 2g.99gb"),
        ({"instances": ["1g.10gb+me"] * 2}, H100, "1g.10gb+me x2 (at most 1)"),
        ({"instances": ["7g.80gb", "1g.10gb"]}, H100, "do not fit on one GPU"),
        ({"instances": ["4g.40gb", "4g.40gb"]}, H100, "4g.40gb x2 (at most 1)"),
        ({"instances": ["1g.10gb"] * 7 + ["1g.20gb"]}, H100, "do not fit on one GPU"),
        ({"instances": ["1g.10gb"], "gpus": [8]}, H100, "distinct GPU indexes 0-7"),
        ({"instances": ["1g.10gb"], "gpus": [0, 0]}, H100, "distinct GPU indexes 0-7"),
        ({"instances": ["1g.10gb"], "layout": 1}, H100, "unknown key 'layout'"),
        ({"instances": ["1g.24gb"]}, L40S, "does not support MIG"),
    ],
)
def test_bad_layout_is_refused_with_the_rule(value, profile, expect):
    with pytest.raises(ConfigError) as err:
        _layout(value, profile)
    assert expect in err.value.message
    assert err.value.where == "inv.yml: n1.gpuboot_mig"
    assert "gpuboot_mig: {instances:" in (err.value.hint or "")


@pytest.mark.parametrize("value", [["3g.40gb"], {"instances": "3g.40gb"}, {"gpus": "all"}])
def test_malformed_layout_names_the_key(value):
    with pytest.raises(ConfigError) as err:
        _layout(value)
    assert err.value.where.startswith("inv.yml: n1.gpuboot_mig")
