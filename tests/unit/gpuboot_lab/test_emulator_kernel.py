"""Kernel side of the emulator: modules, /proc + /sys files, the kernel log."""

from __future__ import annotations

import re

import pytest

from tests.unit.gpuboot_lab._emu import DRIVER, EmuNode, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


@pytest.fixture
def node(tmp_path) -> EmuNode:
    return make_node(tmp_path)


def test_boot_autoloads_installed_modules_and_nic_stack(node):
    out = node.run("lsmod", check=True).out.splitlines()
    assert out[0] == "Module                  Size  Used by"
    names = [line.split()[0] for line in out[1:]]
    assert {"nvidia", "nvidia_uvm", "nvidia_modeset", "mlx5_core", "mlx5_ib"} <= set(names)
    # kmod's layout: name padded to 19, size right-aligned in 8, then use count and holders
    line = next(x for x in out if x.startswith("nvidia "))
    assert re.fullmatch(r"nvidia {14}\s*\d+  2 nvidia_\w+,nvidia_\w+", line)


def test_modprobe_missing_module_fails_like_kmod(node):
    res = node.run("modprobe", "nvidia_peermem")
    assert res.rc == 1
    assert re.fullmatch(
        r"modprobe: FATAL: Module nvidia_peermem not found in directory "
        r"/lib/modules/\S+\n",
        res.err,
    )


def test_modprobe_loads_dependencies_first(tmp_path):
    node = make_node(tmp_path, driver=False)
    node.install_driver()
    node.run("modprobe", "nvidia-uvm", check=True)
    mods = node.status()["modules"]
    assert mods["nvidia"] == DRIVER and mods["nvidia_uvm"] == DRIVER
    assert node.read("/run/gpuemu/sys/module/nvidia/version") == DRIVER + "\n"
    version = node.read("/run/gpuemu/proc/driver/nvidia/version")
    assert version.startswith(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}")
    assert "GCC version:" in version


def test_proprietary_flavor_proc_version_text(tmp_path):
    node = make_node(tmp_path, driver=False)
    node.install_driver(flavor="proprietary")
    node.run("modprobe", "nvidia", check=True)
    assert node.read("/run/gpuemu/proc/driver/nvidia/version").startswith(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {DRIVER}  "
    )


def test_modprobe_keeps_an_already_loaded_other_version(node):
    node.install_driver("550.90.07")  # package upgrade without reboot
    node.run("modprobe", "nvidia", check=True)
    assert node.status()["modules"]["nvidia"] == DRIVER
    assert node.run("modinfo", "-F", "version", "nvidia", check=True).out == "550.90.07\n"
    assert node.read("/run/gpuemu/sys/module/nvidia/version") == DRIVER + "\n"


def test_rmmod_refuses_while_held(node):
    res = node.run("rmmod", "nvidia")
    assert res.rc == 1
    assert res.err.startswith("rmmod: ERROR: Module nvidia is in use by: nvidia_")
    node.run("rmmod", "nvidia_uvm", check=True)
    node.run("rmmod", "nvidia_modeset", check=True)
    node.run("nvidia-smi", "-pm", "1", check=True)
    res = node.run("rmmod", "nvidia")
    assert (res.rc, res.err) == (1, "rmmod: ERROR: Module nvidia is in use\n")
    res = node.run("modprobe", "-r", "nvidia")
    assert (res.rc, res.err) == (1, "modprobe: FATAL: Module nvidia is in use.\n")
    node.run("nvidia-smi", "-pm", "0", check=True)
    node.run("rmmod", "nvidia", check=True)
    assert not node.exists("/run/gpuemu/proc/driver/nvidia/version")
    assert not node.exists("/run/gpuemu/sys/module/nvidia")
    res = node.run("rmmod", "nvidia")
    assert (res.rc, res.err) == (1, "rmmod: ERROR: Module nvidia is not currently loaded\n")


def test_modprobe_r_removes_unused_dependencies(node):
    node.run("rmmod", "nvidia_modeset", check=True)
    node.run("modprobe", "-r", "nvidia_uvm", check=True)
    assert "nvidia" not in node.status()["modules"]


