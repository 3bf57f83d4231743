"""The lab's modules.yaml declares NVIDIA's nvidia-driver profiles as NVIDIA's own repository
does (genmodules.py, NVIDIA/yum-packaging-precompiled-kmod): default = every driver package
of the branch with the stream's kmod, ks the same, fm = default + fabric manager + NSCQ."""

from __future__ import annotations

import yaml

from gpuboot_lab.catalogue import load_catalogue
from gpuboot_lab.rpmrepo import modules_yaml

DRIVER = [
    "nvidia-driver",
    "nvidia-driver-cuda",
    "nvidia-driver-cuda-libs",
    "nvidia-driver-libs",
    "nvidia-kmod-common",
    "nvidia-modprobe",
    "nvidia-persistenced",
]


def _streams() -> dict[str, dict]:
    docs = yaml.safe_load_all(modules_yaml(load_catalogue()))
    return {d["data"]["stream"]: d["data"] for d in docs if d}


def test_every_stream_has_nvidias_profiles_with_their_descriptions():
    streams = _streams()
    assert {"550-open", "550-dkms", "580-open"} <= set(streams)
    for name, data in streams.items():
        profiles = data["profiles"]
        assert list(profiles) == ["default", "ks", "fm"], name
        assert profiles["fm"]["description"] == "FabricManager installation"
        kmod = "kmod-nvidia-open-dkms" if name.endswith("-open") else "kmod-nvidia-latest-dkms"
        assert profiles["default"]["rpms"] == sorted([*DRIVER, kmod]), name
        assert profiles["ks"]["rpms"] == profiles["default"]["rpms"]
    # fm: default plus the branch's fabric manager and NSCQ
    extra = {
        "550-open": ["libnvidia-nscq-550", "nvidia-fabric-manager"],
        "580-open": ["libnvidia-nscq", "nvidia-fabricmanager"],  # R580 renamed them
    }
    for name, added in extra.items():
        profiles = streams[name]["profiles"]
        assert profiles["fm"]["rpms"] == sorted([*profiles["default"]["rpms"], *added])
