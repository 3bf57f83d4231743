"""Escalation over time (gpud's reboot threshold): the same hardware fault on the same part,
back after N reboots (boot ids in the scan history), recommends hardware inspection / RMA in
the report, the textfile and the node labels; another GPU, the same boot scanned again, an
application Xid or a replaced GPU do not."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from gpuboot import certify, cli, escalation, scan
from gpuboot.bundle.model import ProbeOutput
from gpuboot.k8s import labels as L
from gpuboot.k8s.decision import decide
from gpuboot.report import prometheus
from gpuboot.results import RunReport

XID = "[ 12.5] NVRM: Xid (PCI:0000:{bus}:00): {code}, pid='<unknown>', name=<unknown>, {text}"
FELL = "GPU has fallen off the bus."
SXID = "[ 13.1] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 12028, Fatal, Link 46 egress error"


def _dmesg(*lines: str) -> str:
    return "[    0.000000] Linux version 6.1.0-27-amd64\n" + "\n".join(lines) + "\n"


def _evidence(boot: str | None, *lines: str) -> dict[str, ProbeOutput]:
    ev = {"dmesg.txt": ProbeOutput(_dmesg(*lines), "", 0)}
    if boot is not None:
        ev[escalation.BOOT_ID_FILE] = ProbeOutput(boot + "\n", "", 0)
    return ev


def xid(code: int, bus: str = "18", text: str = FELL) -> str:
    return XID.format(bus=bus, code=code, text=text)


def _history(*scans: escalation.Observation) -> escalation.FaultHistory:
    h = escalation.FaultHistory()
    for i, seen in enumerate(scans):
        found = escalation.escalations(seen, h)
        h.add(f"t{i}", seen.boot_id, seen.faults, [e.fault for e in found], seen.parts)
    return h


def test_a_hardware_xid_is_a_fault_of_its_gpu_and_an_application_xid_is_none():
    seen = escalation.observe(
        _evidence("b1", xid(79), xid(13, "19", "Graphics Exception"), xid(45, "1a", "Ch 0000000a"))
    )
    assert seen.boot_id == "b1" and list(seen.faults) == ["xid:79@0000:18:00"]
    chained = escalation.observe(_evidence("b1", xid(45, "1b", "caused by previous Xid 79")))
    assert list(chained.faults) == ["xid:79@0000:1b:00"]  # judged by the Xid it names
    assert list(escalation.observe(_evidence("b1", SXID)).faults) == ["sxid:12028@0000:c1:00.0"]


def test_the_same_xid_on_the_same_gpu_escalates_after_the_second_reboot_not_before():
    boots = [escalation.observe(_evidence(b, xid(79))) for b in ("b1", "b2", "b3")]
    assert escalation.escalations(boots[0], _history()) == []
    assert escalation.escalations(boots[1], _history(boots[0])) == []  # one reboot: reset/reboot
    (esc,) = escalation.escalations(boots[2], _history(*boots[:2]))
    assert esc.action == "hardware inspection / RMA" and esc.boots == 3
    assert esc.rule == "XID-001" and esc.first_seen == "t0" and esc.new is True
    # configurable: after one reboot already
    assert escalation.escalations(boots[1], _history(boots[0]), reboots=1) != []


def test_scans_of_the_same_boot_count_no_reboot():
    same = escalation.observe(_evidence("b1", xid(79)))
    assert escalation.escalations(same, _history(same, same, same, same)) == []


def test_the_xid_on_another_gpu_is_another_fault():
    on_18 = [escalation.observe(_evidence(b, xid(79, "18"))) for b in ("b1", "b2")]
    on_19 = escalation.observe(_evidence("b3", xid(79, "19")))
    assert escalation.escalations(on_19, _history(*on_18)) == []


def test_without_a_boot_id_no_reboot_is_counted():
    blind = [escalation.observe(_evidence(None, xid(79))) for _ in range(4)]
    assert escalation.escalations(blind[-1], _history(*blind[:-1])) == []


def test_a_replaced_gpu_starts_afresh():
    seen = [escalation.observe(_evidence(b, xid(79))) for b in ("b1", "b2", "b3")]
    old = [escalation.Observation(o.boot_id, o.faults, {"0000:18:00": "GPU-old"}) for o in seen]
    new = escalation.Observation("b3", seen[2].faults, {"0000:18:00": "GPU-new"})
    assert escalation.escalations(new, _history(*old[:2])) == []
    assert escalation.escalations(old[2], _history(*old[:2])) != []


# ---------------------------------------------------------------- through scan.scan
def _bundle_node(bundle, host: str, boot: str, *lines: str) -> dict:
    d = bundle / host
    d.mkdir(parents=True)
    for name, out in _evidence(boot, *lines).items():
        (d / name).write_text(out.stdout)
    finding = {"rule": "XID-001", "title": "no hardware Xid", "status": "FAIL",
               "reason": "Xid 79", "action": "Xid 79: reboot", "severity": "FAIL"}  # fmt: skip
    return {"host": host, "verdict": "FAIL", "findings": [finding], "measurements": []}


@pytest.fixture
def scans(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    count = iter(range(100))

    def do(boot: str, *lines: str, host: str = "n1") -> dict:
        bundle = tmp_path / f"bundle{next(count)}"
        node = _bundle_node(bundle, host, boot, *lines)
        report = {"run_id": "r", "run_dir": str(tmp_path), "bundle": str(bundle), "nodes": [node]}
        monkeypatch.setattr(certify, "certify", lambda *_a, **_k: RunReport.from_dict(report))
        return scan.scan(str(tmp_path / "inv.yml"), history=tmp_path / "h.jsonl")

    return do


def test_scan_turns_the_action_into_rma_in_report_textfile_and_labels(scans):
    for boot in ("b1", "b2"):
        (node,) = scans(boot, xid(79)).report.nodes
        assert node.escalations == () and "RMA" not in node.findings[0].action
    result = scans("b3", xid(79))
    (node,) = result.report.nodes
    assert node.recommended_action == "hardware inspection / RMA"
    assert node.findings[0].action.startswith("hardware inspection / RMA: Xid 79 on GPU")
    assert result.exit_code() == 1  # a new escalation is news to a scheduler
    text = prometheus.render(result.report, kind=prometheus.SCAN)
    assert 'gpuboot_scan_escalated_faults{host="n1"} 1' in text
    target = decide(node, bundle=None, certificate=None, allow_warn=False, now=datetime.now(UTC))
    assert target.labels[L.LABEL_RECOMMENDED_ACTION] == "hardware-inspection-rma"
    again = scans("b3", xid(79))  # the same boot scanned again: still RMA, no longer news
    assert again.report.nodes[0].escalations[0].new is False and again.exit_code() == 5


def test_scan_records_the_boot_id_and_faults_in_its_history(scans, tmp_path):
    scans("b1", xid(79))
    (rec,) = [json.loads(line) for line in (tmp_path / "h.jsonl").read_text().splitlines()]
    assert rec["boot_id"] == "b1" and rec["faults"] == ["xid:79@0000:18:00"]


def test_a_bad_threshold_is_refused_before_any_host(tmp_path, guard):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, nvidia_driver_branch: '550',"
        " nvidia_driver_version: 550.54.15-1}\n  hosts:\n    n1: {ansible_host: 127.0.0.1}\n"
    )
    assert cli.main(["scan", "-q", "-i", str(inv), "--rma-after-reboots", "0"]) == 2
    assert guard == []


def test_collection_records_the_boot_id_the_way_a_reboot_is_seen():
    from gpuboot.node_collect import boot_id_probe

    probe = boot_id_probe({})
    assert probe.file == escalation.BOOT_ID_FILE
    assert probe.command == "cat /proc/sys/kernel/random/boot_id"
    # a lab container shares its host's boot_id: the lab names its own per-boot command
    lab = boot_id_probe({"gpuboot_reboot_boot_time_command": "cut -d' ' -f22 /proc/1/stat"})
    assert lab.command == "cut -d' ' -f22 /proc/1/stat"
