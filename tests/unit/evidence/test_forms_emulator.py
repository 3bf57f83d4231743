"""The emulator prints every form a real node does, and each form is
judged like the real captures: `journalctl -k` beside dmesg, `nvidia-smi -q -x` beside -q,
`dcgmi nvlink -s/-e` beside `nvidia-smi nvlink`, DCGM 4.x tables and JSON, nvbandwidth text,
a GPU nvidia-smi lost. Fast tier: the emulator runs on this machine, no podman."""

from __future__ import annotations

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.evidence.dcgmi import parse_dcgmi_diag_json, parse_dcgmi_diag_text
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.nvlink import (
    parse_dcgmi_nvlink_errors,
    parse_dcgmi_nvlink_status,
    parse_nvlink_status,
)
from tests.unit.checks._emunode import Daemon, ctx, full_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


def _out(res) -> ProbeOutput:
    return ProbeOutput(res.out, res.err, res.rc)


def _judge(node, evidence: dict, rule: str, **hostvars):
    (found,) = rules.evaluate(evidence, ctx(node, **hostvars), only=[rule])
    return found


@pytest.fixture
def node(tmp_path):
    return full_node(tmp_path)


def test_journalctl_k_is_the_kernel_log_dmesg_prints(node):
    node.run("ctl", "fault", "add", "xid", "79", "2", check=True)
    dmesg = node.run("dmesg", check=True).out
    journal = node.run("journalctl", "-k", check=True).out
    key = [(x.code, x.pci) for x in parse_kernel_log(dmesg).xids]
    assert key and [(x.code, x.pci) for x in parse_kernel_log(journal).xids] == key
    found = _judge(node, {"journalctl_-k.txt": ProbeOutput(journal, "", 0)}, "XID-001")
    assert found.status == "FAIL" and "Xid 79" in found.reason
    both = {
        "dmesg.txt": ProbeOutput(dmesg, "", 0),
        "journalctl_-k.txt": ProbeOutput(journal, "", 0),
    }
    assert _judge(node, both, "XID-001").reason == found.reason  # one event, not two


def test_q_xml_and_text_judged_alike_and_disagreeing_forms_are_error(node):
    healthy_x = _out(node.run("nvidia-smi", "-q", "-x", check=True))
    node.run("ctl", "fault", "add", "remap-pending", "1", check=True)
    text = _out(node.run("nvidia-smi", "-q", check=True))
    xml = _out(node.run("nvidia-smi", "-q", "-x", check=True))
    for ev in ({"nvidia-smi_-q.txt": text}, {"nvidia-smi_-q_-x.xml": xml},
               {"nvidia-smi_-q.txt": text, "nvidia-smi_-q_-x.xml": xml}):  # fmt: skip
        found = _judge(node, ev, "ECC-002")
        assert found.status == "FAIL" and "row remap pending" in found.reason, (list(ev), found)
    mixed = _judge(node, {"nvidia-smi_-q.txt": text, "nvidia-smi_-q_-x.xml": healthy_x}, "ECC-002")
    assert mixed.status == "ERROR" and "evidence disagrees" in mixed.reason
    assert "nvidia-smi_-q.txt" in mixed.reason and "nvidia-smi_-q_-x.xml" in mixed.reason


def test_q_d_section_judges_its_rule_only(node):
    node.run("ctl", "fault", "add", "remap-failed", "2", check=True)
    out = _out(node.run("nvidia-smi", "-q", "-d", "ROW_REMAPPER", check=True))
    ev = {"nvidia-smi_-q_-d_ROW_REMAPPER.txt": out}
    assert _judge(node, ev, "ECC-003").status == "FAIL"
    ecc = _judge(node, ev, "ECC-001")  # no ECC section in a ROW_REMAPPER report: not judged
    assert ecc.status == "ERROR" and "holds the ecc section" in ecc.reason


def test_dcgmi_nvlink_forms_name_the_same_down_link(node):
    node.run("ctl", "fault", "add", "nvlink-down", "1", "3", check=True)
    with Daemon(node, "nv-hostengine", "hostengine", "-n"):
        status = node.run("dcgmi", "nvlink", "-s", check=True).out
        errors = node.run("dcgmi", "nvlink", "-e", "-g", "1", check=True).out
    smi = node.run("nvidia-smi", "nvlink", "-s").out
    assert parse_dcgmi_nvlink_status(status).gpu(1).inactive_links == (3,)
    assert parse_nvlink_status(smi).gpu(1).inactive_links == (3,)
    assert parse_dcgmi_nvlink_errors(errors).gpus[0].counters[3]["replay_error"] > 0
    for ev in ({"dcgmi_nvlink_-s.txt": ProbeOutput(status, "", 0)},
               {"dcgmi_nvlink_-s.txt": ProbeOutput(status, "", 0),
                "nvidia-smi_nvlink_-s.txt": ProbeOutput(smi, "", 0)}):  # fmt: skip
        found = _judge(node, ev, "NVL-001")
        assert found.status == "FAIL" and "GPU 1: link(s) 3 inactive" in found.reason
    found = _judge(node, {"dcgmi_nvlink_-e_-g_1.txt": ProbeOutput(errors, "", 0)}, "NVL-002")
    assert found.status == "WARN" and "GPU 1 link 3" in found.reason


