"""The package roles decide from one dpkg-query probe what apt must be asked for.

A converged node must need nothing: if a role's expressions misread the probe, every
re-run calls apt again (a round trip per role, and a wrong "missing" in --check).
Each role's own vars/main.yml is evaluated by real ansible-playbook on localhost
against a recorded probe of a converged node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuboot import paths

ROLES = paths.ROLES_DIR

# dpkg-query -W -f '${Package}\t${Version}\t${db:Status-Abbrev}\n' on a converged node:
# held ("hi "), plain installed ("ii ") and an old release removed with config left ("rc ").
PROBE = "\n".join(
    [
        "cuda-toolkit-12-4\t12.4.1-1\thi ",
        "cuda-toolkit-12-2\t12.2.2-1\trc ",
        "datacenter-gpu-manager\t1:3.3.9\thi ",
        "doca-ofed\t2.9.1-018000\thi ",
        "nvidia-container-toolkit\t1.17.8-1\thi ",
        "nvidia-driver-550\t550.54.15-1\thi ",
        "nvidia-dkms-550\t550.54.15-1\thi ",
        "nvidia-utils-550\t550.54.15-1\thi ",
        "nvidia-compute-utils-550\t550.54.15-1\thi ",
        "nvidia-fabricmanager-550\t550.54.15-1\thi ",
        "libnvidia-nscq-550\t550.54.15-1\thi ",
        "nvidia-fs\t2.20.5-1\thi ",
        "openssh-server\t1:9.2p1-2+deb12u3\tii ",
    ]
)

# role -> its inputs, pinning what the probe shows installed
CASES = {
    "cuda_toolkit": {"cuda_toolkit_packages": ["cuda-toolkit-12-4=12.4.1-1"]},
    "dcgm": {"dcgm_packages": ["datacenter-gpu-manager=1:3.3.9"]},
    "doca_ofed": {"doca_ofed_packages": ["doca-ofed=2.9.1-018000"]},
    "nvidia_container_toolkit": {
        "nvidia_container_toolkit_packages": ["nvidia-container-toolkit=1.17.8-1"]
    },
    "nvidia_driver": {
        "nvidia_driver_branch": "550",
        "nvidia_driver_flavor": "proprietary",
        "nvidia_driver_version": "550.54.15-1",
    },
    "nvidia_fabricmanager": {
        "nvidia_fabricmanager_packages": ["nvidia-fabricmanager-550=550.54.15-1"],
        "nvidia_fabricmanager_nscq_packages": ["libnvidia-nscq-550=550.54.15-1"],
    },
    "nvidia_gds": {"nvidia_gds_packages": ["nvidia-fs=2.20.5-1"]},
}


def play(role: str, inputs: dict, probe: str, out: Path) -> dict:
    """A play writing the role's __<role>_missing/_installed/_held, as Ansible renders
    them from ``probe``, to ``out`` as JSON."""
    prefix = f"__{role}_"
    reading = {k: f"{{{{ {prefix}{k} }}}}" for k in ("missing", "installed", "held")}
    return {
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": [str(ROLES / role / "vars" / "main.yml")],
        "vars": {
            **inputs,
            f"{prefix}dpkg": {"stdout_lines": probe.splitlines()},
            "reading": reading,
        },
        "tasks": [
            {
                "name": "Write the probe's reading",
                "ansible.builtin.copy": {"content": "{{ reading | to_json }}", "dest": str(out)},
            }
        ],
    }


def run_plays(plays: list[dict], tmp: Path) -> None:
    playbook = tmp / "playbook.yml"
    playbook.write_text(yaml.safe_dump(plays))
    bin_dir = Path(sys.executable).parent
    proc = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)],
        capture_output=True,
        text=True,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_LOCALHOST_WARNING": "False",
            "HOME": str(tmp),
        },
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def readings(tmp_path_factory) -> dict[str, dict]:
    # One ansible-playbook run for every role: a play per role.
    tmp = tmp_path_factory.mktemp("probe-vars")
    run_plays(
        [play(role, inputs, PROBE, tmp / f"{role}.json") for role, inputs in CASES.items()], tmp
    )
    return {role: json.loads((tmp / f"{role}.json").read_text()) for role in CASES}


@pytest.mark.parametrize("role", CASES)
def test_a_converged_node_needs_nothing_from_apt(readings, role):
    reading = readings[role]
    assert reading["missing"] == [], reading
    # installed reads back as name=version, exactly as the pins are written
    assert all("=" in pkg and "\\" not in pkg for pkg in reading["installed"]), reading
    assert "openssh-server=1:9.2p1-2+deb12u3" in reading["installed"]
    assert "cuda-toolkit-12-2=12.2.2-1" not in reading["installed"]  # removed, config left
    assert "openssh-server" not in reading["held"] and "cuda-toolkit-12-4" in reading["held"]


def test_a_pin_at_another_version_is_missing(tmp_path):
    inputs = {"cuda_toolkit_packages": ["cuda-toolkit-12-4=12.4.0-1"]}
    run_plays([play("cuda_toolkit", inputs, PROBE, tmp_path / "out.json")], tmp_path)
    assert json.loads((tmp_path / "out.json").read_text())["missing"] == [
        "cuda-toolkit-12-4=12.4.0-1"
    ]
