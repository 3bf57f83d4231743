"""Every file name a bundle holds, defined once: the probe files the collector writes (each
the command with spaces as ``_``), meta.json and MANIFEST.json.

Collection writes these names and the rules, reports and gate read them; a real capture may
hold other forms of the same evidence (``gpuboot.evidence.forms``).
"""

from __future__ import annotations

META = "meta.json"
MANIFEST = "MANIFEST.json"

# nvidia-smi
QUERY_GPU_FILE = "nvidia-smi_--query-gpu_--format=csv.csv"
SMI_Q_FILE = "nvidia-smi_-q.txt"
TOPO_FILE = "nvidia-smi_topo_-m.txt"
MIG_LGI_FILE = "nvidia-smi_mig_-lgi.txt"
NVLINK_STATUS_FILE = "nvidia-smi_nvlink_-s.txt"
NVLINK_ERRORS_FILE = "nvidia-smi_nvlink_-e.txt"
# the PCI bus's own count of the parts (PCI-002)
LSPCI_GPU_FILE = "lspci_-n_-d_10de:.txt"
LSPCI_NIC_FILE = "lspci_-n_-d_15b3:.txt"
# kernel, driver, node
DMESG_FILE = "dmesg.txt"
LSMOD_FILE = "lsmod.txt"
NVIDIA_VERSION_FILE = "proc_driver_nvidia_version.txt"
REBOOT_REQUIRED_FILE = "reboot-required.txt"
BOOT_ID_FILE = "proc_sys_kernel_random_boot_id.txt"
IBSTAT_FILE = "ibstat.txt"
GIDS_FILE = "show_gids.txt"  # the RoCE rails' GID tables (NIC-004)
# why the bandwidth probes did not run (probe lock held, GPUs busy); empty when they did
PRECONDITIONS_FILE = "gpuboot-preconditions.txt"
# the package manager: Debian
DPKG_FILE = "dpkg-query_-W.txt"
APT_HOLDS_FILE = "apt-mark_showhold.txt"
APT_UNATTENDED_FILE = "apt-config_dump_Unattended-Upgrade.txt"
# ... and EL (RHEL/Rocky/Alma)
RPM_FILE = "rpm_-qa.txt"
DNF_VERSIONLOCK_FILE = "dnf_versionlock_list.txt"
DNF_MODULES_FILE = "dnf_module_list_--enabled.txt"
DNF_AUTOMATIC_FILE = "systemctl_show_dnf-automatic.txt"


def unit_active_file(unit: str) -> str:
    """`systemctl is-active UNIT`'s file: the state of a unit a component runs."""
    return f"systemctl_is-active_{unit}.txt"


FABRICMANAGER_FILE = unit_active_file("nvidia-fabricmanager")


def mlnx_qos_file(netdev: str) -> str:
    return f"mlnx_qos_-i_{netdev}.txt"


def ecn_file(netdev: str) -> str:
    return f"sys_class_net_{netdev}_ecn_enable.txt"


# the bandwidth probes, one file per run (run = 1, 2, ...: the rules take the median)
def nvbandwidth_file(test: str, run: int) -> str:
    return f"nvbandwidth_-j_-t_{test}.run{run}.json"


def all_reduce_file(size: str, ngpus: int, run: int) -> str:
    return f"all_reduce_perf_-b_{size}_-e_{size}_-g_{ngpus}.run{run}.txt"


def dcgmi_diag_file(level: int) -> str:
    return f"dcgmi_diag_-r_{level}.txt"


# the pair probes, one file per partner
def ib_write_bw_file(hca: str, peer: str) -> str:
    return f"ib_write_bw_-d_{hca}_{peer}.txt"


def tcp_bw_file(peer: str) -> str:
    return f"tcp_bw_{peer}.txt"


def is_safe_name(name: object) -> bool:
    """A plain file name: one path component, not '.'/'..', no '/', no NUL, not empty."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\0" not in name
    )
