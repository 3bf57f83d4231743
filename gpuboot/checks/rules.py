"""Certification rules: pure functions from a node's evidence to a finding.

Each rule has a stable id shared by its check, the role task that fixes it and the
report line. A rule returns PASS, WARN or FAIL for what the node shows; when the evidence
cannot be read it raises (ParseError, MissingEvidence, ProbeFailed), which the harness
reports as ERROR: a harness fault never marks hardware bad. The catalogue is ``RULES``
(framework in base.py; GPU, interconnect and bandwidth rules in their own modules).
"""

from __future__ import annotations

from dataclasses import replace

from gpuboot.bundle.model import Evidence
from gpuboot.checks import (
    bw_rules,
    fabric_rules,
    gpu_rules,
    imex_rules,
    pci_rules,
    rdma_pod_rules,
    roce_rules,
    stack_rules,
    topo_rules,
)
from gpuboot.checks.base import (  # noqa: F401  (re-exported: the rules' public API)
    ERROR,
    FAIL,
    PASS,
    SKIPPED,
    WARN,
    Finding,
    MissingEvidence,
    NodeContext,
    ProbeFailed,
    Result,
    Rule,
    probe,
    start_node,
)
from gpuboot.components import Table
from gpuboot.errors import ConfigError, GpubootError
from gpuboot.evidence.forms import patterns as _forms  # every form of a tool's output
from gpuboot.evidence.rdma_cm import RDMA_CM_FILE
from gpuboot.evidence.rdma_system import RDMA_SYSTEM_FILE

# ------------------------------------------------------------------------- rules
check_gpu_count = gpu_rules.check_gpu_count  # every nvidia-smi form, lost GPUs named
check_persistence = gpu_rules.check_persistence


def check_xid(evidence: Evidence, ctx: NodeContext) -> Result | None:
    """Hardware/driver Xids since boot, judged by NVIDIA's Xid catalogue (xid_catalog). Xid
    13/43 (and other "application" codes) are the workload's faults; an Xid that names its cause
    ("caused by previous Xid N") is judged as N; a GPU that fell off the bus without an Xid token
    counts as Xid 79. What NVIDIA asks no recovery for (corrected errors, non-fatal NVLink5
    errors, Xid 154 back to None) is a WARN; a code outside the catalogue fails safe."""
    xids = gpu_rules.kernel_events(evidence, "xids")  # every kernel-log form held
    events = [x for x in xids if x.info.category != "application"]
    if not events:
        return None
    by_code: dict[int, list] = {}
    for x in events:
        by_code.setdefault(x.root, []).append(x)
    parts = []
    for code, evs in sorted(by_code.items()):
        via = sorted({x.code for x in evs if x.caused_by})
        chain = f" (reported as Xid {'/'.join(map(str, via))} caused by previous Xid {code})"
        pcis = ", ".join(sorted({x.pci for x in evs}))
        parts.append(f"Xid {code} ({xid_meaning(code)}) on {pcis}{chain if via else ''}")
    # the most serious event decides the action; a real fault's advice before Xid 154's
    rank = {"info": 0, "warning": 1, "critical": 2}
    worst = max(events, key=lambda x: (rank[x.severity], x.root != 154, x.root))
    action = f"Xid {worst.root}: {worst.info.advice} (NVIDIA bucket {worst.action})"
    if asks := sorted({x.recovery for x in events if x.recovery not in (None, "None")}):
        action += f"; the driver's Xid 154 asks: {', '.join(asks)}"
    return Result(WARN if worst.severity == "info" else FAIL, "; ".join(parts), action=action)


def xid_meaning(code: int) -> str:
    from gpuboot.evidence.xid_catalog import xid_info

    return xid_info(code).meaning