def test_modinfo_layout_and_missing(node):
    out = node.run("modinfo", "nvidia", check=True).out
    assert re.search(r"^filename: {7}/lib/modules/\S+/updates/dkms/nvidia\.ko$", out, re.M)
    assert f"\nversion:        {DRIVER}\n" in out
    assert "\nlicense:        Dual MIT/GPL\n" in out
    res = node.run("modinfo", "nope")
    assert (res.rc, res.err) == (1, "modinfo: ERROR: Module nope not found.\n")


def test_dmesg_default_format_and_load_banner(node):
    out = node.run("dmesg", check=True).out
    lines = out.splitlines()
    assert all(re.match(r"\[ {0,4}\d+\.\d{6}\] ", x) or x.startswith(" " * 15) for x in lines)
    assert any(
        f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}" in x for x in lines
    )
    assert any("mlx5_core 0000:1a:00.0: firmware version: 28.39.1002" in x for x in lines)


def test_dmesg_time_formats(node):
    ctime = node.run("dmesg", "-T", check=True).out.splitlines()[0]
    assert re.match(r"\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\] Linux version", ctime)
    iso = node.run("dmesg", "--time-format", "iso", check=True).out.splitlines()[0]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}[+-]\d\d:\d\d Linux version", iso)
    dec = node.run("dmesg", "-x", check=True).out.splitlines()[0]
    assert dec.startswith("kern  :notice: [")


def test_xid_79_logged_and_multiline_records_indent(node):
    node.run("ctl", "fault", "add", "xid", "79", "2", check=True)
    out = node.run("dmesg", check=True).out
    assert re.search(
        r"^\[ *\d+\.\d{6}\] NVRM: Xid \(PCI:0000:4c:00\): 79, pid='<unknown>', "
        r"name=<unknown>, GPU has fallen off the bus\.$",
        out,
        re.M,
    )
    node.run("ctl", "boot", "--force", check=True)
    node.run("ctl", "fault", "add", "xid", "79", "2", "--survive-reboot", check=True)
    node.run("ctl", "boot", "--force", check=True)
    out = node.run("dmesg", check=True).out
    # at boot the driver's probe of a fallen GPU prints one multi-line record
    m = re.search(
        r"^(\[ *\d+\.\d{6}\] )NVRM: The NVIDIA GPU 0000:4c:00\.0\n( +)NVRM: \(PCI ID: "
        r"10de:2330\) installed in this system has\n +NVRM: fallen off the bus",
        out,
        re.M,
    )
    assert m and len(m.group(1)) == len(m.group(2))
    assert "nvidia: probe of 0000:4c:00.0 failed with error -1" in out


def test_dmesg_clear(node):
    node.run("dmesg", "-C", check=True)
    assert node.run("dmesg", check=True).out == ""


def test_boot_autoloads_hardware_drivers_modules_load_d_and_blacklist(tmp_path):
    node = EmuNode(tmp_path / "node", "hgx-h100-sxm-8gpu")
    node.install_driver()
    node.install_module("nvidia-drm", depends="nvidia,nvidia_modeset")
    node.install_module("nvidia-peermem", depends="nvidia,ib_core")
    node.install_module("nvidia-fs", depends="nvidia")
    node.install_module("gdrdrv", depends="nvidia", autoload="yes")
    (node.root / "etc/modprobe.d").mkdir(parents=True)
    (node.root / "etc/modprobe.d/blacklist.conf").write_text("blacklist nvidia_drm\n")
    node.run("ctl", "setup", check=True)
    mods = node.status()["modules"]
    # udev loads the drivers of present devices (and what the driver packages pull in)
    assert {"nvidia", "nvidia_uvm", "nvidia_modeset", "mlx5_ib", "gdrdrv"} <= set(mods)
    # optional modules need configuration, as on a real node
    assert not {"nvidia_peermem", "nvidia_fs", "nvidia_drm"} & set(mods)
    (node.root / "etc/modules-load.d").mkdir(parents=True)
    (node.root / "etc/modules-load.d/peermem.conf").write_text("# GPUDirect\nnvidia-peermem\n")
    node.run("ctl", "boot", "--force", check=True)
    assert "nvidia_peermem" in node.status()["modules"]
