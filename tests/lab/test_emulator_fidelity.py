"""Every SKU profile boots as a lab node whose shims print what the real tools
print. Each shim runs inside the node over SSH and its output is read by the very
parsers that are tested on the real published captures (tests/fixtures/captures)."""

from __future__ import annotations

import json

import pytest

from gpuboot.evidence.dcgmi import parse_dcgmi_diag_text
from gpuboot.evidence.ibstat import parse_ibstat
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.mig import parse_mig_lgi, parse_mig_lgip
from gpuboot.evidence.mlnx_qos import parse_mlnx_qos
from gpuboot.evidence.modules import parse_lsmod, parse_nvidia_version
from gpuboot.evidence.nccl import parse_all_reduce_perf
from gpuboot.evidence.nvbandwidth import parse_nvbandwidth_json
from gpuboot.evidence.nvidia_smi_csv import parse_query_gpu_csv
from gpuboot.evidence.nvidia_smi_q import parse_nvidia_smi_q, parse_nvidia_smi_q_xml
from gpuboot.evidence.nvlink import parse_nvlink_status
from gpuboot.evidence.topo import parse_topo_matrix
from gpuboot.profiles import load_profile

from .conftest import gpuboot, ssh

pytestmark = pytest.mark.lab
PROFILES = ["hgx-h100-sxm-8gpu", "hgx-h200-sxm-8gpu", "a100-sxm4-8gpu", "l40s-pcie-4gpu"]
CSV = "index,name,pci.bus_id,persistence_mode,pcie.link.gen.max,pcie.link.width.current"


def run(lab, command: str) -> str:
    out = ssh(lab, "node1", command)
    assert out.returncode == 0, f"{command}: exit {out.returncode}\n{out.stdout}{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module", params=PROFILES)
