"""ibstat, ibstatus and ibv_devinfo."""

from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.ibstat import parse_ibstat
from gpuboot.evidence.ibstatus import parse_ibstatus
from gpuboot.evidence.ibv_devinfo import parse_ibv_devinfo

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("ibstat"), ids=lambda p: p.name)
def test_every_ibstat_parses(path):
    assert parse_ibstat(path.read_text()).ports


def _down(r):
    return sorted(p.ca for p in r.ports if not p.active)


def test_ibstat_roce_all_active(read):
    r = parse_ibstat(read("ibstat/h100-roce-8x400g-cx7-plus-4x100g-all-active.txt"))
    assert len(r.ports) == 12 and _down(r) == [] and r.complete
    rates = sorted(p.rate_gbits_s for p in r.ports)
    assert rates.count(400) == 8 and rates.count(100) == 4
    assert {p.link_layer for p in r.ports} == {"Ethernet"}
    assert {ca.ca_type for ca in r.cas} == {"MT4129", "MT4125"}


def test_ibstat_two_cx7_down(read):
    r = parse_ibstat(read("ibstat/h100-roce-2-of-8-cx7-ports-down-disabled.txt"))
    assert _down(r) == ["mlx5_11", "mlx5_5"]
    for name in ("mlx5_11", "mlx5_5"):
        p = r.port(name)
        assert (p.state, p.physical_state, p.rate_gbits_s) == ("Down", "Disabled", 40)
        assert p.port_guid == "0x0000000000000000"
        assert next(ca for ca in r.cas if ca.name == name).ca_type == "MT4129"


def test_ibstat_ndr_frontend_eth_down(read):
    r = parse_ibstat(read("ibstat/h100-ndr-ib-8-active-3-frontend-eth-down.txt"))
    ib = [p for p in r.ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8 and all(p.active and p.rate_gbits_s == 400 for p in ib)
    assert all(p.base_lid for p in ib)
    down = [p for p in r.ports if not p.active]
    assert len(down) == 3 and {p.link_layer for p in down} == {"Ethernet"}
    assert {next(ca for ca in r.cas if ca.name == p.ca).ca_type for p in down} == {"MT4125"}


def test_ibstat_bf3_four_space_indent(read):
    r = parse_ibstat(read("ibstat/h100-ndr-ib-8x400g-plus-bf3-eth-all-active.txt"))
    assert len(r.ports) == 9 and _down(r) == []
    bond = r.port("mlx5_bond_0")
    assert bond.rate_gbits_s == 200 and bond.link_layer == "Ethernet"


def test_ibstat_a100_no_trailing_newline(read):
    r = parse_ibstat(read("ibstat/a100-8x200g-ib-all-active.txt"))
    assert len(r.ports) == 9 and {p.rate_gbits_s for p in r.ports} == {200}
    assert r.port("mlx5_8").link_layer == "InfiniBand"


def test_ibstat_ibpanic_partial_output(read):
    r = parse_ibstat(read("ibstat/a100-azure-hdr-partial-output-ibpanic.txt"))
    assert len(r.ports) == 8 and all(p.active for p in r.ports)
    assert not r.complete
    assert "mlx5_8" in r.errors[0] and r.errors[0].startswith("ibpanic")


@pytest.mark.parametrize("path", capture_files("ibstatus"), ids=lambda p: p.name)
def test_every_ibstatus_parses(path):
    assert parse_ibstatus(path.read_text())


def test_ibstatus_azure(read):
    ports = {p.device: p for p in parse_ibstatus(read("ibstatus/azure-hdr200-plus-eth-an0.txt"))}
    ib = ports["mlx5_ib0"]
    assert ib.active and ib.rate_gbits_s == 200 and ib.rate_detail == "4X HDR"
    assert (ib.state_code, ib.phys_state_code) == (4, 5)
    assert ports["mlx5_an0"].link_layer == "Ethernet" and ports["mlx5_an0"].rate_gbits_s == 40


def test_ibstatus_8x_hdr(read):
    ports = parse_ibstatus(read("ibstatus/a100-azure-8x-hdr-all-active.txt"))
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ports) == 9 and len(ib) == 8
    assert all(p.active and p.rate_gbits_s == 200 for p in ib)


def test_ibv_devinfo_cx7(read):
    (dev,) = parse_ibv_devinfo(read("ibv_devinfo/connectx7-roce-mlx5_0-port-active.txt"))
    assert dev.hca_id == "mlx5_0" and dev.fw_ver == "28.43.2026" and dev.vendor_part_id == 4129
    (port,) = dev.ports
    assert port.active and port.state == "PORT_ACTIVE"
    assert port.active_mtu_bytes == 4096 and port.link_layer == "Ethernet"


def test_ibv_devinfo_no_devices():
    assert parse_ibv_devinfo("No IB devices found\n") == ()


@pytest.mark.parametrize("text", ["", "garbage here\n", "Port 1:\n"])
def test_garbage_raises(text):
    for fn in (parse_ibstat, parse_ibstatus, parse_ibv_devinfo):
        with pytest.raises(ParseError):
            fn(text)