# A non-fatal SXid is corrected by the NVSwitch (Fabric Manager User Guide: informational, jobs
# go on); one link repeating it is a marginal link. NVIDIA's NVLink workflow (Xid catalogue,
# WORKFLOW_NVLINK_ERR) asks for a report once an ECC/parity error is seen "more than 2 times on
# the same link": the same threshold per NVSwitch link and SXid code.
SXID_WARN_COUNT = 3
_SXID_RESET = (
    "stop fabric manager and every GPU workload, reset all GPUs and NVSwitches with "
    "`nvidia-smi -r` (no -i), start fabric manager; reboot or power-cycle if the SXid returns "
    "(NVIDIA Fabric Manager User Guide, fatal SXid recovery)"
)


def check_sxid(evidence: Evidence, ctx: NodeContext) -> Result | None:
    """NVSwitch SXids since boot: the nvidia-nvswitch driver's kernel lines, or fabric manager's
    log lines in the same text. Fatal (or of unstated severity: fail safe) is FAIL; non-fatal is
    WARN once one switch link reports the same SXid SXID_WARN_COUNT times (a report the kernel
    and fabric manager both logged counts once)."""
    sxids = gpu_rules.kernel_events(evidence, "sxids")
    fatal: dict[tuple[int, str], set[str]] = {}
    counts: dict[tuple[int, str], dict[str, int]] = {}
    for s in sxids:
        where = f"{s.switch} link {s.link}"
        if s.fatal is not False:
            word = "fatal" if s.fatal else "unstated-severity"
            fatal.setdefault((s.code, word), set()).add(where)
        by_source = counts.setdefault((s.code, where), {})
        by_source[s.source] = by_source.get(s.source, 0) + 1
    if fatal:
        parts = [
            f"{w} SXid {c} on NVSwitch {', '.join(sorted(at))}"
            for (c, w), at in sorted(fatal.items())
        ]
        return Result(FAIL, "; ".join(parts), action=_SXID_RESET)
    repeated = [
        f"{max(n.values())}x non-fatal SXid {code} on NVSwitch {where}"
        for (code, where), n in sorted(counts.items())
        if max(n.values()) >= SXID_WARN_COUNT
    ]
    if not repeated:
        return None
    action = (
        "a link keeps reporting a corrected NVSwitch error: check it (`nvidia-smi nvlink -e`, "
        "seating, cables) and run `dcgmi diag -r 3`; reset the fabric if it grows"
    )
    return Result(WARN, "; ".join(repeated), action=action)


_RESET = "drain the node and reset the GPU (`nvidia-smi -r`), then certify again"
_RMA = "reseat or RMA the GPU (open a case with the DCGM diag and nvidia-bug-report)"

