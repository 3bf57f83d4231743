"""Escalation over time on a 1-node lab: the same Xid on the same GPU,
injected with the emulator's fault tooling at every boot, scanned before each of two reboots
and after them. Its recommended action stays the Xid's own (reset/reboot) through the first
reboot and turns into hardware inspection / RMA after the second: in the report, the
node_exporter textfile and the node's labels (a fake Kubernetes API server). The node's
timeline (`gpuboot status node1 --history`) then tells that story in order: its
certification, the fault, the scans that saw it, the reboots, the escalation, the clearing
and the release."""

from __future__ import annotations

import json

import pytest

from gpuboot_lab import lab as labmod
from gpuboot_lab.kubeapi import FakeApiServer, node

from .conftest import gpuboot

pytestmark = pytest.mark.lab
RMA = "hardware inspection / RMA"
LABEL = "gpuboot.io/recommended-action"


@pytest.fixture(scope="module")
def lab(make_lab) -> labmod.Lab:
    lab = make_lab(nodes=1)
    gpuboot("install", "-i", str(lab.inventory), "-q", check_rc=0)  # the driver logs Xids
    return lab


def _scan(lab, tmp_path, kubeconfig, codes=(1, 4, 5)) -> tuple[int, dict]:
    proc = gpuboot(
        "scan", "-i", str(lab.inventory), "--json", "--history", str(tmp_path / "h.jsonl"),
        "--textfile-dir", str(tmp_path), "--kubeconfig", str(kubeconfig),
    )  # fmt: skip
    assert proc.returncode in codes, proc.stderr[-3000:]  # 4: a rule not judged
    (n,) = json.loads(proc.stdout)["nodes"]
    return proc.returncode, n


def test_the_same_xid_back_after_two_reboots_recommends_rma(lab, tmp_path):
    server = FakeApiServer().start()
    try:
        server.add(node("node1"))
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        certified = gpuboot("certify", "-i", str(lab.inventory), "--probes", "none", "--json")
        assert certified.returncode in (0, 1), certified.stderr[-3000:]
        certify_run = json.loads(certified.stdout)["run_id"]
        seen = []
        for boot in range(3):
            if boot:
                gpuboot("lab", "reboot", "--name", lab.name, "node1", check_rc=0)
            gpuboot("lab", "fault", "--name", lab.name, "node1", "xid", "79", "0", check_rc=0)
            rc, n = _scan(lab, tmp_path, kubeconfig)
            xid = next(f for f in n["findings"] if f["rule"] == "XID-001")
            labels = server.nodes["node1"]["metadata"].get("labels") or {}
            prom = (tmp_path / "gpuboot-scan.prom").read_text()
            seen.append((rc, bool(n["escalations"]), xid["action"], labels.get(LABEL), prom))
        # the reboot that clears the Xid from the kernel log does not mend the part: the
        # escalation stays open until an operator releases the node
        gpuboot("lab", "reboot", "--name", lab.name, "node1", check_rc=0)
        rc, n = _scan(lab, tmp_path, kubeconfig, codes=(0, 4, 5))
        labels = server.nodes["node1"]["metadata"].get("labels") or {}
        prom = (tmp_path / "gpuboot-scan.prom").read_text()
        assert [e["fault"] for e in n["escalations"]] and labels.get(LABEL)
        assert 'gpuboot_scan_escalated_faults{host="node1"} 1' in prom
        gpuboot(
            "node", "release", "node1", "--reason", "GPU reseated", "--history",
            str(tmp_path / "h.jsonl"), "--kubeconfig", str(kubeconfig), check_rc=0,
        )  # fmt: skip
        rc, n = _scan(lab, tmp_path, kubeconfig, codes=(0, 4, 5))
        assert n["escalations"] == []
        assert (
            'gpuboot_scan_escalated_faults{host="node1"} 0'
            in (tmp_path / "gpuboot-scan.prom").read_text()
        )
    finally:
        server.stop()
    records = [json.loads(line) for line in (tmp_path / "h.jsonl").read_text().splitlines()]
    boots = [r["boot_id"] for r in records if "boot_id" in r][:3]
    assert len(set(boots)) == 3 and None not in boots  # each reboot shows as a new boot id
    # new at first, then nothing new (still failing, or a rule the lab cannot judge)
    assert seen[0][0] == 1 and seen[1][0] in (4, 5)
    for _rc, escalated, action, label, prom in seen[:2]:  # first boot, after the first reboot
        assert xid_is_failing(action) and not escalated and RMA not in action and label is None
        assert 'gpuboot_scan_escalated_faults{host="node1"} 0' in prom
    rc, escalated, action, label, prom = seen[2]  # after the second reboot
    assert escalated and action.startswith(f"{RMA}: Xid 79 on GPU") and "2 reboots" in action
    assert label == "hardware-inspection-rma" and rc == 1  # new: a scheduler is told
    assert 'gpuboot_scan_escalated_faults{host="node1"} 1' in prom
    _timeline_tells_the_story(tmp_path / "h.jsonl", certify_run)


def _timeline_tells_the_story(history, certify_run: str) -> None:
    """certify, the fault, the scans that saw it, the reboots and escalation, the scan
    where it cleared, the release, in that order (the runs root is shared with other lab
    modules: the story starts at this module's certify)."""
    proc = gpuboot("status", "node1", "--history", str(history), "--json", check_rc=0)
    entries = json.loads(proc.stdout)["entries"]
    start = next(i for i, e in enumerate(entries) if e["run_id"] == certify_run)
    story = [(e["kind"], e["summary"]) for e in entries[start:]]
    kinds = [k for k, _s in story]
    assert kinds[0] == "certify"
    fault = kinds.index("fault")
    assert story[fault][1].startswith("xid:79@")
    assert story[fault + 1][0] == "scan" and "XID-001" in _part(story[fault + 1][1], "new")
    saw = [i for i, (k, s) in enumerate(story) if k == "scan" and "XID-001" in _part(s, "still")]
    reboots = [i for i, k in enumerate(kinds) if k == "rebooted"]
    assert len(reboots) == 3 and reboots[0] < saw[0] and reboots[1] < saw[1]  # each boot seen
    escalation = kinds.index("escalation")
    cleared = next(
        i for i, (k, s) in enumerate(story) if k == "scan" and "XID-001" in _part(s, "cleared")
    )
    released = kinds.index("released")
    assert fault < reboots[0] < escalation < reboots[2] < cleared < released
    assert story[released][1].startswith("released by ") and "GPU reseated" in story[released][1]
    # another lab module's install of its own node1 may land here (the runs root is
    # shared while the lab tier runs two modules at once): only this story's kinds count
    assert [k for k in kinds[released + 1 :] if k != "install"] == ["scan"]


def _part(summary: str, key: str) -> list[str]:
    """The rules a scan entry's summary lists under ``key`` ("FAIL; new: A B; still: C")."""
    found = [p.split(": ", 1)[1] for p in summary.split("; ") if p.startswith(f"{key}: ")]
    return found[0].split() if found else []


def xid_is_failing(action: str) -> bool:
    """The finding's own action: the Xid catalogue's advice for Xid 79 (reboot)."""
    return action.startswith("Xid 79")
