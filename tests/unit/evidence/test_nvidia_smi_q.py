from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.nvidia_smi_q import parse_nvidia_smi_q, parse_nvidia_smi_q_xml

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("nvidia_smi_q"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    result = parse_nvidia_smi_q(path.read_text())
    assert result.gpus and all(g.bus_id for g in result.gpus)


def test_h100_idle(read):
    r = parse_nvidia_smi_q(read("nvidia_smi_q/h100-hbm3-idle-q.txt"))
    (g,) = r.gpus
    assert r.driver_version == "590.48.01" and r.attached_gpus == 1
    assert g.persistence_mode is True and g.mig_mode_current is False
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (
        5,
        5,
        16,
        16,
    )
    assert g.pcie_gen_host_max is None  # "N/A"
    assert g.ecc_mode_current is True
    assert g.ecc_volatile.uncorrectable_total == 0 and g.ecc_aggregate.correctable_total == 0
    assert g.remapped_rows.pending is False and g.remap_pending is False
    assert g.remapped_rows.histogram["max"] == 2560
    assert g.clock_event_reasons_active == ("idle",)
    assert g.fields["PCI/Bus Id"] == "00000000:00:09.0"


def test_h200_mig_enabled_blocks(read):
    (g,) = parse_nvidia_smi_q(read("nvidia_smi_q/h200-mig-enabled-load-q.txt")).gpus
    assert g.mig_mode_current is True and g.mig_mode_pending is True
    assert len(g.mig_devices) == 5
    assert g.mig_devices[0].gpu_instance_id == 2
    assert g.remapped_rows is None  # "Remapped Rows : N/A" under MIG
    assert {p.pid for p in g.processes} >= {12249, 12250, 12267}
    assert all(p.gpu_instance_id == 2 for p in g.processes)


def test_a100_old_driver(read):
    r = parse_nvidia_smi_q(read("nvidia_smi_q/a100-sxm4-40gb-8gpu-q.txt"))
    assert r.driver_version == "460.32.03" and len(r.gpus) == 8
    for g in r.gpus:
        assert g.persistence_mode is False
        assert g.pcie_gen_current == g.pcie_gen_max == 4
        assert g.pcie_width_current == 16
        assert g.remapped_rows.correctable == 0 and not g.remap_pending
        assert g.ecc_volatile.dram_uncorrectable == 0
        assert g.clock_event_reasons_active == ("idle",)  # "Clocks Throttle Reasons" section


def test_page_retirement_subset(read):
    r = parse_nvidia_smi_q(read("nvidia_smi_q/8gpu-q-d-page-retirement-azure.txt"))
    assert [g.bus_id for g in r.gpus] == [f"0000000{i}:00:00.0" for i in range(1, 9)]
    for g in r.gpus:
        assert g.retired_pages.single_bit == 0 and g.retired_pages.double_bit == 0
        assert g.retired_pages.pending is False
        assert g.product_name is None and g.remapped_rows is None  # not in the subset


@pytest.mark.parametrize(
    "name", ["h100-hbm3-8gpu-q-535.161.08.txt", "h100-hbm3-8gpu-q-535.183.01.txt"]
)
def test_h100_8gpu_535(read, name):
    r = parse_nvidia_smi_q(read(f"nvidia_smi_q/{name}"))
    assert len(r.gpus) == 8
    for g in r.gpus:
        assert g.persistence_mode is True
        assert g.pcie_gen_current == g.pcie_gen_max == 5 and g.pcie_width_current == 16
        assert g.remapped_rows.correctable == 0 and g.remapped_rows.pending is False
        assert g.fabric_state == "Completed"


def test_throttle_reasons_exposed(read):
    # 535.161.08 capture: HW power brake slowdown is active on every GPU (a fact, not a verdict)
    r = parse_nvidia_smi_q(read("nvidia_smi_q/h100-hbm3-8gpu-q-535.161.08.txt"))
    assert all("hw_power_brake_slowdown" in g.clock_event_reasons_active for g in r.gpus)
    assert r.gpus[0].pcie_gen_host_max == 5
    r2 = parse_nvidia_smi_q(read("nvidia_smi_q/h100-hbm3-8gpu-q-535.183.01.txt"))
    busy = next(g for g in r2.gpus if g.bus_id == "00000000:75:00.0")
    assert busy.clock_event_reasons_active == (
        "sw_power_cap",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
    )
    assert busy.processes[0].used_memory_mib == 9212
    assert r2.gpus[0].pcie_gen_host_max is None


def test_xid63_excerpt_remap_pending(read):
    r = parse_nvidia_smi_q(
        read("nvidia_smi_q/a100-sxm4-80gb-xid63-dram-correctable-177-remap-pending-excerpt.txt")
    )
    (g,) = r.gpus
    assert r.elided and g.elided
    assert r.attached_gpus == 8  # only one GPU shown: the excerpt is partial
    assert g.ecc_volatile.dram_correctable == 177 and g.ecc_aggregate.dram_correctable == 177
    assert g.remapped_rows.correctable == 1 and g.remapped_rows.pending is True
    assert g.remap_pending
    assert g.remapped_rows.histogram == {"max": 639, "high": 1, "partial": 0, "low": 0, "none": 0}
    assert g.pcie_gen_current is None  # elided section: unknown, not healthy


# Synthetic document shaped after NVIDIA's nvsmi_device_v12.dtd element names (no real -q -x
# capture is in the corpus); it checks the mapping, not any real-hardware fact.
_XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <driver_version>550.54.15</driver_version><cuda_version>12.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:19:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <persistence_mode>Enabled</persistence_mode>
    <mig_mode><current_mig>Disabled</current_mig><pending_mig>Disabled</pending_mig></mig_mode>
    <pci><pci_gpu_link_info>
      <pcie_gen><max_link_gen>5</max_link_gen><current_link_gen>4</current_link_gen>
        <max_host_link_gen>N/A</max_host_link_gen></pcie_gen>
      <link_widths><max_link_width>16x</max_link_width>
        <current_link_width>8x</current_link_width></link_widths>
    </pci_gpu_link_info><replay_counter>3</replay_counter></pci>
    <clocks_event_reasons>
      <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>
      <clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>
    </clocks_event_reasons>
    <ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>
    <ecc_errors><volatile><sram_correctable>0</sram_correctable>
      <sram_uncorrectable_parity>1</sram_uncorrectable_parity>
      <sram_uncorrectable_secded>2</sram_uncorrectable_secded>
      <dram_correctable>5</dram_correctable><dram_uncorrectable>0</dram_uncorrectable>
    </volatile></ecc_errors>
    <remapped_rows><remapped_row_corr>1</remapped_row_corr><remapped_row_unc>0</remapped_row_unc>
      <remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>
      <row_remapper_histogram><row_remapper_histogram_max>2559 bank(s)</row_remapper_histogram_max>
      </row_remapper_histogram></remapped_rows>
    <gpu_power_readings><power_draw>70.1 W</power_draw>
      <current_power_limit>700.00 W</current_power_limit></gpu_power_readings>
  </gpu>
</nvidia_smi_log>
"""


def test_xml_mapping():
    r = parse_nvidia_smi_q_xml(_XML)
    (g,) = r.gpus
    assert r.driver_version == "550.54.15"
    assert g.bus_id == "00000000:19:00.0" and g.persistence_mode is True
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_gen_host_max) == (4, 5, None)
    assert (g.pcie_width_current, g.pcie_width_max, g.pcie_replays) == (8, 16, 3)
    assert g.clock_event_reasons_active == ("hw_slowdown",)
    assert g.ecc_volatile.sram_uncorrectable == 3 and g.ecc_volatile.correctable_total == 5
    assert g.remap_pending and g.remapped_rows.histogram == {"max": 2559}
    assert g.power_draw_w == 70.1 and g.power_limit_w == 700.0
    assert parse_nvidia_smi_q(_XML).gpus[0].bus_id == g.bus_id  # text entry point sniffs XML


@pytest.mark.parametrize("text", ["", "\n\n", "hello\nworld\n", "==============NVSMI LOG====\n"])
def test_garbage_text_raises(text):
    with pytest.raises(ParseError):
        parse_nvidia_smi_q(text)


@pytest.mark.parametrize("text", ["", "<nvidia_smi_log>", "<foo/>", "<nvidia_smi_log/>"])
def test_garbage_xml_raises(text):
    with pytest.raises(ParseError):
        parse_nvidia_smi_q_xml(text)
