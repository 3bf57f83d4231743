"""MIG on a 1-node HGX H100 lab (role nvidia_mig): a layout that cannot exist is refused
before the node is touched; install applies one (MIG mode per GPU, GPU instances with
their compute instances), a re-run changes nothing, drift is reported by --check and
repaired by install, a reboot (instances are volatile) is answered by the boot unit, and
MIG goes off again on request. One lab, tests run in file order."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from gpuboot import certify as certify_mod
from gpuboot_lab import lab as labmod

from .conftest import gpuboot, reboot_markers, ssh_ok

pytestmark = pytest.mark.lab
LAYOUT = {"instances": ["1g.10gb", "3g.40gb", "2g.20gb", "1g.10gb"], "gpus": [0, 1]}
WANT = Counter(LAYOUT["instances"])
APPLY = "MIG-010 | PATCH | Apply the MIG layout"


@pytest.fixture(scope="module")
def lab(make_lab) -> labmod.Lab:
    return make_lab(nodes=1)


def set_mig(lab, value) -> None:
    inventory = yaml.safe_load(lab.inventory.read_text())
    inventory["all"]["vars"]["gpuboot_mig"] = value
    lab.inventory.write_text(yaml.safe_dump(inventory, sort_keys=False))


def install(lab, *flags: str, rc: int = 0) -> dict:
    proc = gpuboot("install", "-i", str(lab.inventory), "--json", *flags)
    assert proc.returncode == rc, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    return doc if rc == 2 else doc["hosts"]["node1"]


def mig_state(lab) -> tuple[dict[int, str], dict[int, Counter]]:
    """(GPU -> "current/pending" MIG mode, GPU -> GPU instance profiles) read on the node."""
    modes = ssh_ok(
        lab,
        "nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv,noheader",
    )
    mode = {int(i): f"{c}/{p}" for i, c, p in (ln.split(", ") for ln in modes.splitlines())}
    rows = ssh_ok(lab, "nvidia-smi mig -lgi || true").splitlines()
    instances: dict[int, Counter] = {}
    for row in rows:
        f = row.split()
        if len(f) > 3 and f[0] == "|" and f[2] == "MIG":
            instances.setdefault(int(f[1]), Counter())[f[3]] += 1
    return mode, instances


def mig_finding(lab) -> dict:
    """certify's MIG-001 finding for node1 (state checks only)."""
    report = certify_mod.certify(str(lab.inventory), probes="none").to_dict()
    node = next(n for n in report["nodes"] if n["host"] == "node1")
    return next(f for f in node["findings"] if f["rule"] == "MIG-001")


def passes_mig_001(lab) -> bool:
    found = mig_finding(lab)
    return (found["status"], found["reason"]) == ("PASS", "ok")  # judged, not skipped


def assert_layout(lab, gpus=(0, 1)) -> None:
    mode, instances = mig_state(lab)
    assert mode == {i: "Enabled/Enabled" if i in gpus else "Disabled/Disabled" for i in range(8)}
    assert instances == {i: WANT for i in gpus}


def test_layout_that_cannot_exist_is_refused_before_the_node_is_touched(lab):
    set_mig(lab, {"instances": ["7g.80gb", "1g.10gb"]})
    err = install(lab, rc=2)["error"]
    assert "do not fit on one GPU" in err["message"]
    assert err["where"].endswith("node1.gpuboot_mig")
    assert ssh_ok(lab, "test -e /usr/local/sbin/gpuboot-mig-apply || echo absent") == "absent\n"


def test_install_applies_the_layout(lab):
    set_mig(lab, LAYOUT)
    result = install(lab)
    assert APPLY in result["changes"]
    assert_layout(lab)
    assert ssh_ok(lab, "systemctl is-enabled gpuboot-mig.service") == "enabled\n"
    assert passes_mig_001(lab)


def test_a_second_run_changes_nothing(lab):
    assert install(lab, "--full")["changed"] == 0


def test_drift_is_reported_by_check_then_repaired(lab):
    # An operator destroys one instance on GPU 1 and asks for MIG on GPU 5 (pending).
    ssh_ok(lab, "nvidia-smi mig -i 1 -dci -gi 1 && nvidia-smi mig -i 1 -dgi -gi 1")
    ssh_ok(lab, "nvidia-smi -i 5 -mig 1")
    drifted = mig_state(lab)
    found = mig_finding(lab)
    assert found["status"] == "FAIL", found
    assert "GPU 1: instances" in found["reason"] and "GPU 5: MIG mode" in found["reason"]
    checked = install(lab, "--check")
    assert checked["changes"] == [APPLY]
    assert mig_state(lab) == drifted  # --check changed nothing
    assert APPLY in install(lab)["changes"]
    assert_layout(lab)
    assert passes_mig_001(lab)


def test_reboot_loses_the_instances_and_the_boot_unit_makes_them_again(lab):
    gpuboot("lab", "reboot", "--name", lab.name, "node1", check_rc=0)
    # sshd can be up before the boot unit is done: `start` waits for its run to finish.
    ssh_ok(lab, "systemctl start gpuboot-mig.service")
    assert "GPU 1: instances none -> " in ssh_ok(lab, "journalctl -b -u gpuboot-mig -o cat")
    assert_layout(lab)
    assert install(lab)["changed"] == 0


def test_a_gpu_in_use_gets_its_mode_at_the_next_reboot(lab):
    # A process left on GPU 6 refuses the reset a MIG mode change needs (the persistence
    # daemon is stopped around it, the process is not gpuboot's to kill).
    gpuboot("lab", "fault", "--name", lab.name, "node1", "gpu-process", "6", check_rc=0)
    set_mig(lab, {**LAYOUT, "gpus": [0, 1, 6]})
    assert APPLY in install(lab)["changes"]
    assert reboot_markers(lab) == ["/run/reboot-required.gpuboot-mig"]
    mode, instances = mig_state(lab)
    assert mode[6] == "Disabled/Enabled" and 6 not in instances
    assert "GPU 6 MIG mode Enabled pending" in ssh_ok(lab, "cat /run/reboot-required.gpuboot-mig")
    assert ssh_ok(lab, "systemctl is-active nvidia-persistenced") == "active\n"  # restarted
    found = mig_finding(lab)
    assert found["status"] == "FAIL" and "GPU 6: MIG mode Disabled, want Enabled" in found["reason"]
    # The reboot ends the process and applies the mode; the boot unit creates the instances.
    install(lab, "--allow-reboot")
    assert reboot_markers(lab) == []
    ssh_ok(lab, "systemctl start gpuboot-mig.service")
    assert_layout(lab, gpus=(0, 1, 6))
    assert passes_mig_001(lab)


def test_mig_off_on_request(lab):
    set_mig(lab, {"instances": []})
    assert APPLY in install(lab)["changes"]
    mode, instances = mig_state(lab)
    assert set(mode.values()) == {"Disabled/Disabled"} and instances == {}
