from __future__ import annotations

import pytest

from gpuboot.evidence import parser_for
from gpuboot.evidence.forms import FORMS, form_of, parser_of
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.mig import parse_mig_lgi, parse_mig_lgip
from gpuboot.evidence.nvidia_smi_q import parse_nvidia_smi_q, parse_nvidia_smi_q_xml


@pytest.mark.parametrize(
    "name",
    [
        "nvidia-smi_-q.txt",
        "nvidia-smi_-q_-x.xml",
        "nvidia-smi_--query-gpu=index,name_--format=csv.csv",
        "nvidia-smi_nvlink_-s.txt",
        "nvidia-smi_nvlink_-e.txt",
        "nvidia-smi_topo_-m.txt",
        "nvidia-smi_mig_-lgip.txt",
        "nvidia-smi_mig_-lgi.txt",
        "nvidia-smi_mig_-lci.txt",
        "all_reduce_perf.txt",
        "ib_write_bw_node2.txt",
        "ibstat.txt",
        "ibstatus.txt",
        "ibv_devinfo.txt",
        "mlnx_qos_-i_eth4.txt",
        "nvbandwidth.txt",
        "nvbandwidth_-j.json",
        "dcgmi_diag_-r_3.txt",
        "dcgmi_diag_-r_3_-j.json",
        "dmesg.txt",
        "lsmod.txt",
        "proc_driver_nvidia_version.txt",
        "modinfo_nvidia_peermem.txt",
        "dpkg-query_-W.txt",
        "apt-mark_showhold.txt",
        "apt-config_dump_Unattended-Upgrade.txt",
    ],
)
def test_every_probe_name_has_a_parser(name):
    assert parser_for(name) is not None
    assert parser_for(f"/bundle/host1/{name}") is not None


def test_specific_patterns_win():
    assert parser_for("nvidia-smi_-q_-x.xml") is parse_nvidia_smi_q_xml
    assert parser_for("nvidia-smi_-q_-d_PAGE_RETIREMENT.txt") is parse_nvidia_smi_q
    assert parser_for("nvidia-smi_mig_-lgip.txt") is parse_mig_lgip
    assert parser_for("nvidia-smi_mig_-lgi.txt") is parse_mig_lgi
    assert parser_for("dmesg.txt") is parse_kernel_log
    assert parser_for("meta.json") is None and parser_for("MANIFEST.json") is None
    assert all(callable(p) for forms in FORMS.values() for _pat, _form, p in forms if p)


def test_registry_parses_real_capture(read):
    text = read("nvlink_s/h100-pcie-2gpu-nvlink-bridge-12of18-active.txt")
    assert len(parser_for("nvidia-smi_nvlink_-s.txt")(text).gpus) == 2


def test_one_registry_names_form_and_parser():
    """The rules, the fingerprint and parser_for read one table: a form the rules read has
    the parser parser_for gives its file."""
    assert parser_for("cat_var_log_syslog.txt") is parse_kernel_log  # the rules read it too
    assert parser_for("dcgmi_nvlink_-s.txt") is parser_of("nvlink_s", "dcgmi")
    assert form_of("mig_lgi", "nvidia-smi_mig_-lgip.txt") is None  # -lgip is not -lgi
    # only `journalctl -k` (--dmesg) is the kernel log: a unit's journal holds none of it
    assert form_of("kernel_log", "journalctl_-k_-b_-1.txt") == "journalctl -k"
    assert form_of("kernel_log", "journalctl_--dmesg.txt") == "journalctl -k"
    assert form_of("kernel_log", "journalctl_-u_nvidia-fabricmanager.txt") is None
    assert parser_for("journalctl_-u_nvidia-fabricmanager.txt") is None