RULES: tuple[Rule, ...] = (
    Rule(
        "STK-001",
        "driver userspace and kernel module match the pin",
        FAIL,
        "reinstall the stack (`gpuboot install`), then reboot the node",
        stack_rules.check_driver_versions,
        # EL nodes: rpm_-qa.txt instead of dpkg-query (node_collect.package_probes)
        (
            "dpkg-query_-W.txt",
            "rpm_-qa.txt",
            "proc_driver_nvidia_version.txt",
            "reboot-required.txt",
        ),
    ),
    Rule(
        "STK-002",
        "every package the stack pins installed at its version and held",
        FAIL,
        "re-pin the stack (`gpuboot install --tags STK-002`): it installs the pinned versions and "
        "holds them; find who ran `apt-mark unhold` or upgraded past the hold",
        stack_rules.check_pinned_packages,
        (
            "dpkg-query_-W.txt",
            "apt-mark_showhold.txt",
            "rpm_-qa.txt",
            "dnf_versionlock_list.txt",
            "dnf_module_list_--enabled.txt",
        ),
    ),
    Rule(
        "STK-003",
        "unattended-upgrades blacklists every package the stack pins",
        FAIL,
        "re-apply the OS baseline (`gpuboot install --tags STK-003`): it writes "
        "/etc/apt/apt.conf.d/51gpuboot-unattended-upgrades",
        stack_rules.check_unattended_blacklist,
        ("apt-config_dump_Unattended-Upgrade.txt", "systemctl_show_dnf-automatic.txt"),
    ),
    Rule(
        "GPU-001",
        "GPU count and model as the profile expects",
        FAIL,
        "reseat or RMA the missing GPU; check `nvidia-smi -q` and the kernel log",
        check_gpu_count,
        (*_forms("query_gpu", "smi_q", "smi_table"), "nvidia-smi_-i*"),
    ),
    Rule(
        "GPU-002",
        "persistence mode enabled on every GPU",
        FAIL,
        "enable nvidia-persistenced (`gpuboot install --tags GPU-002`)",
        check_persistence,
        _forms("query_gpu", "smi_q", "smi_table"),
    ),
    Rule(
        "XID-001",
        "no hardware Xid in the kernel log since boot",
        FAIL,
        "follow the Xid's action (reset GPU, reboot, or RMA); see NVIDIA's Xid catalogue",
        check_xid,
        _forms("kernel_log"),
        fault_first=True,
    ),
    Rule(
        "XID-002",
        "no fatal NVSwitch SXid, and no link repeating a non-fatal one, since boot",
        FAIL,
        "reset the GPUs and NVSwitches (fabric manager stopped, `nvidia-smi -r`), reboot if the "
        "SXid returns; check the link of a repeating non-fatal one",
        check_sxid,
        _forms("kernel_log"),
        fault_first=True,
    ),
    Rule(
        "GPU-003",
        "GPU PCI device ids as the profile expects",
        FAIL,
        "wrong GPU SKU fitted: swap it for the profile's model or fix the node's profile",
        gpu_rules.check_pci_ids,
        _forms("smi_q"),
    ),
    Rule(
        "PCI-001",
        "PCIe links at their max generation and width",
        FAIL,
        "reseat the GPU/riser, check the slot's BIOS link setting; RMA if lanes stay lost",
        gpu_rules.check_pcie_link,
        _forms("query_gpu", "smi_q", "kernel_log"),
        fault_first=True,
    ),
    Rule(
        "PCI-002",
        "every GPU, NVSwitch and ConnectX the profile counts on the PCI bus and seen by its driver",
        FAIL,
        "a part on the bus the driver does not see: read the kernel log (RmInitAdapter, mlx5) "
        "and reset or reseat it; absent from the bus: reseat the board or riser, RMA if it "
        "stays gone",
        pci_rules.check_pci_devices,
        ("lspci*", "nvidia-smi_--query-gpu_--format=csv.csv"),
    ),
    Rule(
        "ECC-001",
        "ECC enabled and no uncorrectable ECC errors",
        FAIL,
        "enable ECC (`nvidia-smi -e 1` + reset); uncorrectable errors: " + _RESET,
        gpu_rules.check_ecc,
        _forms("smi_q", "query_gpu"),
        fault_first=True,
    ),
    Rule(
        "ECC-002",
        "no row remap or page retirement pending",
        FAIL,
        _RESET,
        gpu_rules.check_remap_pending,
        _forms("smi_q", "query_gpu"),
        fault_first=True,
    ),
    Rule(
        "ECC-003",
        "no row remapping failure",
        FAIL,
        _RMA,
        gpu_rules.check_remap_failure,
        _forms("smi_q", "query_gpu"),
        fault_first=True,
    ),
    Rule(
        "THR-001",
        "no thermal clock slowdown",
        WARN,
        "check fans, airflow and inlet temperature; the GPU runs slower while throttled",
        gpu_rules.check_throttle,
        _forms("smi_q", "query_gpu"),
    ),
    Rule(
        "MIG-001",
        "MIG mode and GPU instances as the host's layout",
        FAIL,
        "run `gpuboot install` (role nvidia_mig) to apply the layout; instances are lost at "
        "every reboot/GPU reset and re-created by gpuboot-mig.service",
        gpu_rules.check_mig_layout,
        ("nvidia-smi_--query-gpu_--format=csv.csv", "nvidia-smi_mig_-lgi.txt"),
    ),
    Rule(
        "NVL-001",
        "NVLinks up at the expected speed",
        FAIL,
        "reset the GPUs and check the NVLink/NVSwitch fabric; reseat or RMA if a link stays down",
        fabric_rules.check_nvlink_links,
        _forms("nvlink_s"),
    ),
    Rule(
        "NVL-002",
        "no NVLink replay/recovery/CRC errors",
        WARN,
        "watch the counters; reset the GPUs, and RMA if they keep rising under load",
        fabric_rules.check_nvlink_errors,
        _forms("nvlink_e"),
    ),
    Rule(
        "TOP-001",
        "each GPU's rail NIC behind its PCIe switch, NVLink mesh complete, NUMA as the profile",
        FAIL,
        "a NIC or riser in the wrong slot: move the card named beside the GPU to the slot the "
        "profile gives it (or fix the profile's nics[].gpu); a GPU pair off NVLink: see NVL-001",
        topo_rules.check_topology,
        ("nvidia-smi_topo_-m*",),
    ),
    Rule(
        "FAB-001",
        "fabric manager running, version-matched, fabric trained",
        FAIL,
        "install nvidia-fabricmanager at the driver's exact version and start it "
        "(`gpuboot install`); fix the fabric if it still fails",
        gpu_rules.check_fabric_manager,
        (
            "systemctl_is-active_nvidia-fabricmanager.txt",
            "dpkg-query_-W.txt",
            "rpm_-qa.txt",
            "proc_driver_nvidia_version.txt",
            "nvidia-smi_-q.txt",
        ),
    ),
    Rule(
        "IMX-001",
        "IMEX at the driver's version and its service active",
        FAIL,
        "install nvidia-imex at the driver's exact version and start it (`gpuboot install --tags "
        "IMX-001`); if it does not stay up, read `journalctl -u nvidia-imex`",
        imex_rules.check_imex,
        (
            imex_rules.IMEX_ACTIVE,
            "dpkg-query_-W.txt",
            "rpm_-qa.txt",
            "proc_driver_nvidia_version.txt",
        ),
    ),
    Rule(
        "NIC-001",
        "RDMA NIC ports active at the expected rate",
        FAIL,
        "check cables, transceivers and the switch port; reseat or RMA the NIC",
        fabric_rules.check_nics,
        _forms("nics"),
    ),
    Rule(
        "NIC-002",
        "RoCE QoS: trust DSCP and PFC on the RoCE priority",
        FAIL,
        "re-apply the QoS settings (`gpuboot install --tags NIC-002`; "
        "`mlnx_qos -i IF --trust dscp --pfc ...`)",
        fabric_rules.check_roce_qos,
        ("mlnx_qos_-i_*.txt",),
    ),
    Rule(
        "NIC-003",
        "RoCE congestion control: ECN (DCQCN) on the RoCE priority",
        FAIL,
        "re-apply the QoS settings (`gpuboot install --tags NIC-003`; "
        "`echo 1 > /sys/class/net/IF/ecn/roce_np/enable/3`, same for roce_rp)",
        fabric_rules.check_roce_ecn,
        ("sys_class_net_*_ecn_enable.txt",),
    ),
    Rule(
        "NIC-004",
        "a RoCE v2 GID on each RoCE rail",
        FAIL,
        "give the rail's netdev its IP address (the GID table follows it); check `show_gids` "
        "and `rdma link` for the port, then certify again",
        roce_rules.check_roce_gids,
        _forms("gids"),
    ),
    Rule(
        "NIC-005",
        "RoCE counters (pause, out-of-buffer, ECN/CNP) recorded for the scan history",
        WARN,
        "read the counters' growth in `gpuboot scan` (a rail pausing or dropping for lack of "
        "buffer): check PFC/ECN (NIC-002, NIC-003) and the switch port",
        roce_rules.check_roce_counters,
        _forms("ethtool_stats"),
    ),
    Rule(
        "RDM-001",
        "every rail PF has gpuboot_rdma_vfs SR-IOV VFs (sriov)",
        FAIL,
        "re-create the VFs (`gpuboot install --tags RDM-001`: writes sriov_numvfs through "
        "gpuboot-rdma-vfs.service); no SR-IOV or too few allowed: `mlxconfig -d PCI set SRIOV_EN=1 "
        "NUM_OF_VFS=N`, then reboot",
        rdma_pod_rules.check_vf_count,
        (rdma_pod_rules.SRIOV_FILES,),
        fault_first=True,
    ),
    Rule(
        "RDM-002",
        "every rail PF at the RDMA MTU; every VF with an RDMA device and a netdev at it (sriov)",
        FAIL,
        "re-apply the VFs and MTUs (`gpuboot install --tags RDM-002`); a VF without an RDMA "
        "device: check that mlx5_ib is loaded (`lsmod`) and the VF is bound to mlx5_core",
        rdma_pod_rules.check_vf_devices,
        (rdma_pod_rules.SRIOV_FILES,),
        fault_first=True,
    ),
    Rule(
        "RDM-003",
        "a RoCE v2 GID on each rail port and each VF's RDMA device",
        FAIL,
        "give the rail (and VF) netdevs their addresses and re-apply (`gpuboot install --tags "
        "RDM-003`); read the GID types under /sys/class/infiniband/DEV/ports/1/gid_attrs/types",
        rdma_pod_rules.check_v2_gids,
        (rdma_pod_rules.SRIOV_FILES,),
        fault_first=True,
    ),
    Rule(
        "RDM-004",
        "RDMA netns mode matches gpuboot_rdma_cni (exclusive for sriov, shared for shared)",
        FAIL,
        "set the mode (`gpuboot install --tags RDM-004`: `rdma system set netns MODE` and "
        "ib_core netns_mode in /etc/modprobe.d/gpuboot-rdma.conf for the next boot)",
        rdma_pod_rules.check_netns_mode,
        (RDMA_SYSTEM_FILE,),
        fault_first=True,
    ),
    Rule(
        "RDM-005",
        "RDMA CM default mode RoCE v2 and ToS gpuboot_rdma_cm_dscp << 2 on rail and VF devices",
        FAIL,
        "re-apply RDMA CM's defaults (`gpuboot install --tags RDM-005`: default_roce_mode and "
        "default_roce_tos under /sys/kernel/config/rdma_cm/DEV/ports/1)",
        rdma_pod_rules.check_cm_defaults,
        (RDMA_CM_FILE, rdma_pod_rules.SRIOV_FILES),
        fault_first=True,
    ),
    Rule(
        "RDM-006",
        "each VF's physfn is the rail NIC of its GPU as the profile's topology says (sriov)",
        FAIL,
        "the rail netdev is not on the PCI function the profile names for its GPU: fix the "
        "netdev names (udev) or the profile's nics[], then re-create the VFs (`gpuboot install "
        "--tags RDM-001`)",
        rdma_pod_rules.check_vf_rails,
        (rdma_pod_rules.SRIOV_FILES,),
        fault_first=True,
    ),
    Rule(
        "MOD-001",
        "required kernel modules loaded",
        FAIL,
        "load the module (modules-load.d via `gpuboot install`); after an OFED change "
        "reinstall so nvidia_peermem rebuilds",
        fabric_rules.check_modules,
        ("lsmod.txt",),
    ),
    Rule(
        "DCG-001",
        "DCGM diagnostics pass",
        FAIL,
        "read the failed DCGM test's advice; reset the GPU, RMA if it fails again",
        bw_rules.check_dcgm,
        _forms("dcgmi_diag"),
    ),
    Rule(
        "BW-001",
        "host-to-device copy bandwidth (nvbandwidth) within band",
        FAIL,
        "check PCIe link and NUMA/IOMMU settings; reseat the GPU if one GPU is slow",
        bw_rules.nvbandwidth_check("nvbandwidth_h2d"),
        _forms("nvbandwidth"),
    ),
    Rule(
        "BW-002",
        "device-to-host copy bandwidth (nvbandwidth) within band",
        FAIL,
        "check PCIe link and NUMA/IOMMU settings; reseat the GPU if one GPU is slow",
        bw_rules.nvbandwidth_check("nvbandwidth_d2h"),
        _forms("nvbandwidth"),
    ),
    Rule(
        "BW-003",
        "device-to-device copy bandwidth (nvbandwidth) within band",
        FAIL,
        "check NVLink state (NVL-001) and fabric manager; reset the GPUs",
        bw_rules.nvbandwidth_check("nvbandwidth_d2d"),
        _forms("nvbandwidth"),
    ),
    Rule(
        "BW-004",
        "single-node NCCL all_reduce bus bandwidth within band",
        FAIL,
        "check NVLink, throttling and PCIe; reset the GPUs and measure again",
        bw_rules.check_all_reduce,
        _forms("all_reduce"),
    ),
    Rule(
        "BW-005",
        "ib_write_bw to a partner node within band",
        FAIL,
        "check the NIC port, cable and switch; compare with ibstat (NIC-001) and QoS (NIC-002)",
        bw_rules.check_ib_write_bw,
        _forms("ib_write_bw"),
    ),
    Rule(
        "BW-006",
        "TCP throughput to a partner node on the management network",
        FAIL,
        "check the management NIC, its link speed and the switch port",
        bw_rules.check_tcp_bw,
        ("tcp_bw_*",),
    ),
)

