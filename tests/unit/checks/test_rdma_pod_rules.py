"""RDM-001..006 on listings in the collection's form (gpuboot.evidence.sriov / rdma_cm): a node
prepared for pod RDMA passes, each fault fails exactly its rule, a fault read in a cut listing
FAILs, what could not be read is ERROR and a host without pod RDMA is SKIPPED."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext, probes_matching
from gpuboot.evidence.mlxconfig import mlxconfig_file
from gpuboot.evidence.rdma_cm import RDMA_CM_FILE
from gpuboot.evidence.rdma_system import RDMA_SYSTEM_FILE
from gpuboot.evidence.sriov import sriov_file
from gpuboot.profiles import load_profile

PROFILE = load_profile("hgx-h100-sxm-8gpu")
RAILS = [n for n in PROFILE["hardware"]["nics"] if n["link_layer"] == "Ethernet"]
VFS = 2
SRIOV = {"doca_ofed_enabled": True, "gpuboot_rdma_cni": "sriov", "gpuboot_rdma_vfs": VFS}
RDM = [f"RDM-00{i}" for i in range(1, 7)]


def _vf_addr(nic: dict, i: int) -> str:
    return nic["pci_bus_id"][:-1] + str(i + 2)


def _vf_dev(nic: dict, i: int) -> str:
    return f"mlx5_{10 + RAILS.index(nic) * VFS + i}"


def _listing(nic: dict, *, numvfs: int = VFS, physfn: str | None = None, vf_rdma: bool = True,
             vf_types: str = "RoCE v2", pf_mtu: int = 9000, total: int = 16) -> str:  # fmt: skip
    n = f"/sys/class/net/{nic['netdev']}"
    d = f"{n}/device"
    link = "lrwxrwxrwx 1 root root 0 Nov 27 10:00"
    lines = [f"{n}/mtu:{pf_mtu}"]
    for i in range(numvfs):
        lines += [f"{link} {d}/virtfn{i} -> ../{_vf_addr(nic, i)}",
                  f"{link} {d}/virtfn{i}/physfn -> ../{physfn or nic['pci_bus_id']}"]  # fmt: skip
    lines += [f"{d}/infiniband/{nic['hca']}", f"{d}/sriov_numvfs", f"{d}/sriov_totalvfs"]
    for i in range(numvfs):
        if vf_rdma:
            lines.append(f"{d}/virtfn{i}/infiniband/{_vf_dev(nic, i)}")
        lines.append(f"{d}/virtfn{i}/net/{nic['netdev']}v{i}")
    lines += [f"{d}/sriov_totalvfs:{total}", f"{d}/sriov_numvfs:{numvfs}"]
    lines += [f"{d}/virtfn{i}/net/{nic['netdev']}v{i}/mtu:9000" for i in range(numvfs)]
    types = "ports/1/gid_attrs/types"
    lines += [f"{d}/infiniband/{nic['hca']}/{types}/0:IB/RoCE v1",
              f"{d}/infiniband/{nic['hca']}/{types}/1:RoCE v2"]  # fmt: skip
    if vf_rdma:
        lines += [f"{d}/virtfn{i}/infiniband/{_vf_dev(nic, i)}/{types}/1:{vf_types}"
                  for i in range(numvfs)]  # fmt: skip
    return "\n".join(lines) + "\n"


def _cm(tos: int = 104, mode: str = "RoCE v2", skip: str | None = None) -> str:
    root = "/sys/kernel/config/rdma_cm"
    devs = [n["hca"] for n in RAILS] + [_vf_dev(n, i) for n in RAILS for i in range(VFS)]
    lines = [root]
    for dev in devs:
        if dev != skip:
            lines += [f"{root}/{dev}/ports/1/default_roce_mode:{mode}",
                      f"{root}/{dev}/ports/1/default_roce_tos:{tos}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _evidence(netns: str = "exclusive", cm: str | None = None, **changes) -> dict:
    ev = {RDMA_SYSTEM_FILE: ProbeOutput(f"netns {netns} copy-on-fork on\n", "", 0),
          RDMA_CM_FILE: ProbeOutput(cm or _cm(), "", 0)}  # fmt: skip
    for nic in RAILS:
        mine = changes if nic is RAILS[1] else {}
        ev[sriov_file(nic["netdev"])] = ProbeOutput(_listing(nic, **mine), "", 0)
    return ev


def _judge(ev: dict, **hostvars) -> dict[str, tuple[str, str]]:
    ctx = NodeContext("n1", PROFILE, {**SRIOV, **hostvars})
    found = rules.evaluate(ev, ctx, ["RDM-"])
    return {f.rule: (str(f.status), f.reason) for f in found}


def _not_pass(found: dict) -> dict[str, str]:
    return {r: s for r, (s, _why) in found.items() if s != "PASS"}


def test_a_node_prepared_for_sriov_pods_passes_every_rdm_rule():
    found = _judge(_evidence())
    assert _not_pass(found) == {}, found
    assert found["RDM-001"][1] == "2 VF(s) on each of the 8 rail PF(s)"
    assert found["RDM-005"][1] == "RDMA CM RoCE v2, ToS 104 on 24 RDMA device(s)"


def test_a_node_prepared_for_shared_pods_passes_without_vfs():
    ev = _evidence("shared")
    for nic in RAILS:
        ev[sriov_file(nic["netdev"])] = ProbeOutput(_listing(nic, numvfs=0), "", 0)
    found = _judge(ev, gpuboot_rdma_cni="shared")
    assert {r: s for r, (s, _w) in found.items()} == {
        "RDM-001": "SKIPPED", "RDM-002": "PASS", "RDM-003": "PASS",
        "RDM-004": "PASS", "RDM-005": "PASS", "RDM-006": "SKIPPED",
    }  # fmt: skip


def test_without_pod_rdma_every_rdm_rule_is_skipped_not_configured():
    found = _judge({}, gpuboot_rdma_cni="none")
    assert {s for s, _w in found.values()} == {"SKIPPED"}
    assert all("not configured" in why for _s, why in found.values())


@pytest.mark.parametrize(
    ("ev", "rule", "says"),
    [
        (_evidence(numvfs=0), "RDM-001", "enp60s0np0 (GPU 1): 0 VF(s), want 2"),
        (_evidence(pf_mtu=1500), "RDM-002", "enp60s0np0 (GPU 1): MTU 1500, want 9000"),
        (_evidence(vf_types="IB/RoCE v1"), "RDM-003", "VF 0 (mlx5_12): no RoCE v2 GID"),
        (_evidence("shared"), "RDM-004", "RDMA netns mode shared, want exclusive"),
        (_evidence(cm=_cm(tos=0)), "RDM-005", "mlx5_0: RDMA CM ToS 0, want 104 (DSCP 26)"),
        (_evidence(cm=_cm(mode="IB/RoCE v1")), "RDM-005", "default mode IB/RoCE v1"),
        (_evidence(cm=_cm(skip="mlx5_12")), "RDM-005", "mlx5_12: RDMA CM defaults never set"),
        (_evidence(physfn="0000:1a:00.0"), "RDM-006", "physfn 0000:1a:00.0, not 0000:3c:00.0"),
    ],
)
def test_each_fault_fails_its_rule_and_names_it(ev, rule, says):
    found = _judge(ev)
    assert _not_pass(found) == {rule: "FAIL"}, found
    assert says in found[rule][1]


def test_vfs_without_rdma_devices_fail_rdm_002():
    found = _judge(_evidence(vf_rdma=False))
    assert found["RDM-002"][0] == "FAIL"
    assert "enp60s0np0 VF 0 (0000:3c:00.2): no RDMA device" in found["RDM-002"][1]


def test_a_fault_read_in_a_cut_listing_fails_what_it_does_not_show_is_error():
    ev = _evidence(numvfs=0)
    name = sriov_file(RAILS[1]["netdev"])
    text = ev[name].stdout
    cut = "truncated: no end marker (the node's collection did not finish it)"
    ev[name] = ProbeOutput(text[: text.index("sriov_totalvfs:")], "", 255, cut)
    # sriov_totalvfs's value was cut: the count it reads (none) is not read either
    assert _judge(ev)["RDM-001"][0] == "ERROR"
    ev[name] = ProbeOutput(text[: text.index("types/0")], "", 255, cut)  # numvfs 0 was read
    got = _judge(ev)["RDM-001"]
    assert got[0] == "FAIL" and "0 VF(s), want 2" in got[1] and "not whole" in got[1]
    # a cut listing of a healthy PF: its GID types were not read, never missing
    ok = _evidence()
    text = ok[name].stdout
    ok[name] = ProbeOutput(text[: text.index("types/1")], "", 255, cut)
    assert _judge(ok)["RDM-003"][0] == "ERROR"


@pytest.mark.parametrize("rule", RDM)
@pytest.mark.parametrize(
    "corrupt",
    [
        lambda o: replace(o, stdout=""),
        lambda o: replace(o, stdout="\x1b[2J@@ garbled @@\n"),
        lambda o: replace(o, rc=127, stderr="sh: rdma: not found\n"),
        lambda o: replace(o, rc=124),
    ],
    ids=["empty", "garbage", "not-installed", "timeout"],
)
def test_unreadable_evidence_is_error_never_pass_or_fail(rule, corrupt):
    ev = _evidence()
    files = [n for p in rules.RULES_BY_ID[rule].evidence for n in probes_matching(ev, p)]
    assert files
    for name in files:
        bad = {**ev, name: corrupt(ev[name])}
        assert _judge(bad)[rule][0] == "ERROR", (rule, name)


@pytest.mark.parametrize(
    ("next_boot", "says"),
    [
        ("True(1)", "the firmware allows 8 from the next boot: reboot pending"),
        ("False(0)", "SRIOV_EN 0, NUM_OF_VFS 8: `mlxconfig -d 0000:3c:00.0 set SRIOV_EN=1 "
         "NUM_OF_VFS=2`, then reboot"),
    ],
)  # fmt: skip
def test_too_few_vfs_allowed_says_what_the_firmware_holds(next_boot, says):
    ev = _evidence(numvfs=0, total=0)
    query = f"Configurations:{'Next Boot':>43}\n         SRIOV_EN{next_boot:>37}\n"
    ev[mlxconfig_file("0000:3c:00.0")] = ProbeOutput(query + f"         NUM_OF_VFS{8:>35}\n", "", 0)
    status, why = _judge(ev)["RDM-001"]
    assert status == "FAIL" and "0 VF(s), want 2 (the firmware allows 0)" in why
    assert says in why


def test_an_unreadable_firmware_query_leaves_the_count_alone():
    ev = _evidence(numvfs=0, total=0)
    ev[mlxconfig_file("0000:3c:00.0")] = ProbeOutput("", "mlxconfig: not found\n", 127)
    status, why = _judge(ev)["RDM-001"]
    assert status == "FAIL" and why.endswith("want 2 (the firmware allows 0)")
