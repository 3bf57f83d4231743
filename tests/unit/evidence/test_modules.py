"""lsmod, /proc/driver/nvidia/version, modinfo: layouts as printed by the tools (no real
captures of these are in the corpus; values are illustrative)."""

from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.modules import parse_lsmod, parse_modinfo, parse_nvidia_version

_LSMOD = """\
Module                  Size  Used by
nvidia_peermem         16384  0
nvidia_uvm           4882432  0
nvidia_drm            122880  0
nvidia_modeset       1355776  1 nvidia_drm
nvidia              54145024  3 nvidia_uvm,nvidia_peermem,nvidia_modeset
ib_core               454656  4 rdma_cm,nvidia_peermem,ib_uverbs,mlx5_ib
"""


def test_lsmod():
    mods = parse_lsmod(_LSMOD)
    assert "nvidia_peermem" in mods and mods["nvidia"].use_count == 3
    assert mods["nvidia"].used_by == ("nvidia_uvm", "nvidia_peermem", "nvidia_modeset")
    assert mods["nvidia_uvm"].used_by == () and mods["nvidia_uvm"].size_bytes == 4882432


def test_proc_version_proprietary():
    v = parse_nvidia_version(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
    )
    assert (v.version, v.flavor, v.arch) == ("550.54.15", "proprietary", "x86_64")
    assert v.gcc.startswith("gcc version 12.3.0")


def test_proc_version_open():
    v = parse_nvidia_version(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:11:41 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
    )
    assert (v.version, v.flavor, v.arch) == ("550.54.15", "open", "x86_64")
    assert v.build.startswith("Release Build")


def test_modinfo():
    m = parse_modinfo(
        "filename:       /lib/modules/6.8.0-45-generic/updates/dkms/nvidia-peermem.ko.zst\n"
        "version:        550.54.15\n"
        "license:        Dual BSD/GPL\n"
        "srcversion:     1C1D5A2B0C4F9D3E8A7B6C5\n"
        "depends:        nvidia,ib_core\n"
        "name:           nvidia_peermem\n"
        "vermagic:       6.8.0-45-generic SMP preempt mod_unload modversions \n"
        "parm:           peerdirect_support:Set level of support (int)\n"
        "parm:           persistent_api_support:Set level of support (int)\n"
    )
    assert m.name == "nvidia_peermem" and m.version == "550.54.15"
    assert m.depends == ("nvidia", "ib_core") and m.vermagic.startswith("6.8.0-45-generic")
    assert len(m.fields["parm"]) == 2


@pytest.mark.parametrize("text", ["", "hello world\n", "Module Size Used by\n"])
def test_lsmod_garbage(text):
    with pytest.raises(ParseError):
        parse_lsmod(text)


@pytest.mark.parametrize("text", ["", "cat: /proc/driver/nvidia/version: No such file\n"])
def test_version_garbage(text):
    with pytest.raises(ParseError):
        parse_nvidia_version(text)


@pytest.mark.parametrize("text", ["", "modinfo: ERROR: Module nvidia_peermem not found.\n", "x\n"])
def test_modinfo_garbage(text):
    with pytest.raises(ParseError):
        parse_modinfo(text)