def node(request, make_lab):
    """One node of the SKU with driver, DOCA-OFED, DCGM and the probe tools installed."""
    lab = make_lab(nodes=1, profile=request.param)
    gpuboot("install", "-i", str(lab.inventory), "-q", check_rc=0)
    profile = load_profile(request.param)
    extra = "doca-ofed datacenter-gpu-manager gpuboot-probes"
    if profile["hardware"]["nvlink"].get("nvswitch_count"):
        extra += " nvidia-fabricmanager-550=550.54.15-1"
    run(lab, f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {extra} >/dev/null")
    # As on real nodes, neither daemon is started by its package.
    run(lab, "systemctl start nvidia-dcgm")
    if "fabricmanager" in extra:
        run(lab, "systemctl start nvidia-fabricmanager")
    return lab, profile


def test_gpu_inventory_reads_alike_in_text_xml_and_csv(node):
    lab, profile = node
    gpu = profile["hardware"]["gpu"]
    text = parse_nvidia_smi_q(run(lab, "nvidia-smi -q"))
    xml = parse_nvidia_smi_q_xml(run(lab, "nvidia-smi -q -x"))
    csv = parse_query_gpu_csv(run(lab, f"nvidia-smi --query-gpu={CSV} --format=csv"))
    assert len(text.gpus) == len(xml.gpus) == len(csv.rows) == gpu["count"]
    assert (
        {g.product_name for g in text.gpus} == {g.product_name for g in xml.gpus} == {gpu["model"]}
    )
    assert text.driver_version == xml.driver_version == "550.54.15"
    assert [g.bus_id for g in text.gpus] == [g.bus_id for g in xml.gpus]
    assert all(r.text("persistence_mode") == "Enabled" for r in csv.rows)
    assert all(r.pcie_gen_max == gpu["pcie"]["gen_max"] for r in csv.rows)
    assert all(g.remapped_rows is None or not g.remapped_rows.pending for g in text.gpus)


def test_kernel_view(node):
    lab, _ = node
    modules = parse_lsmod(run(lab, "lsmod"))
    assert {"nvidia", "mlx5_core", "ib_core"} <= set(modules)
    version = parse_nvidia_version(run(lab, "cat /run/gpuemu/proc/driver/nvidia/version"))
    assert version.version == "550.54.15" and version.flavor == "proprietary"
    log = parse_kernel_log(run(lab, "dmesg"))
    assert log.xids == ()


def test_nvlink_and_topology(node):
    lab, profile = node
    links = profile["hardware"]["nvlink"].get("links_per_gpu", 0)
    topo = parse_topo_matrix(run(lab, "nvidia-smi topo -m"))
    gpus = [d for d in topo.devices if d.startswith("GPU")]
    assert len(gpus) == profile["hardware"]["gpu"]["count"]
    if not links:
        assert all(not v.startswith("NV") for r in topo.rows.values() for v in r.links.values())
        return
    status = parse_nvlink_status(run(lab, "nvidia-smi nvlink -s"))
    assert len(status.gpus) == profile["hardware"]["gpu"]["count"]
    for g in status.gpus:
        assert len(g.active_links) == links and not g.inactive_links
        assert {lk.speed_gbytes_s for lk in g.links} == {
            profile["hardware"]["nvlink"]["link_speed_gbps"]
        }
    assert topo.rows["GPU0"].links["GPU1"] == f"NV{links}"


def test_mig_takes_effect_on_reset(node):
    lab, profile = node
    if not profile["hardware"]["mig"]["supported"]:
        out = ssh(lab, "node1", "nvidia-smi -i 0 -mig 1")
        assert out.returncode != 0  # the real tool refuses on GPUs without MIG
        return
    # A reset is refused while a client holds the GPUs (persistence daemon, DCGM).
    run(lab, "systemctl stop nvidia-persistenced nvidia-dcgm || true; nvidia-smi -i 0 -mig 1")
    q = parse_nvidia_smi_q(run(lab, "nvidia-smi -q -i 0"))
    assert q.gpus[0].mig_mode_pending is True and q.gpus[0].mig_mode_current is False
    run(lab, "nvidia-smi -r -i 0")
    q = parse_nvidia_smi_q(run(lab, "nvidia-smi -q -i 0"))
    assert q.gpus[0].mig_mode_current is True
    lgip = parse_mig_lgip(run(lab, "nvidia-smi mig -i 0 -lgip"))
    names = {p.name for p in lgip.items}
    assert names == {p["name"] for p in profile["hardware"]["mig"]["profiles"]}
    smallest = min(profile["hardware"]["mig"]["profiles"], key=lambda p: p["size"])
    run(lab, f"nvidia-smi mig -i 0 -cgi {smallest['id']}")
    lgi = parse_mig_lgi(run(lab, "nvidia-smi mig -i 0 -lgi"))
    assert [(i.name, i.gpu) for i in lgi.items] == [(smallest["name"], 0)]
    run(
        lab,
        "nvidia-smi mig -i 0 -dgi && nvidia-smi -i 0 -mig 0 && nvidia-smi -r -i 0 && "
        "systemctl start nvidia-persistenced nvidia-dcgm",
    )


def test_nics_and_roce_qos(node):
    lab, profile = node
    nics = profile["hardware"]["nics"]
    ib = parse_ibstat(run(lab, "ibstat"))
    assert [ca.name for ca in ib.cas] == [n["hca"] for n in nics]
    assert all(
        p.active and p.rate_gbits_s == n["rate"] for p, n in zip(ib.ports, nics, strict=True)
    )
    netdev = nics[0]["netdev"]
    run(lab, f"mlnx_qos -i {netdev} --trust dscp --pfc 0,0,0,1,0,0,0,0 >/dev/null")
    qos = parse_mlnx_qos(run(lab, f"mlnx_qos -i {netdev}"))
    assert qos.trust_state == "dscp" and qos.pfc_priorities == (3,)


def test_probes(node):
    lab, profile = node
    count = profile["hardware"]["gpu"]["count"]
    nvbw = parse_nvbandwidth_json(run(lab, "nvbandwidth -j -t host_to_device_memcpy_ce"))
    h2d = nvbw.test("host_to_device_memcpy_ce")
    assert h2d.passed and len(h2d.matrix[0]) == count
    expected = profile["bandwidth"]["nvbandwidth"]["h2d_gbps"]
    assert all(0.8 * expected < v < 1.2 * expected for v in h2d.matrix[0] if v is not None)
    nccl = parse_all_reduce_perf(run(lab, f"all_reduce_perf -b 8M -e 64M -f 2 -g {count}"))
    assert nccl.completed and nccl.wrong_total == 0 and len(nccl.ranks) == count
    diag = parse_dcgmi_diag_text(run(lab, "dcgmi diag -r 1"))
    assert diag.results and not diag.failed


def _certified(lab, check_rc: int) -> dict[str, dict]:
    """node1's findings from `gpuboot certify --probes none`, by rule."""
    proc = gpuboot(
        "certify", "-i", str(lab.inventory), "--probes", "none", "--json", check_rc=check_rc
    )
    (node,) = json.loads(proc.stdout)["nodes"]
    return {f["rule"]: f for f in node["findings"]}


def test_a_gpu_nvidia_smi_lost_fails_gpu_001_naming_it_and_nothing_else(node):
    """gpu-err on one GPU: certify's nvidia-smi -q and --query-gpu cannot open it. GPU-001
    FAILs naming its bus id; no other rule FAILs, and any other rule that changes is
    SKIPPED pointing at GPU-001 (its per-GPU listing is short by the lost GPU)."""
    lab, profile = node
    if profile["name"] != "l40s-pcie-4gpu":  # one SKU is enough: the smallest node
        pytest.skip("run on the l40s-pcie-4gpu node only")
    before = _certified(lab, check_rc=None)
    gpuboot("lab", "fault", "--name", lab.name, "node1", "gpu-err", "1", check_rc=0)
    try:
        after = _certified(lab, check_rc=1)
    finally:
        gpuboot("lab", "clear", "--name", lab.name, "node1", "gpu-err", check_rc=0)
    lost = after["GPU-001"]
    assert lost["status"] == "FAIL" and "lost" in lost["reason"], lost
    bus = run(lab, "nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 1").strip()
    assert bus[4:].lower() in lost["reason"].lower(), (bus, lost)
    changed = {
        r: f for r, f in after.items() if r != "GPU-001" and f["status"] != before[r]["status"]
    }
    assert all(f["status"] == "SKIPPED" and "GPU-001" in f["reason"] for f in changed.values()), (
        changed
    )
