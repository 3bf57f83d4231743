"""EL nodes in an inventory: accepted (gpuboot_os_family redhat), their stack's role
variables in NVIDIA's RPM spelling with the driver's module stream, a bad EL driver pin
or stream refused with exit 2 before any host is touched, the mirror listing the stream."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuboot import matrix
from gpuboot.errors import ConfigError
from gpuboot.inventory import load_inventory

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

HOST = "n1: {ansible_host: 127.0.0.1, ansible_port: %d, gpuboot_os_family: redhat%s}"


def _inventory(tmp_path, port: int, host_extra: str, all_vars: str) -> str:
    path = tmp_path / "inventory.yml"
    path.write_text(
        f"all:\n  vars: {{gpuboot_profile: hgx-h100-sxm-8gpu{all_vars}}}\n"
        "  hosts:\n    " + HOST % (port, host_extra) + "\n"
    )
    return str(path)


def _untouched(sock) -> None:
    with pytest.raises(BlockingIOError):  # the listener is non-blocking: nothing connected
        sock.accept()


def test_an_el_stack_host_is_accepted_with_rpm_pins_and_the_stream(tmp_path, listener):
    path = _inventory(tmp_path, listener.getsockname()[1], "", ", gpuboot_stack: lts-550-cuda12.4")
    derived = load_inventory(path).resolved("n1")
    assert derived["nvidia_driver_module_stream"] == "nvidia-driver:550-open"
    assert "nvidia-driver-3:550.54.15-1.el9" in derived["nvidia_driver_packages"]
    assert derived["nvidia_fabricmanager_packages"] == ["nvidia-fabric-manager-550.54.15-1"]


def test_an_el_driver_pin_of_the_branch_is_accepted(tmp_path, listener):
    extra = ', nvidia_driver_branch: "550", nvidia_driver_version: "3:550.54.15-1.el9"'
    load_inventory(_inventory(tmp_path, listener.getsockname()[1], extra, ""))


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        # another branch's stream: dnf would hide the pinned packages
        (
            ', nvidia_driver_branch: "550", nvidia_driver_version: "3:550.54.15-1.el9", '
            'nvidia_driver_flavor: open, nvidia_driver_module_stream: "nvidia-driver:570-open"',
            "n1.nvidia_driver_module_stream",
            "not driver branch 550's",
        ),
        # a stream that names no flavour NVIDIA publishes
        (
            ', nvidia_driver_branch: "550", nvidia_driver_version: "3:550.54.15-1.el9", '
            'nvidia_driver_module_stream: "nvidia-driver:550-turbo"',
            "n1.nvidia_driver_module_stream",
            "nvidia-driver:550-dkms",
        ),
        # an EL version needs its release (dnf installs name-[epoch:]version-release)
        (
            ', nvidia_driver_branch: "550", nvidia_driver_version: "1:550.54.15"',
            "n1.nvidia_driver_version",
            "3:550.54.15-1.el9",
        ),
    ],
)
def test_a_bad_el_driver_pin_is_exit_2_before_any_host(tmp_path, listener, extra, key, words):
    path = _inventory(tmp_path, listener.getsockname()[1], extra, "")
    with pytest.raises(ConfigError) as exc:
        load_inventory(path)
    assert key in exc.value.where and words in f"{exc.value.message} {exc.value.hint}"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", "install", "-i", path, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert key in json.loads(proc.stdout)["error"]["where"]
    _untouched(listener)


def test_the_el_mirror_lists_rpm_names_and_the_driver_stream():
    doc = matrix.mirror("lts-550-cuda12.4", "redhat")
    assert doc["module_streams"] == ["nvidia-driver:550-open"]
    names = {p["name"]: p["version"] for p in doc["packages"]}
    assert names["kmod-nvidia-open-dkms"] == "3:550.54.15-1.el9"
    assert names["nvidia-fabric-manager"] == "550.54.15-1"
    assert "module_streams" not in matrix.mirror("lts-550-cuda12.4", "debian")
