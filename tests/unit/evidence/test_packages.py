"""dpkg-query / apt-mark showhold parsing on real captures from a lab node (real dpkg and
apt; see tests/fixtures/captures/SOURCES-extra.md)."""

from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.packages import (
    UU_BLACKLIST,
    installed_versions,
    parse_apt_config_list,
    parse_dpkg_query,
    parse_showhold,
)


def test_converged_node_lists_held_stack_packages(read):
    packages = parse_dpkg_query(read("dpkg/dpkg-query_-W.converged.txt"))
    assert len(packages) == 172
    utils = packages["nvidia-utils-550"]
    assert (utils.version, utils.installed, utils.held) == ("550.54.15-1", True, True)
    assert packages["datacenter-gpu-manager"].version == "1:3.3.9"  # the epoch is kept
    assert not packages["openssh-server"].held and packages["openssh-server"].installed
    held = parse_showhold(read("dpkg/apt-mark_showhold.converged.txt"))
    assert held == {p.name for p in packages.values() if p.held}
    assert "nvidia-utils-550" in held and "openssh-server" not in held


def test_drifted_node_shows_removed_and_unheld(read):
    packages = parse_dpkg_query(read("dpkg/dpkg-query_-W.drifted.txt"))
    base = packages["nvidia-container-toolkit-base"]  # removed, configuration kept: "rc "
    assert (base.want, base.state, base.installed) == ("r", "c", False)
    assert "nvidia-container-toolkit" not in packages  # purged outright
    versions = installed_versions(read("dpkg/dpkg-query_-W.drifted.txt"))
    assert "nvidia-container-toolkit-base" not in versions
    assert versions["datacenter-gpu-manager"] == "1:3.3.9"
    assert "datacenter-gpu-manager" not in parse_showhold(
        read("dpkg/apt-mark_showhold.drifted.txt")
    )


def test_showhold_drops_the_architecture_qualifier():
    assert parse_showhold("libnvidia-compute-550:i386\nnvidia-utils-550\n\n") == {
        "libnvidia-compute-550",
        "nvidia-utils-550",
    }


@pytest.mark.parametrize("text", ["nvidia-utils-550 550.54.15-1 ii", "nvidia-utils-550\t550\ti"])
def test_unreadable_line_is_a_parse_error(text):
    with pytest.raises(ParseError, match="dpkg-query"):
        parse_dpkg_query(text)


def test_apt_config_list_from_a_converged_node(read):
    text = read("dpkg/apt-config_dump_Unattended-Upgrade.converged.txt")
    patterns = parse_apt_config_list(text, UU_BLACKLIST)
    assert patterns[:2] == ["^nvidia-", "^libnvidia-"] and "^datacenter-gpu-manager" in patterns
    assert parse_apt_config_list(text, "Unattended-Upgrade::Package-Whitelist") == []
    assert parse_apt_config_list("", UU_BLACKLIST) == []  # the config file gone


def test_unreadable_apt_config_entry_is_a_parse_error():
    with pytest.raises(ParseError, match="apt-config"):
        parse_apt_config_list(f"{UU_BLACKLIST}:: ^nvidia-\n", UU_BLACKLIST)
