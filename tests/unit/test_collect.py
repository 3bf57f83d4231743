"""The one-round-trip collection script, run for real by a local shell."""

import subprocess

import pytest

from gpuboot.bundle.store import read_host_bundle, write_host_bundle
from gpuboot.collect import PROBES, script, unpack

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


def test_script_returns_every_probe_with_exact_stdout_and_rc(tmp_path):
    out = subprocess.run(
        ["sh", "-c", script(procfs=str(tmp_path))], capture_output=True, text=True, check=True
    )
    evidence = unpack(out.stdout.strip())
    assert set(evidence) == {p.file for p in PROBES}
    # nvidia-smi does not exist on this machine: the shell's 127, not a fake result
    assert evidence["nvidia-smi_-q.txt"].rc == 127
    assert evidence["proc_driver_nvidia_version.txt"].rc != 0  # no such file under tmp_path


def test_probe_stdout_is_kept_byte_for_byte(tmp_path):
    (tmp_path / "driver" / "nvidia").mkdir(parents=True)
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "\n"
    )
    (tmp_path / "driver" / "nvidia" / "version").write_text(text)
    out = subprocess.run(
        ["sh", "-c", script(procfs=str(tmp_path))], capture_output=True, text=True, check=True
    )
    evidence = unpack(out.stdout.strip())
    assert evidence["proc_driver_nvidia_version.txt"].stdout == text
    assert evidence["proc_driver_nvidia_version.txt"].rc == 0

    write_host_bundle(tmp_path / "bundle" / "n1", evidence, {"profile": "p"})
    back, meta = read_host_bundle(tmp_path / "bundle" / "n1")
    assert back == evidence
    assert meta["profile"] == "p"