def test_dcgm4_table_and_json_fail_naming_the_gpu(node):
    node.install_userspace("dcgm", "4.2.3")
    node.run("ctl", "fault", "add", "ecc-uncorrectable", "1", check=True)
    fm = Daemon(node, "nv-fabricmanager", "fabricmanager", "--foreground")  # CUDA needs it
    with fm, Daemon(node, "nv-hostengine", "hostengine", "-n"):
        text = node.run("dcgmi", "diag", "-r", "2")
        js = node.run("dcgmi", "diag", "-r", "2", "-j")
    assert text.rc == 226 and "| memory                    | Fail" in text.out
    assert "|                           | GPU1: Fail" in text.out
    diag = parse_dcgmi_diag_text(text.out)
    assert diag.metadata["DCGM Version"] == "4.2.3"
    fails = {r.gpu_id for r in diag.results if r.test == "memory" and r.result == "Fail"}
    assert fails == {None, "1"}  # the test row, then the GPU that failed it
    assert parse_dcgmi_diag_json(js.out).failed == diag.failed
    for name, out in (("dcgmi_diag_-r_2.txt", text), ("dcgmi_diag_-r_2_-j.json", js)):
        found = _judge(node, {name: _out(out)}, "DCG-001", dcgm_version="1:4.2.3")
        assert found.status == "FAIL" and "memory failed on GPU 1" in found.reason, found


def test_nvbandwidth_text_judged_like_json(node):
    evs = {}
    with Daemon(node, "nv-fabricmanager", "fabricmanager", "--foreground"):  # CUDA needs it
        for name, args in (
            ("nvbandwidth_-t_host_to_device_memcpy_ce.txt", ()),
            ("nvbandwidth_-j_-t_host_to_device_memcpy_ce.json", ("-j",)),
        ):
            out = node.run("nvbandwidth", *args, "-t", "host_to_device_memcpy_ce", check=True)
            evs[name] = _judge(node, {name: _out(out)}, "BW-001")
    text, js = evs.values()
    assert text.status == js.status == "PASS"
    assert text.measurements[0]["value"] == pytest.approx(js.measurements[0]["value"], rel=0.01)


def test_a_gpu_nvidia_smi_lost_is_gpu_001_fail_naming_it(node):
    node.run("ctl", "fault", "add", "xid", "79", "5", check=True)
    out = node.run("nvidia-smi", "-q")
    assert "Unable to determine the device handle for GPU" in out.out
    found = _judge(node, {"nvidia-smi_-q.txt": _out(out)}, "GPU-001")
    assert found.status == "FAIL" and "lost" in found.reason, found
    assert "7 of 8 GPUs visible" in found.reason, found


def test_rdma_link_show_gids_and_ethtool_are_judged_like_the_captures(node):
    """The emulator's `rdma link`, `show_gids` and `ethtool -S` (the lab's view of the RoCE
    rails) read and judged: healthy, then one port down (fault nic-down)."""
    hv = {"doca_ofed_enabled": True}
    rdma = _out(node.run("rdma", "link", check=True))
    gids = _out(node.run("show_gids", check=True))
    stats = _out(node.run("ethtool", "-S", "enp26s0np0", check=True))
    assert _judge(node, {"rdma_link.txt": rdma}, "NIC-001", **hv).status == "PASS"
    assert _judge(node, {"show_gids.txt": gids}, "NIC-004", **hv).status == "PASS"
    found = _judge(node, {"ethtool_-S_enp26s0np0.txt": stats}, "NIC-005", **hv)
    assert found.status == "PASS" and "3 RoCE counter(s) recorded on enp26s0np0" in found.reason
    node.run("ctl", "fault", "add", "nic-down", "mlx5_3", check=True)
    rdma = _out(node.run("rdma", "link", check=True))
    gids = _out(node.run("show_gids", check=True))
    down = _judge(node, {"rdma_link.txt": rdma}, "NIC-001", **hv)
    assert down.status == "FAIL" and "mlx5_3 not active/link down" in down.reason
    nogid = _judge(node, {"show_gids.txt": gids}, "NIC-004", **hv)
    assert nogid.status == "FAIL" and "(mlx5_3): no RoCE v2 GID" in nogid.reason