RULES_BY_ID = {rule.id: rule for rule in RULES}


def check_table_rules(table: Table) -> None:
    """Every rule the component table's roles name is one of RULES (ConfigError naming the
    table's key otherwise). Here, not in the table's loader: the rules stand on the stacks,
    which stand on the table. An undo's ``fails`` is among its role's rules (the loader
    checks that), so the rules lists cover it."""
    for role in table.roles:
        for i, rule in enumerate(role.rules):
            if rule not in RULES_BY_ID:
                raise ConfigError(
                    f"no certify rule {rule!r}",
                    where=f"{table.label}: roles.{role.name}.rules[{i}]",
                    hint="name a rule of gpuboot.checks.rules.RULES (e.g. STK-002)",
                )


def evaluate(evidence: Evidence, ctx: NodeContext, only: list[str] | None = None) -> list[Finding]:
    """Every rule (or the ids/prefixes in ``only``) on one node; a rule that cannot read its
    evidence gives ERROR."""
    start_node()
    findings = []
    for rule in RULES:
        if only and not any(rule.id == o or rule.id.startswith(o) for o in only):
            continue
        try:
            findings.append(rule.evaluate(evidence, ctx))
        except GpubootError as exc:
            findings.append(rule.error(exc))
        except Exception as exc:  # a rule bug is the harness's fault, never the node's
            findings.append(rule.error(RuntimeError(f"{type(exc).__name__}: {exc}")))
    return explain_knock_ons(findings)


# A part gone from the node (a GPU off the bus, a NIC its driver does not see) leaves every
# per-part listing short: the rules reading them cannot judge, and that is not the harness's
# fault. Their ERRORs are "not judged" because of the root's FAIL, so a scheduler sees one
# known failure (scan exit 5), not a harness that broke anew each scan (exit 4).
ROOT_FAILURES = ("GPU-001", "PCI-002")


def explain_knock_ons(findings: list[Finding]) -> list[Finding]:
    """ERRORs on a node where a part-presence rule FAILs become SKIPPED naming the root;
    what the rule itself said stays in the reason."""
    roots = [f for f in findings if f.rule in ROOT_FAILURES and f.status == FAIL]
    if not roots:
        return findings
    because = "; ".join(f"{f.rule} failed ({f.reason[:120]})" for f in roots)
    return [
        replace(
            f,
            status=SKIPPED,
            reason=f"not judged: {because}; {f.reason}",
            action=f"fix {', '.join(r.rule for r in roots)} first: this rule is judged again then",
        )
        if f.status == ERROR
        else f
        for f in findings
    ]


def verdict(findings: list[Finding]) -> str:
    """The worst status; SKIPPED checks prove nothing either way. A node on which no check
    ran is ERROR, never PASS: nothing was judged (the harness's doing, not the hardware's)."""
    statuses = {f.status for f in findings}
    for status in (FAIL, ERROR, WARN):
        if status in statuses:
            return status
    return PASS if statuses - {SKIPPED} else ERROR
